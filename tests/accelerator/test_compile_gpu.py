"""Compiled for an H100 and an A100 on the CPU machine (issue 49; ``seqjax.compile_targets``).

``test_lowering`` proves that the kernels lower; here XLA's GPU compiler (Triton included)
compiles them for compile-only devices, so a kernel asking for more shared memory than the
device has fails here as on the device, with the compiler's own message (proven by the old
512-row tiles), and each kernel's shared memory is the compiler's figure:

* every setting the tile planner can choose over its sweep (``test_pallas_plan``: T 128 ..
  262,144, head dims 16..256, bf16/f16/f32, the five callers) compiles for each device, and
  each kernel's bytes are within the budget and equal to the planner's table
  (``pallas_smem``, the H100's figures; the A100's are the same or fewer); the callers
  themselves compile at sweep shapes;
* the whole train step (forward, backward, optimizer) of the full-size configs, with
  ``model.dtype="auto"``, compiles for the H100, and the decoding steps do; the tensor- and
  context-parallel steps compile for 8 H100s (topology 1x1x8).

What only a device shows (speed, TF32 numerics) is in the README ("Compile-only checks").

Legend: B batch, T length, H heads, D head dim.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax import attention, compile_targets
from seqjax.attention import blockwise, pallas_blocks, pallas_plan, pallas_probe, pallas_smem
from tests.accelerator import lowering_lib as lib
from tests.attention import test_pallas_plan as sweep
from tests.conftest import REPO

H100_SMEM = compile_targets.GPU_DEVICES["h100"]["smem_optin"]
A100_SMEM = compile_targets.GPU_DEVICES["a100"]["smem_optin"]
DTYPES = {"bfloat16": jnp.bfloat16, "float16": jnp.float16, "float32": jnp.float32}


def planned_settings(budget: int) -> list[tuple[str, int, int, int]]:
    """Every ``(dtype, padded head dim, tile, stages)`` the planner picks over its sweep."""
    found = set()
    for t in sweep.LENGTHS:
        for d in sweep.HEAD_DIMS:
            for name, dtype in DTYPES.items():
                for pattern in sweep.PATTERNS:
                    for p in sweep._caller_tiles(pattern, t, d, dtype, budget):
                        found.add((name, p.head_dim, p.block_q, p.num_stages))
    return sorted(found)


def _sample(settings: list, keep: int) -> set:
    """The settings nearest the budget (the likeliest to fail), then every n-th."""
    by_need = sorted(settings, key=lambda s: -max(_planned_smem(s).values()))
    return set(by_need[:keep]) | set(settings[:: max(1, len(settings) // keep)])


def _planned_smem(setting) -> dict:
    name, d, tile, stages = setting
    return pallas_plan.smem_of(tile, tile, d, d, np.dtype(DTYPES[name]).itemsize, stages)


def _table_row(setting) -> tuple:
    name, d, tile, stages = setting
    return pallas_smem.TABLE[(np.dtype(DTYPES[name]).itemsize, d, tile, stages)]


def _params(device_name: str, budget: int, keep: int):
    settings = planned_settings(budget)
    sampled = _sample(settings, keep)
    return [
        pytest.param(device_name, s, marks=() if s in sampled else pytest.mark.slow,
                     id=f"{device_name}-{s[0]}-d{s[1]}-t{s[2]}-st{s[3]}")
        for s in settings
    ]  # fmt: skip


def test_every_planned_setting_is_in_the_compilers_table():
    """The planner's figures are the compiler's for every setting it can choose."""
    for budget in sweep.BUDGETS.values():
        for setting in planned_settings(budget):
            assert max(_table_row(setting)) <= budget, setting


@pytest.mark.parametrize(
    "device_name,setting", _params("h100", H100_SMEM, 2) + _params("a100", A100_SMEM, 1)
)
def test_planned_kernels_compile_within_the_budget(device_name, setting, request):
    """The three kernels at a planned setting compile for the device at its own budget,
    with a key mask, segment ids and dropout; the compiler's bytes are within the budget and
    are the table's (so the table matches this compiler)."""
    devices = request.getfixturevalue(device_name)
    budget = compile_targets.shared_memory_budget(devices[0])
    name, d, tile, stages = setting
    got = pallas_probe.probe_kernels(devices[0], DTYPES[name], d, tile, stages, budget)
    assert max(got.values()) <= budget, got
    row = dict(zip(pallas_plan.KERNELS, _table_row(setting)))
    if device_name == "h100":  # the table is the H100's (sm_90): the same figures
        assert got == row
    else:  # sm_80 stages no Hopper wgmma operands: the same or fewer bytes
        assert all(got[k] <= row[k] for k in row), (got, row)


