"""Fixtures for the seqjax.data tests: the shared real data and a per-session TFDS folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import seqjax.data as sd


def _shared_data() -> Path | None:
    candidates = [Path(__file__).resolve().parents[2].parent / "shared" / "data"]
    if os.environ.get("SEQJAX_SHARED_DATA"):
        candidates.append(Path(os.environ["SEQJAX_SHARED_DATA"]))
    for path in candidates:
        if (path / "README.md").is_file():
            return path
    return None


SHARED_DATA = _shared_data()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data (or $SEQJAX_SHARED_DATA); skips when neither exists."""
    if SHARED_DATA is None:
        pytest.skip(
            "shared data not found at <repo>/../shared/data or $SEQJAX_SHARED_DATA "
            "(tiny shakespeare, linux_uapi, imdb tarball)"
        )
    return SHARED_DATA


@pytest.fixture(scope="session")
def tfds_dir(tmp_path_factory) -> Path:
    """One TFDS data_dir per test session (per xdist worker), so builds are reused."""
    return tmp_path_factory.mktemp("tfds")


@pytest.fixture(scope="session")
def make_cfg(tfds_dir):
    """Returns `config.data` with test defaults plus overrides."""

    def make(**overrides):
        cfg = sd.default_config()
        cfg.data_dir = str(tfds_dir)
        cfg.manual_dir = None
        cfg.download = False
        cfg.batch_size = 8
        cfg.seq_len = 64
        cfg.prefetch = 2
        for k, v in overrides.items():
            setattr(cfg, k, v)
        return cfg

    return make


@pytest.fixture(scope="session")
def shakespeare(shared_data) -> str:
    return str(shared_data / "tinyshakespeare" / "input.txt")
