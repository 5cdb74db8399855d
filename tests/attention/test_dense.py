"""Dense attention: every implementation equals the reference (values and gradients)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from seqjax import attention
from seqjax.attention import dense

# (B, T, S, H, D, block_q, block_k): lengths not multiples of the blocks, T != S, one block.
SHAPES = [
    (2, 37, 37, 2, 8, 16, 16),
    (1, 50, 83, 3, 16, 16, 32),
    (2, 64, 40, 2, 8, 32, 8),
    (1, 9, 9, 1, 4, 512, 512),
]


def _inputs(b, t, s, h, d, seed=0, dtype=jnp.float32):
    rng = np.random.default_rng(seed)
    q = jnp.asarray(rng.normal(size=(b, t, h, d)), dtype)
    k = jnp.asarray(rng.normal(size=(b, s, h, d)), dtype)
    v = jnp.asarray(rng.normal(size=(b, s, h, d)), dtype)
    mask = jnp.asarray(rng.random((b, s)) > 0.25)
    q_seg = jnp.asarray(np.sort(rng.integers(0, 3, (b, t)), axis=1))
    kv_seg = jnp.asarray(np.sort(rng.integers(0, 3, (b, s)), axis=1))
    return q, k, v, mask, (q_seg, kv_seg)


def _value_and_grads(fn, q, k, v):
    # A random cotangent so every output element matters.
    w = jax.random.normal(jax.random.key(1), q.shape[:3] + v.shape[-1:])

    def loss(q, k, v):
        return (fn(q, k, v) * w).sum()

    return jax.jit(lambda q, k, v: (fn(q, k, v), jax.grad(loss, argnums=(0, 1, 2))(q, k, v)))(
        q, k, v
    )


CASES = [
    (shape, causal, masks)
    for shape in SHAPES
    for causal in (False, True)
    for masks in (("both",) if shape[1] < 60 else ("none", "padding", "segments"))
]


@pytest.mark.parametrize("shape,causal,masks", CASES)
def test_chunked_equals_reference(shape, causal, masks):
    b, t, s, h, d, bq, bk = shape
    q, k, v, mask, seg = _inputs(b, t, s, h, d)
    kw = {"causal": causal}
    if masks in ("padding", "both"):
        kw["mask"] = mask
    if masks in ("segments", "both"):
        kw["segment_ids"] = seg
    ref = _value_and_grads(lambda q, k, v: dense.reference_attention(q, k, v, **kw), q, k, v)
    chk = _value_and_grads(
        lambda q, k, v: dense.chunked_attention(q, k, v, block_q=bq, block_k=bk, **kw), q, k, v
    )
    np.testing.assert_allclose(chk[0], ref[0], atol=2e-5, rtol=2e-5)
    for g_chk, g_ref in zip(chk[1], ref[1]):
        np.testing.assert_allclose(g_chk, g_ref, atol=5e-5, rtol=5e-5)


def test_registry_dense_all_implementations_agree():
    q, k, v, mask, _ = _inputs(2, 33, 33, 2, 8)
    fn = attention.get("dense")
    ref = fn(q, k, v, causal=True, mask=mask, implementation="reference")
    for impl in ("chunked", "auto"):
        out = fn(q, k, v, causal=True, mask=mask, implementation=impl, block_q=8, block_k=16)
        np.testing.assert_allclose(out, ref, atol=2e-5)
    causal = attention.get("causal")(q, k, v, mask=mask, implementation="chunked", block_q=16)
    np.testing.assert_allclose(causal, ref, atol=2e-5)


@pytest.mark.parametrize("impl", ["reference", "chunked"])
def test_fully_masked_rows_are_zero_not_nan(impl):
    q, k, v, _, _ = _inputs(2, 16, 16, 2, 8)
    mask = jnp.zeros((2, 16), bool).at[1].set(True)  # batch 0: no visible key at all
    fn = attention.get("dense")

    def loss(q, k, v):
        return fn(q, k, v, mask=mask, implementation=impl, block_q=8, block_k=8).sum()

    out = fn(q, k, v, mask=mask, implementation=impl, block_q=8, block_k=8)
    assert not jnp.isnan(out).any()
    np.testing.assert_array_equal(out[0], 0.0)
    grads = jax.grad(loss, argnums=(0, 1, 2))(q, k, v)
    assert all(not jnp.isnan(g).any() for g in grads)
    # Causal with more queries than keys: the first T - S queries see nothing.
    out = fn(q, k[:, :10], v[:, :10], causal=True, implementation=impl, block_q=4, block_k=4)
    np.testing.assert_array_equal(out[:, :6], 0.0)


@pytest.mark.parametrize("impl", ["reference", "chunked"])
def test_causal_future_does_not_leak(impl):
    q, k, v, _, _ = _inputs(1, 40, 40, 2, 8)
    fn = attention.get("dense")
    out = fn(q, k, v, causal=True, implementation=impl, block_q=8, block_k=8)
    k2 = k.at[:, 25:].set(7.0)
    v2 = v.at[:, 25:].set(-3.0)
    out2 = fn(q, k2, v2, causal=True, implementation=impl, block_q=8, block_k=8)
    np.testing.assert_allclose(out[:, :25], out2[:, :25], atol=1e-6)
    assert not np.allclose(out[:, 25:], out2[:, 25:])


def test_bfloat16_statistics_in_float32():
    # Long rows of equal logits: a bf16 running sum would lose mass; float32 does not.
    q, k, v, _, _ = _inputs(1, 300, 300, 2, 16)
    ref32 = dense.reference_attention(q, k, v, causal=True)
    for impl in ("reference", "chunked"):
        out = attention.get("dense")(
            q.astype(jnp.bfloat16),
            k.astype(jnp.bfloat16),
            v.astype(jnp.bfloat16),
            causal=True,
            implementation=impl,
            block_q=64,
            block_k=64,
        )
        assert out.dtype == jnp.bfloat16
        np.testing.assert_allclose(out.astype(jnp.float32), ref32, atol=3e-2)


def test_chunked_dropout_is_deterministic_and_has_correct_gradients():
    q, k, v, mask, _ = _inputs(1, 24, 24, 2, 8)
    key = jax.random.key(3)

    def fn(q, k, v):
        return dense.chunked_attention(
            q,
            k,
            v,
            causal=True,
            mask=mask,
            block_q=8,
            block_k=8,
            dropout_rate=0.3,
            dropout_rng=key,
        )

    a, b = fn(q, k, v), fn(q, k, v)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, dense.reference_attention(q, k, v, causal=True, mask=mask))
    # The custom VJP (which regenerates the dropout masks) against finite differences.
    check_grads(jax.jit(fn), (q, k, v), order=1, modes=["rev"], atol=1e-2, rtol=1e-2)


def test_causal_chunked_skips_masked_blocks():
    """The causal block table lists only blocks on or below the diagonal (~half the work)."""
    from seqjax.attention import blockwise

    table, count = blockwise.dense_table(8, 8, 64, 64, causal=True, offset=0)
    assert count.tolist() == list(range(1, 9))
    assert count.sum() == 36  # of 64 blocks


def test_bad_arguments_raise_clear_errors():
    q, k, v, _, _ = _inputs(1, 8, 8, 2, 8)
    with pytest.raises(ValueError, match="valid names: .*dense"):
        attention.get("no_such_attention")
    with pytest.raises(ValueError, match="rank 4"):
        attention.get("dense")(q[0], k[0], v[0])
    with pytest.raises(ValueError, match="head_dim mismatch"):
        attention.get("dense")(q, k[..., :4], v)
    with pytest.raises(ValueError, match="valid: auto, reference, chunked, cudnn"):
        attention.get("dense")(q, k, v, implementation="flash")
    # float32 to cuDNN on a GPU: one sentence naming the dtype and the implementations that
    # take it (never cuDNN's raw NotImplementedError); elsewhere: the backend.
    on_gpu = jax.default_backend() == "gpu"
    match = "takes bfloat16 or float16 inputs, not float32" if on_gpu else "needs an NVIDIA GPU"
    with pytest.raises(ValueError, match=match):
        attention.get("dense")(q, k, v, implementation="cudnn")
    with pytest.raises(ValueError, match="valid options"):
        attention.check_options("dense", {"block_size": 3})
    with pytest.raises(ValueError, match="key-padding mask"):
        attention.get("dense")(q, k, v, mask=jnp.ones((1, 5), bool))


def test_names_lists_builtin_mechanisms():
    assert {"dense", "causal"} <= set(attention.names())
    assert "dense" in attention.describe()


def _fwd_bwd(impl, causal):
    def loss(q, k, v):
        return dense.dense_attention(q, k, v, causal=causal, implementation=impl).sum()

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))


def test_chunked_memory_is_linear_and_32k_fits():
    """Compiled peak memory of forward+backward at 32K (batch 1, 8 x 64, float32): the
    reference needs the 32K x 32K logits (> 24 GB), chunked stays far below 1 GB, and
    chunked's temporaries grow about linearly from 8K to 32K."""
    from seqjax import bench

    def peak(impl, t):
        x = jax.ShapeDtypeStruct((1, t, 8, 64), jnp.float32)
        return bench.compiled_memory(_fwd_bwd(impl, True).lower(x, x, x).compile())

    chunk8k, chunk32k = peak("chunked", 8192), peak("chunked", 32768)
    ref32k = peak("reference", 32768)
    assert ref32k["peak_bytes"] > 24 * 2**30
    assert chunk32k["peak_bytes"] < 2**30
    assert chunk32k["temp_bytes"] < 6 * max(chunk8k["temp_bytes"], 1)


@pytest.mark.slow
def test_chunked_runs_forward_and_backward_at_32k():
    x = jax.random.normal(jax.random.key(0), (1, 32768, 8, 64), jnp.float32)
    val, grads = _fwd_bwd("chunked", True)(x, x, x)
    assert np.isfinite(float(val)) and all(bool(jnp.isfinite(g).all()) for g in grads)
