"""``model.dtype``: the compute dtype, ``"auto"`` resolved from the backend (issue 36).

``"auto"`` computes in bfloat16 on an accelerator (GPU, TPU: cuDNN's fused attention and
the tensor cores take 16-bit inputs; float32 there means TF32 matmuls and slower kernels)
and in float32 on CPU. Parameters and optimizer state stay float32 whatever the compute
dtype (Flax ``param_dtype``; mixed precision, Micikevicius et al. 2018). An explicit
``"float32"``, ``"bfloat16"`` or ``"float16"`` always wins.

``DTYPES`` is the name -> dtype table the model configs validate against and read
``compute_dtype`` from; ``"auto"`` is looked up when it is read (tracing), by then the
backend is known.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp

AUTO = "auto"
EXPLICIT = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
ACCELERATORS = ("gpu", "tpu")


def resolve(name: str, backend: str | None = None) -> str:
    """The concrete dtype name of ``model.dtype`` on ``backend`` (default: this process's).

    Raises:
      ValueError: for a name that is neither ``"auto"`` nor one of ``EXPLICIT``.
    """
    if name in EXPLICIT:
        return name
    if name != AUTO:
        raise ValueError(f"model.dtype={name!r} is not one of {(AUTO, *EXPLICIT)}")
    backend = jax.default_backend() if backend is None else backend
    return "bfloat16" if backend in ACCELERATORS else "float32"


def describe(name: str, backend: str | None = None) -> str:
    """For the run header: ``"bfloat16 (auto on gpu)"``, or the explicit name."""
    if name != AUTO:
        return name
    backend = jax.default_backend() if backend is None else backend
    return f"{resolve(name, backend)} (auto on {backend})"


class _DtypeTable(Mapping):
    """``{"auto", "float32", "bfloat16", "float16"} -> jnp dtype``; ``"auto"`` resolved
    when read."""

    def __getitem__(self, name):
        return EXPLICIT[resolve(name)]

    def __iter__(self):
        return iter((AUTO, *EXPLICIT))

    def __len__(self):
        return 1 + len(EXPLICIT)

    def __contains__(self, name):
        return name == AUTO or name in EXPLICIT


DTYPES = _DtypeTable()
