"""Compile-only accelerators (``seqjax.compile_targets``; issue 49): an H100 and an A100
(XLA's GPU compiler from the ``jax-cuda12-pjrt`` wheel) and TPU v5e slices (``libtpu``).
Each fixture skips with the reason when its compiler is absent (``python -m
seqjax.compile_targets fetch``, ``pip install -e ".[tpu-compile]"``; CI has both)."""

import pytest

from seqjax import compile_targets


def _target(name: str) -> list:
    why = compile_targets.problem(name)
    if why is not None:
        pytest.skip(f"compile-only {name}: {why}")
    return compile_targets.devices(name)


@pytest.fixture(scope="session")
def h100() -> list:
    """One compile-only H100 (227 KiB of shared memory per block, 80 GB)."""
    return _target("h100")


@pytest.fixture(scope="session")
def a100() -> list:
    """One compile-only A100 (163 KiB of shared memory per block, 80 GB)."""
    return _target("a100")


@pytest.fixture(scope="session")
def tpu_v5e() -> list:
    """A compile-only TPU v5e 2x2 slice: 4 chips."""
    return _target("v5e")


@pytest.fixture(scope="session")
def tpu_v5e_8() -> list:
    """A compile-only TPU v5e 2x4 slice: 8 chips."""
    return _target("v5e-8")
