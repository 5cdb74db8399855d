"""Test-wide setup: 8 fake CPU devices (for sharding tests) and shared fixtures."""

import os

# XLA:CPU without LLVM optimization for the tests: they compile hundreds of small programs,
# and LLVM's optimization passes were most of their time (2.2x on tests/attention and
# tests/models) and none of what they check. The README end-to-end test (slow) runs with the
# defaults users get. Training subprocesses get the same flag (tests/train/conftest.py).
TEST_XLA_FLAGS = "--xla_backend_optimization_level=0"
# Must happen before JAX initializes its backends.
os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count=8 {TEST_XLA_FLAGS}")
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
