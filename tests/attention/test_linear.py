"""Linear attention (Katharopoulos et al. 2020): the prefix-sum and summed forms equal the
quadratic form ``((phi(Q) phi(K)^T) ⊙ M) V`` normalised, in values and gradients; causality;
padding; the recurrent state; clear refusals.

Legend: B batch, T query length, S key length, H heads, D head dim.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax import attention
from seqjax.attention import linear

B, T, H, D = 2, 12, 2, 8


def _qkv(seed=0, t=T, s=T):
    r = np.random.default_rng(seed)
    return tuple(
        jnp.asarray(r.normal(size=(B, n, H, D)), jnp.float32) for n in (t, s, s)
    )  # fmt: skip


def _reference(q, k, v, *, causal, mask=None):
    phi = linear.elu_plus_one
    return linear.quadratic_attention(phi(q), phi(k), v, causal=causal, mask=mask)


@pytest.mark.parametrize("causal", [False, True])
def test_equals_masked_quadratic_form_values_and_gradients(causal):
    q, k, v = _qkv()
    mask = jnp.asarray(np.arange(T)[None, :] < np.array([[T], [T - 3]]))
    fn = attention.get("linear")
    out = fn(q, k, v, causal=causal, mask=mask)
    ref = _reference(q, k, v, causal=causal, mask=mask)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    w = jnp.asarray(np.random.default_rng(9).normal(size=out.shape), jnp.float32)

    def loss(f):
        return lambda q, k, v: jnp.sum(w * f(q, k, v))

    g = jax.grad(loss(lambda *a: fn(*a, causal=causal, mask=mask)), argnums=(0, 1, 2))(q, k, v)
    g_ref = jax.grad(loss(lambda *a: _reference(*a, causal=causal, mask=mask)), argnums=(0, 1, 2))(
        q, k, v
    )
    for a, b in zip(g, g_ref):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_causal_bottom_right_alignment_with_fewer_queries():
    q, k, v = _qkv(t=5, s=T)
    out = attention.get("linear")(q, k, v, causal=True)
    np.testing.assert_allclose(out, _reference(q, k, v, causal=True), rtol=1e-5, atol=1e-5)


def test_causality_values_and_gradients():
    q, k, v = _qkv(1)
    fn = attention.get("linear")
    i = 5
    out = fn(q, k, v, causal=True)
    k2 = k.at[:, i + 1 :].add(3.0)
    v2 = v.at[:, i + 1 :].add(-2.0)
    out2 = fn(q, k2, v2, causal=True)
    np.testing.assert_array_equal(out[:, : i + 1], out2[:, : i + 1])
    g = jax.grad(lambda k, v: fn(q, k, v, causal=True)[:, i].sum(), argnums=(0, 1))(k, v)
    for x in g:
        assert float(jnp.abs(x[:, i + 1 :]).max()) == 0.0
        assert float(jnp.abs(x[:, : i + 1]).max()) > 0.0


@pytest.mark.parametrize("causal", [False, True])
def test_padding_equals_unpadded_sequence(causal):
    q, k, v = _qkv(2)
    n = 8
    mask = jnp.asarray(np.arange(T)[None, :] < n).repeat(B, 0)
    fn = attention.get("linear")
    # Padded keys/values hold garbage; real positions must not see it.
    k_pad, v_pad = k.at[:, n:].set(50.0), v.at[:, n:].set(-50.0)
    out = fn(q, k_pad, v_pad, causal=causal, mask=mask)[:, :n]
    alone = fn(q[:, :n], k[:, :n], v[:, :n], causal=causal)
    np.testing.assert_allclose(out, alone, rtol=1e-5, atol=1e-6)


def test_recurrent_state_in_pieces_equals_causal_form():
    q, k, v = _qkv(3)
    full = attention.get("linear")(q, k, v, causal=True)
    state, outs = None, []
    for a, b in ((0, 5), (5, 6), (6, T)):
        out, state = linear.linear_decode(q[:, a:b], k[:, a:b], v[:, a:b], state)
        outs.append(out)
    np.testing.assert_allclose(jnp.concatenate(outs, 1), full, rtol=1e-5, atol=1e-5)


def test_refuses_options_it_cannot_honour():
    q, k, v = _qkv()
    fn = attention.get("linear")
    with pytest.raises(ValueError, match="dropout"):
        fn(q, k, v, dropout_rate=0.1, dropout_rng=jax.random.key(0))
    with pytest.raises(ValueError, match="segment_ids"):
        fn(q, k, v, segment_ids=jnp.zeros((B, T), jnp.int32))
    with pytest.raises(ValueError, match="scale"):
        fn(q, k, v, scale=0.5)
    with pytest.raises(ValueError, match="unknown option"):
        attention.check_options("linear", {"num_features": 4})
