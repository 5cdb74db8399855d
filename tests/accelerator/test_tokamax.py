"""Dense implementation ``"tokamax"`` (issue 28 §2, "maintained kernels before our own").

On CPU tokamax runs its XLA path: values and gradients must equal seqjax's ``reference``
for every mask seqjax has (causal, bottom-right causal with fewer queries than keys, key
padding including rows that see no key, segment ids) in float32 and bfloat16. For GPU and
TPU the kernels are lowered on this machine (``lowering_lib``): Pallas -> Triton on
``cuda`` and Mosaic splash on ``tpu``, forward and backward. tokamax asks the real device
whether its kernels run there (``Op.supported_on``); the fixture ``_on_target`` answers yes
while lowering, so that the kernels are traced as the target would trace them.

Legend: B batch, T query length, S key length, H heads, D head dim.
"""

from __future__ import annotations

import re
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax.attention import dense
from seqjax.attention import tokamax_attention as tk
from tests.accelerator import lowering_lib as lib

tokamax = pytest.importorskip("tokamax")

B, T, H, D = 2, 16, 2, 8
_KEYS_BS = jnp.arange(T)[None, :] >= jnp.array([[0], [5]])  # example 1: keys 0-4 hidden
_SEG_BT = jnp.array([[0] * 6 + [1] * 10, [0] * 11 + [1] * 5])

CASES = {
    "full": dict(),
    "causal": dict(causal=True),
    "padded": dict(mask=_KEYS_BS),
    # causal + left padding: queries 0-4 of example 1 see no key (rows of zeros)
    "causal_padded": dict(causal=True, mask=_KEYS_BS),
    "causal_segments": dict(causal=True, segment_ids=_SEG_BT),
    "segments_padded": dict(segment_ids=_SEG_BT, mask=_KEYS_BS),
}


def _qkv(dtype, t=T, s=T):
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(0), 3)
    q = jax.random.normal(k1, (B, t, H, D), dtype)
    k = jax.random.normal(k2, (B, s, H, D), dtype)
    v = jax.random.normal(k3, (B, s, H, D), dtype)
    return q, k, v


def _value_and_grad(implementation, **kwargs):
    def loss(q, k, v):
        out = dense.dense_attention(q, k, v, implementation=implementation, **kwargs)
        return (out.astype(jnp.float32) * jnp.cos(out.astype(jnp.float32))).sum(), out

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))


def _assert_equal_to_reference(q, k, v, atol, **kwargs):
    (_, out), grads = _value_and_grad("tokamax", **kwargs)(q, k, v)
    (_, ref), ref_grads = _value_and_grad("reference", **kwargs)(q, k, v)
    assert not any(np.isnan(np.asarray(g, np.float32)).any() for g in (out, *grads))
    f32 = lambda x: np.asarray(x, np.float32)  # noqa: E731
    np.testing.assert_allclose(f32(out), f32(ref), atol=atol)
    for name, g, r in zip("qkv", grads, ref_grads, strict=True):
        np.testing.assert_allclose(f32(g), f32(r), atol=atol, err_msg=f"d{name}")


@pytest.mark.parametrize("case", CASES)
def test_values_and_gradients_equal_reference_on_cpu(case):
    _assert_equal_to_reference(*_qkv(jnp.float32), 1e-5, **CASES[case])


def test_the_computation_is_tokamaxs():
    """The lowered module carries tokamax's op scope (the equalities above compare it)."""
    q, k, v = _qkv(jnp.float32)

    def text(implementation):
        fn = lambda q, k, v: dense.dense_attention(q, k, v, implementation=implementation)  # noqa: E731
        return jax.jit(fn).lower(q, k, v).as_text(debug_info=True)

    assert "tokamax:" in text("tokamax")
    assert "tokamax:" not in text("reference")


