"""Compiled for TPU v5e slices on the CPU machine (issue 49; ``seqjax.compile_targets``).

``libtpu`` compiles for compile-only TPU topologies: the splash (Mosaic) kernels through
Mosaic's whole pipeline, under ``shard_map`` over the batch as in training (outside a mesh
XLA refuses to partition a Mosaic call), and the whole train step over a v5e 2x2 slice (4
chips); over 2x4 (8 chips) the model-parallel (``mesh.tensor``) and context-parallel
(``mesh.sequence``) steps. ``memory_analysis`` gives each program's bytes per chip.

Legend: B batch, T length, H heads, D head dim.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from seqjax import attention, compile_targets
from seqjax.train import dry_run, sharding
from tests.accelerator import lowering_lib as lib

B, T, H, D = 8, 1024, 4, 128


def _mesh(devices, **sizes):
    shape = tuple(sizes.get(a, 1) for a in sharding.MESH_AXES)
    return jax.make_mesh(
        shape, sharding.MESH_AXES, axis_types=(jax.sharding.AxisType.Auto,) * 4,
        devices=devices,
    )  # fmt: skip


@pytest.mark.parametrize(
    "mechanism,opts",
    [
        ("dense", {}),
        pytest.param("flex", dict(pattern="sliding_window", window=256), marks=pytest.mark.slow),
        pytest.param(
            "sparse_fixed", dict(stride=128, c=32, head_mode="split"), marks=pytest.mark.slow
        ),  # fmt: skip
    ],
)
def test_splash_kernels_compile_for_v5e_under_shard_map(mechanism, opts, tpu_v5e):
    """``auto`` on TPU is splash: forward and backward compile for the 4 chips, the kernels
    under ``shard_map`` over the batch (the mesh's data axis), as Mosaic calls."""
    mesh = _mesh(tpu_v5e, data=4)
    x = jax.ShapeDtypeStruct((B, T, H, D), jnp.bfloat16,
                             sharding=NamedSharding(mesh, P("data")))  # fmt: skip

    def loss(q, k, v):
        out = attention.get(mechanism)(q, k, v, causal=True, **opts)
        return out.astype(jnp.float32).sum()

    with compile_targets.compiling_for(tpu_v5e), sharding.rules_and_mesh(mesh):
        lowered = jax.jit(jax.grad(loss, (0, 1, 2))).trace(x, x, x).lower()
    text = lowered.as_text()
    assert "tpu_custom_call" in text and "manual_computation" in text
    compiled = lowered.compile()
    assert compiled.memory_analysis().argument_size_in_bytes == 3 * B * T * H * D * 2 // 4


@pytest.mark.parametrize(
    "family,mesh",
    [
        ("lm_dense", dict(data=2, fsdp=2)),
        pytest.param("lm_sparse", dict(data=2, fsdp=2), marks=pytest.mark.slow),
        pytest.param("classifier", dict(data=4), marks=pytest.mark.slow),
    ],
)
def test_train_step_compiles_for_v5e(family, mesh, tpu_v5e):
    """The whole train step (loss, backward, optimizer) compiles for a v5e 2x2 slice with
    the mesh over its 4 chips; the splash kernels are in it."""
    config = lib.family_config(family)
    config.mesh.update(**mesh)
    config.data.batch_size = 4
    config.model.dtype = "auto"
    compiled, (state, _) = dry_run.compile_train_step(config, tpu_v5e, lib._fake_info(config))
    assert "tpu_custom_call" in compiled.as_text()
    mem = compiled.memory_analysis()
    assert mem.argument_size_in_bytes >= dry_run.shard_bytes(state["params"]) > 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "mesh",
    [dict(data=2, fsdp=2, tensor=2), dict(data=2, sequence=4), dict(fsdp=2, sequence=2, tensor=2)],
    ids=["model_parallel", "context_parallel", "both"],
)
def test_parallel_train_steps_compile_for_v5e_2x4(mesh, tpu_v5e_8):
    """Model parallelism (heads and the feed-forward width over ``tensor``) and context
    parallelism (ring attention over ``sequence``) compile for the 8 chips of a 2x4 slice."""
    config = lib.family_config("lm_dense")
    config.model.num_heads = 4
    config.mesh.update(**mesh)
    config.data.batch_size = 4
    config.model.dtype = "auto"
    compiled, (state, _) = dry_run.compile_train_step(config, tpu_v5e_8, lib._fake_info(config))
    assert compiled.memory_analysis().temp_size_in_bytes >= 0
    assert len(jax.tree.leaves(state["params"])[0].sharding.device_set) == 8
