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
# On a GPU (JAX_PLATFORMS=cuda): float32 matmuls in full precision, not TF32, so that the
# float32 comparisons against the references hold (the Pallas kernels pin it themselves).
ON_GPU_RUN = any(p in os.environ["JAX_PLATFORMS"] for p in ("cuda", "gpu", "rocm"))
if ON_GPU_RUN:
    os.environ.setdefault("JAX_DEFAULT_MATMUL_PRECISION", "highest")
# Implicit rank promotion ([H, D] + [B, T, H, D] broadcast silently) is an error in the tests,
# in this process and in the training subprocesses they start (the variable is inherited).
os.environ.setdefault("JAX_NUMPY_RANK_PROMOTION", "raise")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

# Absolute tolerances of float comparisons against a reference, by backend: CPU float32 is
# exact to rounding; GPU float32 (matmul precision "highest", kernels that may reassociate)
# is looser; 16-bit inputs round the products.
TOLERANCES = {
    "cpu": {"float32": 2e-5, "bfloat16": 3e-2, "float16": 5e-3},
    "gpu": {"float32": 2e-3, "bfloat16": 3e-2, "float16": 5e-3},
    "tpu": {"float32": 2e-3, "bfloat16": 3e-2, "float16": 5e-3},
}


def tolerance(dtype) -> float:
    """The absolute tolerance of a ``dtype`` comparison on this process's backend."""
    import jax
    import numpy as np

    backend = jax.default_backend()
    return TOLERANCES.get(backend, TOLERANCES["gpu"])[np.dtype(dtype).name]


def require_devices(n: int) -> None:
    """Skip (naming the reason) a test that needs ``n`` devices where fewer exist: the CPU
    run fakes 8 devices (``XLA_FLAGS`` above); one GPU has 1."""
    import jax

    have = jax.device_count()
    if have < n:
        pytest.skip(
            f"needs {n} devices, {jax.default_backend()} has {have} (the CPU run fakes 8: "
            "JAX_PLATFORMS=cpu)"
        )


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
