"""The shared attention numerics (``seqjax.attention.numerics``): masked rows, the exact
log-sum-exp merge (Milakov & Gimelshein 2018) in values and gradients, padding, dropout."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax.attention import numerics

B, T, S, H, D = 2, 5, 8, 2, 4


def _qkv(seed=0, t=T, s=S):
    kq, kk, kv = jax.random.split(jax.random.PRNGKey(seed), 3)
    return (
        jax.random.normal(kq, (B, t, H, D)),
        jax.random.normal(kk, (B, s, H, D)),
        jax.random.normal(kv, (B, s, H, D)),
    )


def _valid_with_empty_rows():
    """A random mask ``[B, 1, T, S]`` where query 1 of batch 0 and query 3 of batch 1 see
    no key at all."""
    valid = np.array(jax.random.bernoulli(jax.random.PRNGKey(7), 0.6, (B, 1, T, S)))
    valid[:, :, :, 0] = True  # every other row sees at least one key
    valid[0, :, 1] = False
    valid[1, :, 3] = False
    return jnp.asarray(valid)


def test_attend_equals_the_softmax_formula_on_visible_rows():
    """Vaswani et al. 2017, eq. (1) with the mask as -inf logits, in float64 numpy."""
    q, k, v = _qkv()
    valid = _valid_with_empty_rows()
    out = numerics.attend(q, k, v, valid)
    qn, kn, vn = (np.asarray(x, np.float64) for x in (q, k, v))
    logits = np.einsum("bthd,bshd->bhts", qn, kn) / np.sqrt(D)
    logits = np.where(np.asarray(valid), logits, -np.inf)
    with np.errstate(invalid="ignore"):
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p = p / p.sum(-1, keepdims=True)
    want = np.nan_to_num(np.einsum("bhts,bshd->bthd", p, vn))
    np.testing.assert_allclose(np.asarray(out), want, atol=1e-5)


def test_fully_masked_rows_give_zero_output_and_zero_gradients():
    q, k, v = _qkv()
    valid = _valid_with_empty_rows()
    out = numerics.attend(q, k, v, valid)
    assert np.all(np.isfinite(out))
    assert np.all(np.asarray(out)[0, 1] == 0.0) and np.all(np.asarray(out)[1, 3] == 0.0)
    assert np.any(np.asarray(out)[0, 0] != 0.0)

    # Only the empty rows carry a cotangent: every gradient must be exactly zero.
    sel = np.zeros((B, T, H, D), np.float32)
    sel[0, 1] = 1.0
    sel[1, 3] = 1.0

    def loss(q, k, v):
        return jnp.sum(numerics.attend(q, k, v, valid) * sel)

    for g in jax.grad(loss, argnums=(0, 1, 2))(q, k, v):
        assert np.all(np.isfinite(g)) and np.all(np.asarray(g) == 0.0)


def test_masked_softmax_lse_matches_logsumexp_and_is_minus_inf_on_empty_rows():
    logits = jax.random.normal(jax.random.PRNGKey(1), (B, H, T, S)) * 4.0
    valid = _valid_with_empty_rows()
    probs, lse = numerics.masked_softmax(logits, valid, return_lse=True)
    want = jax.nn.logsumexp(jnp.where(valid, logits, -jnp.inf), axis=-1)
    np.testing.assert_allclose(np.asarray(lse), np.asarray(want), rtol=1e-6)
    assert np.all(np.asarray(lse)[0, :, 1] == -np.inf)
    np.testing.assert_allclose(np.asarray(probs.sum(-1))[1, :, 2], 1.0, rtol=1e-6)
    assert np.all(np.asarray(probs)[1, :, 3] == 0.0)


@pytest.mark.parametrize("split", [1, 3, 7])
def test_merge_lse_of_two_key_halves_equals_attention_over_all_keys(split):
    """``merge_lse`` of two attentions over disjoint key sets is the attention over their
    union, in values, in the merged lse and in gradients (through both lse's)."""
    q, k, v = _qkv(seed=3)
    valid = _valid_with_empty_rows()
    scale = 1.0 / np.sqrt(D)

    def whole(q, k, v):
        return numerics.attend_logits(numerics.scores(q, k, scale), v, valid, return_lse=True)

    def halves(q, k, v):
        parts = []
        for sl in (slice(0, split), slice(split, S)):
            out, lse_BHT = numerics.attend_logits(
                numerics.scores(q, k[:, sl], scale), v[:, sl], valid[..., sl], return_lse=True
            )
            parts.append((out, jnp.swapaxes(lse_BHT, 1, 2)))  # lse in the out layout [B, T, H]
        out, lse_BTH = numerics.merge_lse(
            [p[0] for p in parts], [p[1] for p in parts], return_lse=True
        )
        return out, jnp.swapaxes(lse_BTH, 1, 2)

    out_w, lse_w = whole(q, k, v)
    out_h, lse_h = halves(q, k, v)
    np.testing.assert_allclose(np.asarray(out_h), np.asarray(out_w), atol=1e-6)
    np.testing.assert_array_equal(np.isinf(lse_h), np.isinf(lse_w))
    fin = np.isfinite(np.asarray(lse_w))
    np.testing.assert_allclose(np.asarray(lse_h)[fin], np.asarray(lse_w)[fin], rtol=1e-6)

    w_out = jax.random.normal(jax.random.PRNGKey(5), out_w.shape)
    w_lse = jax.random.normal(jax.random.PRNGKey(6), lse_w.shape)

    def loss(fn):
        def f(q, k, v):
            out, lse = fn(q, k, v)
            return jnp.sum(out * w_out) + jnp.sum(jnp.where(jnp.isfinite(lse), lse, 0.0) * w_lse)

        return f

    g_w = jax.grad(loss(whole), argnums=(0, 1, 2))(q, k, v)
    g_h = jax.grad(loss(halves), argnums=(0, 1, 2))(q, k, v)
    for a, b in zip(g_h, g_w, strict=True):
        assert np.all(np.isfinite(a))
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


def test_merge_lse_with_an_empty_part_is_the_other_part():
    out = jax.random.normal(jax.random.PRNGKey(0), (B, T, H, D))
    lse = jax.random.normal(jax.random.PRNGKey(1), (B, T, H))
    empty_out = jnp.full_like(out, 123.0)  # content of a part with no key must not leak
    empty_lse = jnp.full_like(lse, -jnp.inf)
    merged = numerics.merge_lse([out, empty_out], [lse, empty_lse])
    np.testing.assert_allclose(np.asarray(merged), np.asarray(out), rtol=1e-6)
    both_empty = numerics.merge_lse([empty_out, empty_out], [empty_lse, empty_lse])
    assert np.all(np.asarray(both_empty) == 0.0)


def test_finish_online_softmax_equals_masked_softmax_over_two_blocks():
    """Two online-softmax steps (Milakov & Gimelshein 2018, Alg. 3) then
    ``finish_online_softmax`` give the full softmax output and its lse."""
    logits = jax.random.normal(jax.random.PRNGKey(2), (T, S)) * 3.0
    v = jax.random.normal(jax.random.PRNGKey(3), (S, D))
    m, l, acc = jnp.full((T,), -jnp.inf), jnp.zeros((T,)), jnp.zeros((T, D))
    for sl in (slice(0, 3), slice(3, S)):
        s_ = logits[:, sl]
        m_new = jnp.maximum(m, s_.max(-1))
        p = jnp.exp(s_ - m_new[:, None])
        corr = jnp.exp(m - m_new)
        l, acc, m = l * corr + p.sum(-1), acc * corr[:, None] + p @ v[sl], m_new
    out, lse = numerics.finish_online_softmax(m, l, acc)
    probs, want_lse = numerics.masked_softmax(logits, return_lse=True)
    np.testing.assert_allclose(np.asarray(out), np.asarray(probs @ v), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(lse), np.asarray(want_lse), rtol=1e-6)
    # A row that visited no key (l = 0, acc = 0, m = -inf): zeros and -inf, never NaN.
    empty = jnp.full((2,), -jnp.inf), jnp.zeros((2,)), jnp.zeros((2, D))
    out0, lse0 = numerics.finish_online_softmax(*empty)
    assert np.all(np.asarray(out0) == 0.0) and np.all(np.asarray(lse0) == -np.inf)


@pytest.mark.parametrize("axis,length,value", [(1, 12, 0), (0, 5, -1), (2, 3, 0)])
def test_pad_to_round_trips(axis, length, value):
    x = jnp.arange(2 * 7 * 3).reshape(2, 7, 3)
    if length <= x.shape[axis]:
        assert numerics.pad_to(x, x.shape[axis], axis) is x  # nothing to pad: no copy
        return
    y = numerics.pad_to(x, length, axis, value)
    assert y.shape[axis] == length
    np.testing.assert_array_equal(
        np.asarray(jax.lax.slice_in_dim(y, 0, x.shape[axis], axis=axis)), x
    )
    tail = jax.lax.slice_in_dim(y, x.shape[axis], length, axis=axis)
    assert np.all(np.asarray(tail) == value)


def test_pad_to_multiple():
    x = jnp.ones((2, 10, 3))
    assert numerics.pad_to_multiple(x, 4).shape == (2, 12, 3)
    assert numerics.pad_to_multiple(x, 5) is x


def test_dropout_is_inverted_and_keeps_the_mean():
    probs = jnp.full((4, 64, 64), 0.25)
    out = numerics.dropout(probs, 0.5, jax.random.PRNGKey(0))
    kept = np.asarray(out) != 0.0
    np.testing.assert_allclose(np.asarray(out)[kept], 0.5)  # 0.25 / (1 - 0.5)
    assert 0.45 < kept.mean() < 0.55
    assert numerics.dropout(probs, 0.0, None) is probs


@pytest.mark.parametrize(
    "rate,rng,match",
    [
        (0.1, None, "dropout_rate > 0 needs a dropout_rng"),
        (1.0, jax.random.PRNGKey(0), r"dropout_rate must be in \[0, 1\); got 1.0"),
        (-0.1, None, r"dropout_rate must be in \[0, 1\)"),
    ],
)
def test_dropout_arguments_are_checked(rate, rng, match):
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=match):
        numerics.attend(q, k, v, dropout_rate=rate, dropout_rng=rng)
