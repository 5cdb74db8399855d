"""XLNet's use of ``relative`` (``causal=False``, the segment term, a dense permutation
mask, a memory): the blockwise engine equals the materialized one in values and gradients
with several query and key blocks, and the materialized one equals a direct loop over
(i, j) of ``[(q+u).k + (q+v).r_{M+i-j} + (q+b).s_ij] / sqrt(D)``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from seqjax.attention import relative

B, T, M, H, D = 2, 6, 3, 2, 4
S = M + T


def _inputs(seed=0):
    ks = jax.random.split(jax.random.key(seed), 9)
    q = jax.random.normal(ks[0], (B, T, H, D))
    k, v = (jax.random.normal(x, (B, S, H, D)) for x in ks[1:3])
    r = jax.random.normal(ks[3], (S + T - 1, H, D))
    u, w, bs = (jax.random.normal(x, (H, D)) * 0.5 for x in ks[4:7])
    seg = jax.random.normal(ks[7], (2, H, D))
    types = jnp.concatenate([jnp.zeros((B, M), int), jnp.array([[0, 0, 0, 1, 1, 1]] * B)], 1)
    mask = jax.random.bernoulli(ks[8], 0.6, (B, T, S)).at[:, :, 0].set(True)
    return q, k, v, r, u, w, bs, seg, types, mask


def _attend(impl, q, k, v, r, u, w, bs, seg, types, mask):
    return relative.relative_attention(
        q, k, v, r=r, r_w_bias=u, r_r_bias=w, causal=False, seg_embed=seg, r_s_bias=bs,
        token_types=types, attn_mask=mask, implementation=impl, block_q=4, block_k=4,
    )  # fmt: skip


def test_reference_equals_a_direct_loop():
    q, k, v, r, u, w, bs, seg, types, mask = _inputs()
    out = np.asarray(_attend("reference", q, k, v, r, u, w, bs, seg, types, mask))
    q, k, v, r, u, w, bs, seg, types, mask = (
        np.asarray(x) for x in (q, k, v, r, u, w, bs, seg, types, mask)
    )
    want = np.zeros_like(out)
    for b in range(B):
        for h in range(H):
            for i in range(T):
                s = np.full(S, -np.inf)
                for j in range(S):
                    if not mask[b, i, j]:
                        continue
                    dist = M + i - j  # r row for distance d is S - 1 - d
                    diff = int(types[b, M + i] != types[b, j])
                    qi = q[b, i, h]
                    s[j] = ((qi + u[h]) @ k[b, j, h] + (qi + w[h]) @ r[S - 1 - dist, h]
                            + (qi + bs[h]) @ seg[diff, h]) / np.sqrt(D)  # fmt: skip
                p = np.exp(s - s.max())
                want[b, i, h] = (p / p.sum()) @ v[b, :, h]
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_blockwise_equals_reference_values_and_gradients():
    args = _inputs(1)

    def loss(impl, *diff):
        out = _attend(impl, *diff, *args[len(diff) :])
        return jnp.sum(jnp.sin(out))

    n = 8  # q, k, v, r, u, w, b_s, seg_embed
    ref = jax.jit(jax.value_and_grad(lambda *a: loss("reference", *a), argnums=tuple(range(n))))(
        *args[:n]
    )
    blk = jax.jit(jax.value_and_grad(lambda *a: loss("blockwise", *a), argnums=tuple(range(n))))(
        *args[:n]
    )
    np.testing.assert_allclose(blk[0], ref[0], rtol=1e-5, atol=1e-5)
    for g_b, g_r in zip(blk[1], ref[1]):
        np.testing.assert_allclose(g_b, g_r, rtol=1e-4, atol=1e-5)
