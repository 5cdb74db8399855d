"""Samplers: the kept sets are exactly the top-k / nucleus definitions (against a numpy
reference), draws never leave them and follow the renormalised distribution, the neutral
settings change nothing, temperature 0 is argmax, and bad settings raise one clear error.

Legend: R rows, V vocabulary, S samples (seeds).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax.decoding import check_sampling, sample_logits, top_k_filter, top_p_filter

R, V = 64, 11


def _logits(seed=0, ties=True):
    """Rows of logits; with ``ties`` rounded to one decimal so equal values are common."""
    x = np.random.default_rng(seed).normal(0.0, 2.0, (R, V))
    return np.round(x, 1).astype(np.float32) if ties else x.astype(np.float32)


def _ref_rank(logits_RV):
    """Rank -> token id: descending logit, equal logits toward the lower id."""
    return np.argsort(-logits_RV, axis=-1, kind="stable")


def _ref_top_k(logits_RV, k):
    keep = np.zeros(logits_RV.shape, bool)
    np.put_along_axis(keep, _ref_rank(logits_RV)[:, :k], True, axis=-1)
    return keep


def _ref_top_p(logits_RV, p):
    """Float64 nucleus: ranks whose preceding mass is < p; None where a cumulative sum lies
    too near p for float32 to decide the same way."""
    z = logits_RV.astype(np.float64)
    probs = np.exp(z - z.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    order = _ref_rank(logits_RV)
    cum = np.cumsum(np.take_along_axis(probs, order, -1), -1)
    near = (np.abs(cum - p) < 1e-5).any(-1)
    before = np.concatenate([np.zeros((len(z), 1)), cum[:, :-1]], -1)
    keep = np.zeros(z.shape, bool)
    np.put_along_axis(keep, order, before < p, axis=-1)
    return keep, near


@pytest.mark.parametrize("k", [1, 2, 5, V - 1])
def test_top_k_keeps_exactly_the_k_largest(k):
    logits = _logits(k)
    out = np.asarray(top_k_filter(jnp.asarray(logits), k))
    keep = _ref_top_k(logits, k)
    np.testing.assert_array_equal(np.isfinite(out), keep)
    np.testing.assert_array_equal(out[keep], logits[keep])
    assert (keep.sum(-1) == k).all()


@pytest.mark.parametrize("p", [0.05, 0.3, 0.5, 0.9, 0.99])
def test_top_p_keeps_exactly_the_nucleus(p):
    logits = _logits(int(p * 100))
    out = np.asarray(top_p_filter(jnp.asarray(logits), p))
    keep, near = _ref_top_p(logits, p)
    assert (~near).sum() > R // 2
    np.testing.assert_array_equal(np.isfinite(out)[~near], keep[~near])
    np.testing.assert_array_equal(out[keep & ~near[:, None]], logits[keep & ~near[:, None]])
    top = _ref_rank(logits)[:, 0]
    assert np.isfinite(out[np.arange(R), top]).all()  # the most probable token always stays


def test_top_p_is_the_smallest_set_reaching_p():
    """The kept mass is >= p, and dropping the least probable kept token falls below p."""
    logits, p = _logits(7, ties=False), 0.7
    keep = np.isfinite(np.asarray(top_p_filter(jnp.asarray(logits), p)))
    probs = np.asarray(jax.nn.softmax(jnp.asarray(logits), -1), np.float64)
    mass = (probs * keep).sum(-1)
    smallest = np.where(keep, probs, np.inf).min(-1)
    assert (mass >= p - 1e-6).all() and (mass - smallest < p).all()


def test_neutral_settings_change_nothing():
    logits = jnp.asarray(_logits(3))
    assert top_k_filter(logits, 0) is logits and top_p_filter(logits, 1.0) is logits
    np.testing.assert_array_equal(top_k_filter(logits, V), logits)
    traced = jax.jit(top_p_filter)(logits, jnp.float32(1.0))  # a traced p = 1 as well
    np.testing.assert_array_equal(traced, logits)
    for seed in range(5):
        rng = jax.random.PRNGKey(seed)
        for temp in (1.0, 0.7):
            plain = jax.random.categorical(rng, logits / temp).astype(jnp.int32)
            drawn = sample_logits(logits, rng, temperature=temp, top_k=0, top_p=1.0)
            np.testing.assert_array_equal(drawn, plain)


def test_temperature_zero_is_argmax():
    logits = jnp.asarray(_logits(4))
    want = np.argmax(np.asarray(logits), -1)
    rng = jax.random.PRNGKey(0)
    np.testing.assert_array_equal(sample_logits(logits, rng, temperature=0.0, top_k=3), want)
    traced = jax.jit(lambda x, t: sample_logits(x, rng, temperature=t, top_p=0.5))
    np.testing.assert_array_equal(traced(logits, jnp.float32(0.0)), want)
    # top_k = 1 (or a tiny nucleus) at any temperature is argmax too
    np.testing.assert_array_equal(sample_logits(logits, rng, temperature=2.0, top_k=1), want)
    np.testing.assert_array_equal(sample_logits(logits, rng, temperature=2.0, top_p=1e-6), want)


@pytest.mark.parametrize(("top_k", "top_p"), [(4, 1.0), (0, 0.6), (5, 0.8)])
def test_draws_stay_in_the_kept_set_and_follow_it(top_k, top_p):
    """4000 seeds at once: no draw outside the kept set; frequencies match the kept
    tokens' renormalised probabilities (at temperature 0.8)."""
    logits = jnp.asarray(_logits(11)[:8])
    temp, s = 0.8, 4000
    scaled = logits / temp
    kept = top_p_filter(top_k_filter(scaled, top_k), top_p)
    keep = np.isfinite(np.asarray(kept))
    draw = jax.jit(
        jax.vmap(lambda r: sample_logits(logits, r, temperature=temp, top_k=top_k, top_p=top_p))
    )
    toks_SR = np.asarray(draw(jax.random.split(jax.random.PRNGKey(0), s)))
    rows = np.broadcast_to(np.arange(8)[None], toks_SR.shape)
    assert keep[rows, toks_SR].all()
    freq = np.stack([np.bincount(toks_SR[:, r], minlength=V) for r in range(8)]) / s
    want = np.asarray(jax.nn.softmax(kept, -1))
    np.testing.assert_allclose(freq, want, atol=0.03)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(top_p=-0.1), "top_p"),
        (dict(top_k=-1), "top_k"),
        (dict(top_k=2.5), "top_k"),
        (dict(top_k=True), "top_k"),
        (dict(temperature=-0.5), "temperature"),
        (dict(temperature=float("nan")), "temperature"),
    ],
)
def test_bad_settings_raise_before_tracing(kwargs, field):
    with pytest.raises(ValueError, match=rf"{field} \(--{field}\) = .* must be"):
        check_sampling(**kwargs)
    with pytest.raises(ValueError, match=field):
        sample_logits(jnp.zeros((2, V)), jax.random.PRNGKey(0), **kwargs)


def test_every_problem_in_one_error():
    with pytest.raises(ValueError, match="temperature.*top_k.*top_p"):
        check_sampling(temperature=-1.0, top_k=-2, top_p=2.0)
    check_sampling(0.0, 0, 1.0)
    check_sampling(1.3, 40, 0.95)