def test_old_512_row_tiles_fail_with_the_compilers_message(h100):
    """bf16, D 64, 512-row tiles, 2 stages (what dense once handed the kernels): with
    seqjax's guard lifted, the compiler refuses them with the H200's message of issue 36;
    so the compile-only check can fail."""
    t, bs = 1024, 512
    table, count = blockwise.dense_table(2, 2, bs, bs, causal=False, offset=0)

    def fn(q, k, v):
        return pallas_blocks.block_sparse_attention(
            q, k, v, table=table, count=count, block_q=bs, block_k=bs, num_stages=2
        )

    x = jax.ShapeDtypeStruct((1, t, 1, 64), jnp.bfloat16)
    with pytest.raises(Exception, match=r"Shared memory size limit exceeded: requested 327680, "
                       r"available: 232448"):  # fmt: skip
        compile_targets.compile_for(fn, h100, x, x, x, budget=1 << 22)  # guard lifted


def test_a_tile_that_fits_compiles_and_reports_its_bytes(h100):
    """The same call at the planner's tiles compiles; its kernels' bytes are read back."""
    x = jax.ShapeDtypeStruct((1, 1024, 1, 64), jnp.bfloat16)
    dense = lambda q, k, v: attention.get("dense")(q, k, v, implementation="pallas")  # noqa: E731
    found = compile_targets.kernel_shared_memory(dense, h100, x, x, x)
    assert set(found) == {"seqjax_block_sparse_fwd"}
    assert 0 < found["seqjax_block_sparse_fwd"] <= H100_SMEM


# --------------------------------------------------------------- the callers at sweep shapes

CALLERS = {
    "dense": dict(implementation="pallas"),
    "sparse_strided": dict(implementation="pallas"),
    "sparse_fixed": dict(implementation="pallas"),
    "flex": dict(pattern="sliding_window", window=48, implementation="pallas"),
    "flex_bigbird": dict(pattern="bigbird", window=1, num_global=1, num_random=0,
                         implementation="pallas"),
}  # fmt: skip
DEFAULT_CALLERS = {("dense", 65536, 128, "bfloat16"), ("sparse_strided", 4096, 64, "bfloat16")}


def _caller_cases():
    cases = []
    for caller in CALLERS:
        for t in (4096, 65536):
            for d in (64, 128):
                for dtype in ("bfloat16", "float32"):
                    fast = (caller, t, d, dtype) in DEFAULT_CALLERS
                    cases.append(pytest.param(caller, t, d, dtype,
                                              marks=() if fast else pytest.mark.slow))  # fmt: skip
    return cases


@pytest.mark.parametrize("caller,t,d,dtype", _caller_cases())
def test_callers_compile_for_the_h100(caller, t, d, dtype, h100):
    """Each Pallas caller, forward and backward, causal, compiles at sweep shapes with the
    tiles the planner gives it on an H100, every kernel within the budget."""
    name = "flex" if caller.startswith("flex") else caller
    opts = dict(CALLERS[caller])

    def loss(q, k, v):
        return attention.get(name)(q, k, v, causal=True, **opts).astype(jnp.float32).sum()

    x = jax.ShapeDtypeStruct((1, t, 2, d), DTYPES[dtype])
    found = compile_targets.kernel_shared_memory(jax.grad(loss, (0, 1, 2)), h100, x, x, x)
    assert {n for n in found if n.startswith("seqjax_block_sparse")} >= {
        "seqjax_block_sparse_fwd", "seqjax_block_sparse_dkdv", "seqjax_block_sparse_dq"
    }  # fmt: skip
    assert max(found.values()) <= H100_SMEM, found


# --------------------------------------------------------------------- whole train steps