def test_empty_rows_are_zeros():
    """Rows with no visible key are zeros, as in every seqjax implementation."""
    q, k, v = _qkv(jnp.float32)
    out = dense.dense_attention(q, k, v, implementation="tokamax", **CASES["causal_padded"])
    np.testing.assert_array_equal(np.asarray(out[1, :5]), 0.0)
    assert np.abs(np.asarray(out[1, 5:])).min(axis=-1).max() > 0
    # an example with no visible key at all: zeros, and no NaN in any gradient
    none_BS = jnp.zeros((B, T), bool).at[1].set(True)
    _assert_equal_to_reference(q, k, v, 1e-5, mask=none_BS)
    out = dense.dense_attention(q, k, v, implementation="tokamax", mask=none_BS)
    np.testing.assert_array_equal(np.asarray(out[0]), 0.0)
    # more queries than keys, causal: the first T - S queries see nothing
    _assert_equal_to_reference(q, k[:, :10], v[:, :10], 1e-5, causal=True)


def test_fewer_queries_than_keys_is_bottom_right_causal():
    """Decoding: 4 queries after 12 keys see keys up to their absolute position (tokamax's
    own ``is_causal`` is top-left; seqjax passes the bottom-right mask instead)."""
    q, k, v = _qkv(jnp.float32, t=4, s=T)
    _assert_equal_to_reference(q, k, v, 1e-5, causal=True, mask=_KEYS_BS)
    _assert_equal_to_reference(q, k, v, 1e-5, causal=True)


def test_bfloat16_equals_reference():
    _assert_equal_to_reference(*_qkv(jnp.bfloat16), 3e-2, causal=True, mask=_KEYS_BS)


def test_refusals_name_the_option_before_tracing_the_kernel():
    q, k, v = _qkv(jnp.float32)
    with pytest.raises(ValueError, match="dropout_rate=0.1.*'tokamax'|'tokamax'.*dropout"):
        dense.dense_attention(
            q, k, v, implementation="tokamax", dropout_rate=0.1, dropout_rng=jax.random.key(0)
        )
    with lib.target("tpu"), pytest.raises(ValueError, match="segment ids.*'splash'"):
        jax.eval_shape(
            lambda q, k, v: dense.dense_attention(q, k, v, implementation="tokamax", mask=_KEYS_BS),
            q,
            k,
            v,
        )
    with pytest.raises(ValueError, match="valid: .*tokamax"):
        dense.dense_attention(q, k, v, implementation="tokamaks")


# ------------------------------------------------------------------- lowering for GPU / TPU

TL = 256  # lowering length: four of the Triton kernel's 64-row query blocks


@pytest.fixture
def _on_target(monkeypatch):
    """tokamax's kernels run for a CPU host: the Triton ones through tokamax's own
    ``config.cross_compile`` option; the Mosaic TPU ones ignore that option in tokamax
    0.0.12 (``supported_on`` asks for a TPU device), so their check is patched. tokamax's
    Triton backward relies on implicit rank promotion, and is traced by ``jax.grad`` outside
    ``tokamax_attention``'s own ``numpy_rank_promotion("allow")``: allowed here too (it is
    JAX's default; only seqjax's tests raise)."""
    from tokamax._src.ops.attention import pallas_mosaic_tpu, pallas_mosaic_tpu_vjp

    for cls in (
        pallas_mosaic_tpu.PallasMosaicTpuFlashAttention,
        pallas_mosaic_tpu_vjp.PallasMosaicTpuFlashAttentionVjp,
    ):
        monkeypatch.setattr(cls, "supported_on", lambda self, device: True)
    tk._tokamax()  # absl flags parsed before tokamax reads its options
    with tokamax.config.cross_compile(True), jax.numpy_rank_promotion("allow"):
        yield


def _forward_and_backward(**kwargs):
    fn = lambda q, k, v: dense.dense_attention(q, k, v, implementation="tokamax", **kwargs)  # noqa: E731

    def loss(q, k, v):
        return fn(q, k, v).astype(jnp.float32).sum()

    return lambda q, k, v: (fn(q, k, v), jax.grad(loss, argnums=(0, 1, 2))(q, k, v))


def _abstract():
    x = jax.ShapeDtypeStruct((B, TL, H, 64), jnp.bfloat16)
    return x, x, x


_PAD_BT = jnp.arange(TL)[None, :] < jnp.array([[TL], [TL - 40]])


