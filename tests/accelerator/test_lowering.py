"""The accelerator path lowered for GPU (``cuda``) and TPU on the CPU machine (issue 28 §2).

Every kernel path (cuDNN attention, the Pallas-Triton block-sparse kernels, splash through
Mosaic) and the full jitted train step of each model family are lowered with
``jax.export`` for ``cuda`` and ``tpu``, forward and backward, as the target dispatches them
(``lowering_lib.target``). A Pallas -> Triton/Mosaic lowering error, a tile that breaks the
target's rules or a tracer leak fails here. The results are checked where they can be: the
custom calls are the expected kernels, and the Triton launch grids are what the block table
implies. What lowering on CPU cannot prove (the device compilers' later passes, numerics on
the device) is in ``experiments/accelerator/README.md``.

Legend: B batch, T sequence length, H heads, D head dim, nq/nk query/key blocks.
"""

from __future__ import annotations

from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax import attention
from seqjax.attention import blockwise, flex, pallas_blocks, pallas_plan, score_mod, splash
from tests.accelerator import lowering_lib as lib
from tests.conftest import require_devices

B, T, H, D = 2, 256, 2, 64


def _abstract(dtype=jnp.float32, t=T):
    x = jax.ShapeDtypeStruct((B, t, H, D), dtype)
    return x, x, x


def _value_and_grad(fn):
    """``(q, k, v) -> (out, dq, dk, dv)``: forward and every backward kernel."""

    def loss(q, k, v):
        return fn(q, k, v).astype(jnp.float32).sum()

    def both(q, k, v):
        return fn(q, k, v), jax.grad(loss, argnums=(0, 1, 2))(q, k, v)

    return both


def _names(exported):
    return Counter((c["target"], c["name"]) for c in lib.custom_calls(exported))


# ---------------------------------------------------------------- TPU: splash through Mosaic

_PAD_BT = jnp.arange(T)[None, :] < jnp.array([[T], [T - 40]])

SPLASH_CASES = {
    "dense_causal": lambda q, k, v: attention.get("dense")(q, k, v, causal=True),
    "dense_padded": lambda q, k, v: attention.get("dense")(q, k, v, mask=_PAD_BT),
    "sparse_fixed_split": lambda q, k, v: attention.get("sparse_fixed")(
        q, k, v, causal=True, stride=32, c=8, head_mode="split"
    ),
    "flex_window": lambda q, k, v: attention.get("flex")(
        q, k, v, causal=True, pattern="sliding_window", window=48
    ),
}


@pytest.mark.parametrize("case", SPLASH_CASES)
def test_splash_lowers_to_mosaic_for_tpu(case):
    """``auto`` on TPU is splash with interpret=False: the forward kernel and both backward
    kernels are Mosaic custom calls, each carrying its serialized Mosaic module."""
    exported = lib.export(_value_and_grad(SPLASH_CASES[case]), "tpu", *_abstract())
    calls = lib.custom_calls(exported)
    assert {c["target"] for c in calls} == {lib.MOSAIC}
    kinds = {c["name"].split("_")[2] for c in calls}  # splash_mha_{fwd,dq,dkv}_...
    assert kinds == {"fwd", "dq", "dkv"}, [c["name"] for c in calls]
    assert all(c["mosaic_body_chars"] > 1000 for c in calls)
    segmented = all("segmented" in c["name"] for c in calls)
    assert segmented == (case == "dense_padded")  # the key padding goes in as segment ids


def test_lowering_twice_leaks_no_tracer():
    """The splash kernel cache is filled by the first lowering; a second lowering of a new
    function with the same kernel must not meet the first trace's tracers (issue 28)."""
    splash._kernel.cache_clear()
    for _ in range(2):
        fn = _value_and_grad(lambda q, k, v: attention.get("dense")(q, k, v, causal=True))
        lib.export(fn, "tpu", *_abstract())


# ---------------------------------------------------------------- GPU: Pallas -> Triton


