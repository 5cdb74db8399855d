"""Test-wide setup: 8 fake CPU devices (for sharding tests) and shared fixtures."""

import os

# Must happen before JAX initializes its backends.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Implicit rank promotion ([H, D] + [B, T, H, D] broadcast silently) is an error in the tests,
# in this process and in the training subprocesses they start (the variable is inherited).
os.environ.setdefault("JAX_NUMPY_RANK_PROMOTION", "raise")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path | None:
    """``../shared/data`` beside the repository (or ``$SEQJAX_SHARED_DATA``), if present."""
    env = os.environ.get("SEQJAX_SHARED_DATA")
    path = Path(env) if env else REPO.parent / "shared" / "data"
    return path if path.is_dir() else None


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = shared_data_dir()
    if path is None:
        pytest.skip("../shared/data is not present beside the repository (CI always has it)")
    return path
