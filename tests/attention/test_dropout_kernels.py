"""Attention dropout inside the Pallas kernels equals the plain-JAX engines' (issue 36).

The keep mask is the counter-based hash ``numerics.dropout_keep`` of (seed, batch, head,
query, key), so the materialized reference, the ``chunked`` engine and the kernels
(interpret mode on CPU, Triton on a GPU) drop the same entries whatever their blocks: the
masks are compared bit for bit (one-hot values expose each engine's mask), then values and
gradients.

Legend: B batch, T query length, S key length, H heads, D head dim.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax import attention
from seqjax.attention import dense, numerics
from tests.conftest import tolerance

RATE = 0.3
RNG = jax.random.PRNGKey(11)


def _run(impl, q, k, v, **kw):
    kw = dict(kw)
    if impl != "reference":
        kw.update(block_q=16, block_k=16)
    return dense.dense_attention(
        q, k, v, implementation=impl, dropout_rate=RATE, dropout_rng=RNG, **kw
    )


def test_every_engine_drops_the_same_entries():
    """q = k = 0 makes every visible key equally likely; one-hot values (V = I) then give
    ``out[b, i, h, j] = keep[b, h, i, j] / (1 - rate) / #visible`` for causal attention:
    each engine's mask read off its output, equal to the hash itself."""
    b, t, h = 2, 48, 3
    q = jnp.zeros((b, t, h, 16), jnp.float32)
    v = jnp.broadcast_to(jnp.eye(t, dtype=jnp.float32)[None, :, None, :], (b, t, h, t))
    masks = {}
    for impl in ("reference", "chunked", "pallas"):
        out_BTHS = _run(impl, q, q, v, causal=True)
        masks[impl] = np.asarray(out_BTHS != 0).transpose(0, 2, 1, 3)  # [B, H, T, S]
    seeds = numerics.dropout_seeds(RNG)
    row = (jnp.arange(b)[:, None] * h + jnp.arange(h)[None, :])[:, :, None, None]
    pos = jnp.arange(t)
    keep = numerics.dropout_keep(seeds[0], seeds[1], row, pos[:, None], pos[None, :], RATE)
    want = np.asarray(keep) & np.tril(np.ones((t, t), bool))
    for impl, got in masks.items():
        np.testing.assert_array_equal(got, want, err_msg=impl)
    assert 0.5 < want.sum() / np.tril(np.ones((t, t))).sum() / (b * h) < 0.9


@pytest.mark.parametrize("causal", [True, False])
def test_kernel_equals_chunked_equals_reference_in_values_and_gradients(causal):
    b, t, h, d = 2, 40, 2, 16
    ks = jax.random.split(jax.random.PRNGKey(0), 4)
    q, k, v = (jax.random.normal(kk, (b, t, h, d), jnp.float32) for kk in ks[:3])
    ct = jax.random.normal(ks[3], (b, t, h, d), jnp.float32)
    mask = jnp.arange(t)[None, :] < jnp.array([[t], [t - 7]])

    def value_and_grads(impl):
        def loss(q, k, v):
            out = _run(impl, q, k, v, causal=causal, mask=mask)
            return jnp.vdot(out, ct), out

        (_, out), grads = jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True)(q, k, v)
        return out, grads

    ref = value_and_grads("reference")
    tol = tolerance(jnp.float32)
    for impl in ("chunked", "pallas"):
        got = value_and_grads(impl)
        for a, r in zip(jax.tree.leaves(got), jax.tree.leaves(ref)):
            np.testing.assert_allclose(a, r, atol=tol, rtol=tol, err_msg=impl)
    clean = dense.dense_attention(q, k, v, implementation="reference", causal=causal, mask=mask)
    assert float(jnp.abs(ref[0] - clean).max()) > 0.1  # dropout did something


def test_keep_rate_and_independence():
    """Keeps with probability 1 - rate, independently across heads, rows and keys."""
    seeds = numerics.dropout_seeds(jax.random.PRNGKey(3))
    pos = jnp.arange(512)
    rows = jnp.arange(4)[:, None, None]
    keep = np.asarray(numerics.dropout_keep(seeds[0], seeds[1], rows, pos[:, None], pos, 0.25))
    assert abs(keep.mean() - 0.75) < 0.005
    agree = (keep[0] == keep[1]).mean()  # two heads: P(equal) = 0.75^2 + 0.25^2
    assert abs(agree - 0.625) < 0.01
    assert abs((keep[0, :-1] == keep[0, 1:]).mean() - 0.625) < 0.01  # adjacent queries
    assert abs((keep[0, :, :-1] == keep[0, :, 1:]).mean() - 0.625) < 0.01  # adjacent keys


@pytest.mark.parametrize("kind", ["strided", "fixed"])
def test_sparse_kernels_with_dropout_equal_the_plain_jax_engine(kind):
    """sparse_* with dropout: the Pallas parts (per-part seeds as the plain-JAX engine
    draws them) equal ``blocksparse`` in values and gradients."""
    b, t, h, d = 1, 64, 2, 16
    ks = jax.random.split(jax.random.PRNGKey(5), 3)
    q, k, v = (jax.random.normal(kk, (b, t, h, d), jnp.float32) for kk in ks)
    opts = dict(stride=16, c=4) if kind == "fixed" else dict(stride=16)
    fn = attention.get(f"sparse_{kind}")

    def value_and_grads(impl):
        def loss(q, k, v):
            out = fn(q, k, v, causal=True, implementation=impl, dropout_rate=RATE,
                     dropout_rng=RNG, block_size=16, **opts)  # fmt: skip
            return (out * jnp.cos(jnp.arange(d))[None, None, None, :]).sum(), out

        (_, out), grads = jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True)(q, k, v)
        return out, grads

    ref, got = value_and_grads("blocksparse"), value_and_grads("pallas")
    tol = tolerance(jnp.float32)
    for a, r in zip(jax.tree.leaves(got), jax.tree.leaves(ref)):
        np.testing.assert_allclose(a, r, atol=tol, rtol=tol)