@pytest.mark.parametrize("with_masks", [False, True], ids=["plain", "padding+segments"])
def test_block_sparse_kernels_lower_to_triton_with_the_table_grid(with_masks):
    """interpret=False on GPU: three Triton kernels whose launch grids are (nq, B, H) for the
    forward and dQ kernels and (nk, B, H) for dK/dV, nq and nk from the block table."""
    bs, t = 64, 320  # 5 blocks: a 5 x 2 table, padded to a power of two for Triton
    table, count, _ = flex.block_table(
        flex.make_pattern("sliding_window", window=48), None, t, t, bs, bs, True, 0
    )
    seg_BT = (jnp.arange(t)[None, :] >= 100).astype(jnp.int32) * jnp.ones((B, 1), jnp.int32)
    pad_BT = jnp.arange(t)[None, :] < jnp.array([[t], [t - 40]])

    def fn(q, k, v):
        extra = dict(mask=pad_BT, segment_ids=seg_BT) if with_masks else {}
        return pallas_blocks.block_sparse_attention(
            q, k, v, table=table, count=count, block_q=bs, block_k=bs, causal=True, **extra
        )

    exported = lib.export(_value_and_grad(fn), "cuda", *_abstract(t=t))
    calls = lib.custom_calls(exported)
    assert {c["target"] for c in calls} == {lib.TRITON}
    grids = {c["name"]: c["grid"] for c in calls}
    nq = nk = t // bs
    assert table.shape[0] == nq
    assert grids == {
        "seqjax_block_sparse_fwd": (nq, B, H),
        "seqjax_block_sparse_dkdv": (nk, B, H),
        "seqjax_block_sparse_dq": (nq, B, H),
    }
    # The forward kernel twice: for the output and inside the VJP's forward (no CSE).
    assert Counter(c["name"] for c in calls) == {
        "seqjax_block_sparse_fwd": 2,
        "seqjax_block_sparse_dkdv": 1,
        "seqjax_block_sparse_dq": 1,
    }


@pytest.mark.parametrize("scheme", ["alibi", "t5_bias"])
def test_block_sparse_kernels_with_a_score_mod_lower_to_triton(scheme):
    """The bias computed inside the kernels (ALiBi's slope times the distance; T5's bucket by
    integer comparisons and the table as an input, its gradient an extra dK/dV output)
    lowers through Triton: the same three kernels on the same grids. T5's table gradient
    is differentiated too."""
    bs, t = 64, 320
    table, count, _ = flex.block_table(
        flex.make_pattern("sliding_window", window=48), None, t, t, bs, bs, True, 0
    )

    def fn(q, k, v, tab):
        mod = score_mod.alibi(H) if scheme == "alibi" else score_mod.t5_bias(tab, causal=True)
        return pallas_blocks.block_sparse_attention(
            q, k, v, table=table, count=count, block_q=bs, block_k=bs, causal=True, score_mod=mod
        )

    def both(q, k, v, tab):
        loss = lambda *a: fn(*a).sum()  # noqa: E731
        return fn(q, k, v, tab), jax.grad(loss, argnums=(0, 1, 2, 3))(q, k, v, tab)

    tab = jax.ShapeDtypeStruct((32, H), jnp.float32)
    calls = lib.custom_calls(lib.export(both, "cuda", *_abstract(t=t), tab))
    assert {c["target"] for c in calls} == {lib.TRITON}
    nq = nk = t // bs
    assert {c["name"]: c["grid"] for c in calls} == {
        "seqjax_block_sparse_fwd": (nq, B, H),
        "seqjax_block_sparse_dkdv": (nk, B, H),
        "seqjax_block_sparse_dq": (nq, B, H),
    }


def test_flex_with_a_score_mod_dispatch():
    """``auto`` with ALiBi: the Triton kernels on GPU; on TPU no splash (it takes no bias)
    but the plain-JAX block-sparse engine (no custom call)."""

    def fn(q, k, v):
        return attention.get("flex")(
            q, k, v, causal=True, pattern="sliding_window", window=48, score_mod=score_mod.alibi(H)
        )

    assert set(lib.targets(lib.export(_value_and_grad(fn), "cuda", *_abstract()))) == {lib.TRITON}
    assert not lib.targets(lib.export(_value_and_grad(fn), "tpu", *_abstract()))


@pytest.mark.parametrize("name", ["sparse_strided", "flex"])
def test_auto_dispatch_on_gpu_is_the_triton_kernels(name):
    """``auto`` on GPU sends sparse_* and flex to the Pallas-Triton kernels."""
    opts = dict(stride=16) if name == "sparse_strided" else dict(pattern="dilated", window=4)

    def fn(q, k, v):
        return attention.get(name)(q, k, v, causal=True, **opts)

    names = _names(lib.export(_value_and_grad(fn), "cuda", *_abstract()))
    assert {t for t, _ in names} == {lib.TRITON}
    assert {n for _, n in names} == {
        "seqjax_block_sparse_fwd",
        "seqjax_block_sparse_dkdv",
        "seqjax_block_sparse_dq",
    }


# ---------------------------------------------------------------- GPU: tiles from the budget

LONG = 65_536
H200_BUDGET = 227 * 1024