# The full-size configs (the variants meant for an accelerator), compiled at their own
# sizes (slow: char_lm's default is compiled in the default run by test_dry_run).
GPU_CONFIGS = [
    ("char_lm.py", "default"),
    ("sparse_transformer_enwik8.py", "default"),
    ("transformer_xl_enwik8.py", "enwik8_12l"),
    ("lsh_lm.py", "default"),
    ("lra_listops.py", "default"),
    ("lra_text.py", "default"),
    ("mlm.py", None),
]


def load_config(path: str, variant: str | None):
    from seqjax.configs import common

    config = common.load_file(REPO / "configs" / path).get_config(*([variant] if variant else []))
    if "dtype" in config.model:
        config.model.dtype = "auto"
    return config


@pytest.mark.parametrize(
    "path,variant",
    [
        pytest.param(p, v, marks=() if i == 0 else pytest.mark.slow)
        for i, (p, v) in enumerate(GPU_CONFIGS)
    ],  # fmt: skip
)
def test_full_train_step_compiles_for_the_h100(path, variant, h100):
    """Forward, backward and the optimizer update of the config's own sizes compile for
    one H100 (``model.dtype="auto"``: bf16 there). Whether they fit its 80 GB is the dry
    run's question (``test_dry_run``): a paper-size step may need a mesh of several."""
    from seqjax.train import dry_run

    config = load_config(path, variant)
    compiled, (state, _) = dry_run.compile_train_step(config, h100, lib._fake_info(config))
    mem = compiled.memory_analysis()
    params = dry_run.shard_bytes(state["params"])
    assert mem.argument_size_in_bytes >= params > 0 and mem.temp_size_in_bytes > 0
    assert jax.tree.leaves(state["params"])[0].dtype == jnp.float32  # master weights


# ----------------------------------------------------------------------- decoding steps

DECODERS = {
    "kv_cache": ("char_lm.py", {}),
    "pattern_cache": ("sparse_lm.py", {}),
}


@pytest.mark.parametrize("kind", DECODERS)
def test_decoding_step_compiles_for_the_h100(kind, h100):
    """One cached decoding step (the body of ``tasks.sampling``'s scan: a token in, the
    logits and the updated caches out) compiles for the H100: the KV cache (dense) and the
    pattern caches of the Sparse Transformer (ring buffers, summaries)."""
    from seqjax import tasks
    from seqjax.models import TransformerLM

    path, _ = DECODERS[kind]
    config = load_config(path, "smoke")
    info = lib._fake_info(config)
    with compile_targets.compiling_for(h100):
        model_cfg = tasks.for_run(config, info).model_config(config, info)
        model = TransformerLM(model_cfg, decode=True)
        tokens = jnp.zeros((2, model_cfg.max_len), jnp.int32)
        shapes = jax.eval_shape(model.init, jax.random.key(0), tokens)  # the caches' dtypes
    tok = jnp.zeros((2, 1), jnp.int32)

    def step(variables, tok):
        logits, mut = model.apply(variables, tok, mutable=["cache"])
        return logits, mut["cache"]

    compiled = compile_targets.compile_for(step, h100, shapes, tok)
    assert compiled.memory_analysis().argument_size_in_bytes > 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "mesh",
    [dict(data=2, fsdp=2, tensor=2), dict(data=2, sequence=4)],
    ids=["model_parallel", "context_parallel"],
)
def test_parallel_train_steps_compile_for_8_h100s(mesh):
    """Tensor parallelism (heads, the feed-forward width) and context parallelism (ring
    attention over ``sequence``) compile for 8 H100s in one box (topology 1x1x8)."""
    from seqjax.train import dry_run

    why = compile_targets.problem("h100x8")
    if why is not None:
        pytest.skip(f"compile-only h100x8: {why}")
    devices = compile_targets.devices("h100x8")
    config = lib.family_config("lm_dense")
    config.model.num_heads = 4
    config.mesh.update(**mesh)
    config.data.batch_size = 4
    config.model.dtype = "auto"
    compiled, (state, _) = dry_run.compile_train_step(config, devices, lib._fake_info(config))
    assert compiled.memory_analysis().argument_size_in_bytes > 0
    assert len(jax.tree.leaves(state["params"])[0].sharding.device_set) == 8
