"""The Pallas block-table kernels equal the dense reference in values and gradients.

On CPU (CI) the kernels run in Pallas interpret mode; on a GPU the same tests run the
Triton-compiled kernels:
``JAX_PLATFORMS=cuda python -m pytest tests/attention/test_pallas_blocks.py``.
Each case compares values, the log-sum-exp and the gradients of q, k, v (including the
gradient that flows through the log-sum-exp, which the sparse merge uses).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax import attention
from seqjax.attention import blockwise, dense, pallas_blocks
from tests.conftest import require_devices

ON_GPU = jax.default_backend() == "gpu"
# Tolerances: interpret mode is exact float32 arithmetic; bf16 inputs round the products.
TOL = {jnp.float32: 2e-5 if not ON_GPU else 2e-3, jnp.bfloat16: 3e-2}


def _inputs(b, t, s, h, d, dtype, seed=0):
    ks = jax.random.split(jax.random.PRNGKey(seed), 4)
    q = jax.random.normal(ks[0], (b, t, h, d), jnp.float32).astype(dtype)
    k = jax.random.normal(ks[1], (b, s, h, d), jnp.float32).astype(dtype)
    v = jax.random.normal(ks[2], (b, s, h, d), jnp.float32).astype(dtype)
    ct = jax.random.normal(ks[3], (b, t, h, d), jnp.float32)
    return q, k, v, ct


def _value_and_grads(fn, q, k, v, ct):
    def loss(q, k, v):
        out = fn(q, k, v)
        return jnp.vdot(out.astype(jnp.float32), ct), out

    (_, out), grads = jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True)(q, k, v)
    return out, grads


def _close(a, b, tol):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    scale = max(1.0, float(np.abs(b).max()))
    np.testing.assert_allclose(a, b, atol=tol * scale, rtol=0)


@pytest.mark.parametrize(
    "t,s,causal,padding,segments,dtype",
    [
        (64, 64, True, False, False, jnp.float32),
        (50, 70, True, True, False, jnp.float32),  # lengths not multiples of the block
        (48, 48, False, True, True, jnp.float32),
        (64, 64, True, False, False, jnp.bfloat16),
    ],
)
def test_dense_table_kernel_equals_reference(t, s, causal, padding, segments, dtype):
    b, h, d = 2, 2, 16
    q, k, v, ct = _inputs(b, t, s, h, d, dtype)
    kw = {}
    if padding:  # the second sequence loses its last 9 keys
        kw["mask"] = jnp.arange(s)[None, :] < jnp.array([[s], [s - 9]])
    if segments:
        kw["segment_ids"] = jnp.broadcast_to(jnp.arange(t) // 11, (b, t))
    ref = _value_and_grads(
        lambda q, k, v: dense.reference_attention(q, k, v, causal=causal, **kw), q, k, v, ct
    )
    got = _value_and_grads(
        lambda q, k, v: dense.dense_attention(
            q, k, v, causal=causal, implementation="pallas", block_q=16, block_k=32, **kw
        ),
        q,
        k,
        v,
        ct,
    )
    for a, r in zip(jax.tree.leaves(got), jax.tree.leaves(ref)):
        _close(a, r, TOL[dtype])


def test_lse_and_its_gradient_equal_the_plain_jax_engine():
    """The log-sum-exp output (used to merge disjoint parts) and its cotangent path."""
    q, k, v, ct = _inputs(1, 40, 40, 2, 16, jnp.float32, seed=3)
    table, count = blockwise.dense_table(3, 3, 16, 16, causal=True, offset=0)
    table, count = table.copy(), count.copy()
    count[2] = 1  # a sparse table: query block 2 sees key block 0 only

    def run(engine):
        def loss(q, k, v):
            out, lse = engine(
                q, k, v, table=table, count=count, block_q=16, block_k=16, causal=True,
                return_lse=True,
            )  # fmt: skip
            return jnp.vdot(out, ct) + jnp.sum(jnp.where(jnp.isfinite(lse), lse, 0.0) ** 2), lse

        return jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True)(q, k, v)

    (l_ref, lse_ref), g_ref = run(blockwise.blockwise_attention)
    (l_got, lse_got), g_got = run(pallas_blocks.block_sparse_attention)
    _close(lse_got, lse_ref, TOL[jnp.float32])
    _close(l_got, l_ref, TOL[jnp.float32])
    for a, r in zip(g_got, g_ref):
        _close(a, r, TOL[jnp.float32])


@pytest.mark.parametrize(
    "kind,options,causal",
    [
        ("strided", dict(stride=16), True),
        ("fixed", dict(stride=16, c=4), True),
        ("fixed", dict(stride=16, c=4, head_mode="split"), False),
    ],
)
def test_sparse_pallas_equals_masked(kind, options, causal):
    """Sparse Transformer patterns through the kernels == dense attention with the mask."""
    b, t, h, d = 1, 72, 2, 16  # 72 is not a multiple of the stride: padding inside
    q, k, v, ct = _inputs(b, t, t, h, d, jnp.float32, seed=1)
    mask = jnp.arange(t)[None, :] < t - 5
    fn = attention.get(f"sparse_{kind}")

    def run(impl):
        return _value_and_grads(
            lambda q, k, v: fn(
                q, k, v, causal=causal, mask=mask, implementation=impl, block_size=16, **options
            ),
            q,
            k,
            v,
            ct,
        )

    ref, got = run("masked"), run("pallas")
    for a, r in zip(jax.tree.leaves(got), jax.tree.leaves(ref)):
        _close(a, r, TOL[jnp.float32])


@pytest.mark.parametrize("d", [8, 12, 80])
def test_head_dims_that_are_not_powers_of_two_are_padded_inside(d):
    """Head dims 8, 12, 80 (zero-padded to 16, 16, 128 inside the kernel path, as
    FlashAttention does) equal the reference in values and gradients; the scale stays
    1 / sqrt(D) of the true D."""
    q, k, v, ct = _inputs(1, 40, 40, 2, d, jnp.float32, seed=d)
    ref = _value_and_grads(
        lambda q, k, v: dense.reference_attention(q, k, v, causal=True), q, k, v, ct
    )
    got = _value_and_grads(
        lambda q, k, v: dense.dense_attention(q, k, v, causal=True, implementation="pallas"),
        q, k, v, ct,
    )  # fmt: skip
    for a, r in zip(jax.tree.leaves(got), jax.tree.leaves(ref)):
        assert a.shape == r.shape
        _close(a, r, TOL[jnp.float32])


def test_unsupported_inputs_name_the_reason():
    q, k, v, _ = _inputs(1, 32, 32, 1, 272, jnp.float32)
    table, count = blockwise.dense_table(2, 2, 16, 16, causal=False, offset=0)
    with pytest.raises(ValueError, match=r"head dim 272 is above the kernels' limit"):
        pallas_blocks.block_sparse_attention(
            q, k, v, table=table, count=count, block_q=16, block_k=16
        )
    q, k, v, _ = _inputs(1, 32, 32, 1, 16, jnp.float32)
    with pytest.raises(ValueError, match="block_q 24 is not a power of two"):
        pallas_blocks.block_sparse_attention(
            q, k, v, table=table, count=count, block_q=24, block_k=16
        )
    with pytest.raises(ValueError, match="dropout_rate > 0 needs a dropout_rng"):
        pallas_blocks.block_sparse_attention(
            q, k, v, table=table, count=count, block_q=16, block_k=16, dropout_rate=0.1
        )


def test_cudnn_refuses_dropout_instead_of_ignoring_it():
    q, k, v, _ = _inputs(1, 16, 16, 1, 16, jnp.bfloat16)
    match = "dropout" if ON_GPU else "needs an NVIDIA GPU"
    with pytest.raises(ValueError, match=match):
        dense.cudnn_attention(q, k, v, dropout_rate=0.5, dropout_rng=jax.random.PRNGKey(0))
    if ON_GPU:  # auto falls back to an implementation that applies dropout
        out = dense.dense_attention(
            q, k, v, dropout_rate=0.5, dropout_rng=jax.random.PRNGKey(0), implementation="auto"
        )
        clean = dense.dense_attention(q, k, v, implementation="auto")
        assert not np.allclose(np.asarray(out, np.float32), np.asarray(clean, np.float32))


def test_higher_order_derivatives_name_the_way_out():
    q, k, v, _ = _inputs(1, 32, 32, 1, 16, jnp.float32)

    def f(q):
        return dense.dense_attention(q, k, v, implementation="pallas", block_q=16, block_k=16).sum()

    with pytest.raises(NotImplementedError, match="reference"):
        jax.jvp(f, (q,), (q,))
    with pytest.raises(NotImplementedError, match="reference"):
        jax.grad(lambda q: jax.grad(f)(q).sum())(q)


@pytest.mark.parametrize("rate", [0.0, 0.3], ids=["no_dropout", "dropout"])
def test_sharded_equals_unsharded_on_eight_devices(rate):
    """On a (data 2, fsdp 2, tensor 2) mesh under seqjax's logical-axis rules the kernels run
    under shard_map over the batch (XLA cannot partition an opaque kernel: it would run the
    whole batch on every device). Values and gradients equal the one-device call; with
    dropout too (each shard hashes its global batch rows, so the mask is the same)."""
    from seqjax.train import sharding

    b, t, h, d, bs = 4, 64, 2, 16, 16
    q, k, v, ct = _inputs(b, t, t, h, d, jnp.float32, seed=4)
    mask = jnp.arange(t)[None, :] < jnp.array([[t], [t - 9], [t - 20], [t]])
    from seqjax.attention import flex

    table, count, _ = flex.block_table(
        flex.make_pattern("sliding_window", window=20), None, t, t, bs, bs, True, 0
    )

    def run(q, k, v):
        fn = lambda q, k, v: pallas_blocks.block_sparse_attention(  # noqa: E731
            q, k, v, table=table, count=count, block_q=bs, block_k=bs, causal=True, mask=mask,
            dropout_rate=rate, dropout_rng=jax.random.PRNGKey(2) if rate else None,
        )  # fmt: skip
        return _value_and_grads(fn, q, k, v, ct)

    require_devices(8)
    want = jax.jit(run)(q, k, v)
    mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    with sharding.rules_and_mesh(mesh):
        assert "sdy.manual_computation" in jax.jit(run).lower(q, k, v).as_text()
        got = jax.jit(run)(q, k, v)
    for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        _close(x, y, TOL[jnp.float32])