@pytest.mark.parametrize("budget", [None, H200_BUDGET], ids=["default", "h200"])
@pytest.mark.parametrize("name", ["dense", "sparse_strided"])
def test_long_pallas_calls_lower_with_tiles_that_fit(name, budget, monkeypatch):
    """``implementation="pallas"`` at T = 65,536 (bf16, D 64): on the H200 the dense call
    asked for 327,680 bytes of shared memory (chunked's 512-row tiles) and sparse_strided's
    column part for one 512-row block (issue 36). Now every Triton kernel's tiles come from
    the planner: the grids say which, and their shared memory (the compiler's figures,
    ``pallas_smem``) fits the budget."""
    if budget is not None:
        monkeypatch.setenv(pallas_plan.ENV_BUDGET, str(budget))
    budget = pallas_plan.device_budget()
    opts = dict(stride=128) if name == "sparse_strided" else {}

    def fn(q, k, v):
        return attention.get(name)(q, k, v, causal=True, implementation="pallas", **opts)

    x = jax.ShapeDtypeStruct((1, LONG, 1, D), jnp.bfloat16)
    calls = lib.custom_calls(lib.export(_value_and_grad(fn), "cuda", x, x, x))
    assert calls and {c["target"] for c in calls} == {lib.TRITON}
    want = pallas_plan.plan(LONG, LONG, D, dtype=jnp.bfloat16, budget=budget)
    for c in calls:
        # The column part runs [B l, n] = [128, 512] (grid (n / tile, B l, H)); the rest [1, T].
        tile = (LONG if c["grid"][1] == 1 else LONG // 128) // c["grid"][0]
        est = pallas_plan.smem_of(tile, tile, D, D, 2, c["num_stages"])
        assert max(est.values()) <= budget, (c, est)
        assert c["num_warps"] in (4, 8)
    if name == "dense":
        assert {LONG // c["grid"][0] for c in calls} == {want.block_q}


def test_tiles_above_the_budget_raise_before_compiling():
    """Explicit 512-row tiles (what dense once handed the kernels) are refused with one
    sentence naming the tiles, the bytes and the budget, not Triton's RESOURCE_EXHAUSTED."""
    t, bs = 1024, 512
    table, count = blockwise.dense_table(2, 2, bs, bs, causal=False, offset=0)

    def fn(q, k, v):
        return pallas_blocks.block_sparse_attention(
            q, k, v, table=table, count=count, block_q=bs, block_k=bs
        )

    with pytest.raises(ValueError, match=r"tiles 512x512 .* shared memory, above this device"):
        lib.export(fn, "cuda", *_abstract(jnp.bfloat16, t=t))


# ---------------------------------------------------------------- GPU: cuDNN


@pytest.mark.parametrize(
    "masked,want",
    [(False, "__cudnn$fmhaSoftmax"), (True, "__cudnn$fmhaScaleBiasSoftmax")],
    ids=["causal", "padding"],
)
def test_cudnn_lowers_for_cuda(masked, want):
    """``auto`` on GPU with bfloat16 is cuDNN fused attention, forward and backward."""

    def fn(q, k, v):
        return attention.get("dense")(q, k, v, causal=True, mask=_PAD_BT if masked else None)

    names = _names(lib.export(_value_and_grad(fn), "cuda", *_abstract(jnp.bfloat16)))
    assert set(names) == {(want, None), (want + "Backward", None)}


# ---------------------------------------------------------------- broken kernels fail


def test_a_kernel_that_breaks_tritons_rules_fails_to_lower(monkeypatch):
    """Blocks of 24 rows (Triton needs powers of two): with seqjax's own guard removed, the
    Pallas -> Triton lowering itself refuses. Nothing runs, so only lowering can catch it."""
    monkeypatch.setattr(pallas_blocks, "supported", lambda *a, **k: None)
    table, count, _ = flex.block_table(
        flex.make_pattern("sliding_window", window=24), None, 240, 240, 24, 24, True, 0
    )

    def fn(q, k, v):
        return pallas_blocks.block_sparse_attention(
            q, k, v, table=table, count=count, block_q=24, block_k=24, causal=True
        )

    with pytest.raises(ValueError, match="power of 2"):
        lib.export(fn, "cuda", *_abstract(t=240))


def test_a_splash_tile_that_breaks_tpu_tiling_fails_to_lower(monkeypatch):
    """Splash tiles of 64 keys (TPU lanes need multiples of 128) are refused."""
    monkeypatch.setattr(splash, "TILE", 64)
    splash._kernel.cache_clear()
    try:
        with pytest.raises(ValueError, match="multiple of 128"):
            lib.export(SPLASH_CASES["dense_causal"], "tpu", *_abstract())
    finally:
        splash._kernel.cache_clear()


# ---------------------------------------------------------------- full train steps

# The kernels each family's train step must contain (forward and backward), per platform.
# Transformer-XL's relative attention is plain JAX on every platform (no kernel: none is
# registered for its position term), so it lowers without custom calls.
EXPECTED = {
    ("lm_dense", "cuda"): {"__cudnn$fmhaSoftmax", "__cudnn$fmhaSoftmaxBackward"},
    ("lm_dense", "tpu"): {lib.MOSAIC},
    ("lm_sparse", "cuda"): {lib.TRITON},
    ("lm_sparse", "tpu"): {lib.MOSAIC},
    ("classifier", "cuda"): {
        "__cudnn$fmhaScaleBiasSoftmax",
        "__cudnn$fmhaScaleBiasSoftmaxBackward",
    },
    ("classifier", "tpu"): {lib.MOSAIC},
    ("lsh_reversible", "cuda"): {"__cudnn$fmhaSoftmax", "__cudnn$fmhaSoftmaxBackward"},
    ("lsh_reversible", "tpu"): {lib.MOSAIC},
    ("transformer_xl", "cuda"): set(),
    ("transformer_xl", "tpu"): set(),
}
FAST = {"lm_dense", "lm_sparse"}  # one train step per platform stays in the fast set


@pytest.mark.parametrize(
    "family,platform",
    [
        pytest.param(f, p, marks=() if f in FAST else pytest.mark.slow)
        for f, p in EXPECTED  # fmt: skip
    ],
)
def test_train_step_lowers(family, platform):
    """The whole jitted train step (loss, backward, optimizer, shardings) of each model
    family lowers for the platform with the platform's kernels in it."""
    config = lib.family_config(family)
    if platform == "cuda":
        config.model.dtype = "bfloat16"  # what a GPU run uses (cuDNN takes 16-bit inputs)
    exported = lib.export_train_step(config, platform)
    assert set(lib.targets(exported)) == EXPECTED[family, platform]
    assert exported.platforms == (platform,)


def test_lowering_refuses_an_unknown_platform():
    with pytest.raises(ValueError, match="not one of"):
        lib.export(lambda x: x, "rocm", np.zeros(2))


@pytest.mark.parametrize(
    "family,platform",
    [
        ("lm_dense", "tpu"),
        pytest.param("lm_sparse", "tpu", marks=pytest.mark.slow),
        pytest.param("lm_dense", "cuda", marks=pytest.mark.slow),
        pytest.param("lm_sparse", "cuda", marks=pytest.mark.slow),
    ],
)
def test_sharded_train_step_lowers(family, platform):
    """On a (data 2, fsdp 2, tensor 2) mesh of the 8 fake devices. TPU: splash runs under
    shard_map, because XLA cannot partition a Mosaic kernel (before, this lowering failed
    with "Mosaic kernels cannot be automatically partitioned", i.e. every multi-device TPU
    run with the default ``auto``)."""
    require_devices(8)
    config = lib.family_config(family)
    config.mesh.update(data=2, fsdp=2, tensor=2)
    config.data.batch_size = 4
    if platform == "cuda":
        config.model.dtype = "bfloat16"
    text = lib.lower_train_step(config, platform)
    if platform == "tpu":
        assert "tpu_custom_call" in text
        assert "sdy.manual_computation" in text or "shard_map" in text
    elif family == "lm_dense":
        assert "CustomSPMDPartitioning" in text  # cuDNN through its custom_partitioning rule
    else:  # the Triton kernels under shard_map over the batch
        assert lib.TRITON in text and "sdy.manual_computation" in text


def test_flex_bigbird_per_head_lowers_to_one_triton_kernel_set_per_head():
    """BigBird's per-head layouts (issue 40) run as one call of the Pallas-Triton kernels
    per head on GPU: H forward, H dK/dV and H dQ kernels, each with its head's table."""

    def fn(q, k, v):
        return attention.get("flex")(
            q, k, v, pattern="bigbird", window=1, num_global=1, num_random=1, block_size=32
        )

    def same_heads(q, k, v):  # no random blocks: one layout, one call for every head
        return attention.get("flex")(
            q, k, v, pattern="bigbird", window=1, num_global=1, num_random=0, block_size=32
        )

    names = _names(lib.export(_value_and_grad(fn), "cuda", *_abstract()))
    one = _names(lib.export(_value_and_grad(same_heads), "cuda", *_abstract()))
    assert {t for t, _ in names} == {lib.TRITON}
    for kernel in ("seqjax_block_sparse_fwd", "seqjax_block_sparse_dkdv", "seqjax_block_sparse_dq"):
        assert names[(lib.TRITON, kernel)] == H * one[(lib.TRITON, kernel)] > 0, kernel


def test_auto_dtype_train_step_is_bf16_cudnn_on_cuda():
    """``model.dtype="auto"`` (the default) resolves to bfloat16 while tracing for a GPU, so
    the LM's dense attention is cuDNN (it takes 16-bit inputs) with no override."""
    config = lib.family_config("lm_dense")
    config.model.dtype = "auto"
    exported = lib.export_train_step(config, "cuda")
    assert set(lib.targets(exported)) == EXPECTED["lm_dense", "cuda"]