@pytest.mark.parametrize("masks", ["causal", "padded"])
def test_lowers_to_triton_for_cuda(_on_target, masks):
    """GPU: tokamax's Pallas-Triton flash kernels, forward (with and without residuals) and
    the fused backward; the forward grid has one program per 64-row query block."""
    kwargs = dict(causal=True) if masks == "causal" else dict(mask=_PAD_BT)
    exported = lib.export(_forward_and_backward(**kwargs), "cuda", *_abstract())
    calls = lib.custom_calls(exported)
    assert {c["target"] for c in calls} == {lib.TRITON}
    names = Counter(c["name"] for c in calls)
    assert set(names) == {
        "pallas_flash_attention",
        "pallas_flash_attention_fwd_res",
        "pallas_flash_attention_vjp",
    }, names
    fwd = next(c for c in calls if c["name"] == "pallas_flash_attention")
    assert fwd["grid"][1] == TL // 64, fwd["grid"]


def _mosaic_kernels(exported) -> list[str]:
    """The ``kernel_name`` of every Mosaic custom call (tokamax's backend config is not the
    JSON ``lowering_lib.custom_calls`` reads, so the names are read from the text)."""
    names = []
    for line in exported.mlir_module().splitlines():
        if "stablehlo.custom_call @tpu_custom_call(" in line:
            names.append(re.search(r'kernel_name = "([^"]*)"', line).group(1))
    return names


def test_lowers_to_mosaic_splash_for_tpu(_on_target):
    """TPU: tokamax's splash kernels through Mosaic (forward; dK/dV and dQ in one kernel)."""
    exported = lib.export(_forward_and_backward(causal=True), "tpu", *_abstract())
    targets = re.findall(r"stablehlo\.custom_call @([\w$.]+)\(", exported.mlir_module())
    assert set(targets) == {lib.MOSAIC}, targets
    kinds = {name.split("_")[2] for name in _mosaic_kernels(exported)}  # splash_mha_{fwd,dkv}
    assert kinds == {"fwd", "dkv"}, _mosaic_kernels(exported)


def test_kernel_table_covers_the_backends():
    assert set(tk.KERNELS) == {"cpu", "gpu", "tpu"}
    assert tk.unsupported("gpu", mask=_KEYS_BS, segment_ids=_SEG_BT) is None


def test_sharded_equals_unsharded_on_eight_devices():
    """On a (data 2, fsdp 2, tensor 2) mesh under seqjax's logical-axis rules the call runs
    under ``shard_map`` (batch over data+fsdp, heads over tensor); values and gradients equal
    the one-device call, with a per-example mask and with the causal-only one."""
    from seqjax.train import sharding

    b = 4
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(1), 3)
    q, k, v = (jax.random.normal(key, (b, T, H, D)) for key in (k1, k2, k3))
    keys_BS = jnp.arange(T)[None, :] >= jnp.array([[0], [5], [0], [9]])
    mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    for kwargs in (dict(causal=True, mask=keys_BS), dict(causal=True)):
        run = _value_and_grad("tokamax", **kwargs)
        want = run(q, k, v)
        with sharding.rules_and_mesh(mesh):
            lowered = jax.jit(run).lower(q, k, v).as_text()
            got = jax.jit(run)(q, k, v)
        assert "sdy.manual_computation" in lowered or "shard_map" in lowered
        for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=1e-5)


@pytest.mark.parametrize("platform", lib.PLATFORMS)
def test_sharded_lowering_wraps_the_kernels_in_shard_map(_on_target, platform):
    """On the 8-device (data, fsdp, tensor) mesh the kernels lower inside ``shard_map``
    (XLA cannot partition a Mosaic kernel; seqjax's splash needed the same)."""
    from seqjax.train import sharding

    x = jax.ShapeDtypeStruct((4, TL, H, 64), jnp.bfloat16)
    fn = jax.jit(_forward_and_backward(causal=True))
    mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    with lib.target(platform), sharding.rules_and_mesh(mesh):
        text = fn.trace(x, x, x).lower(lowering_platforms=(platform,)).as_text()
    assert "sdy.manual_computation" in text
    kernel = {"tpu": "@tpu_custom_call(", "cuda": f"@{lib.TRITON}("}[platform]
    assert text.count(kernel) == 3
