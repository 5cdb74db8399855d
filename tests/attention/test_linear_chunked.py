"""Causal linear attention and Performer in chunks (``seqjax.attention.linear_chunked``, the
default for ``causal=True``) equal the prefix-sum form (``chunk=0``) and the masked
quadratic form in values and gradients: chunk lengths that divide T, leave a tail, equal 1
or exceed T; more keys than queries (bottom-right alignment); key padding."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax import attention
from seqjax.attention import linear, registry

B, T, H, D = 2, 13, 2, 8


def _qkv(s=T, seed=0):
    ks = jax.random.split(jax.random.PRNGKey(seed), 4)
    q = jax.random.normal(ks[0], (B, T, H, D))
    k = jax.random.normal(ks[1], (B, s, H, D))
    v = jax.random.normal(ks[2], (B, s, H, D))
    ct = jax.random.normal(ks[3], (B, T, H, D))
    return q, k, v, ct


def _value_and_grads(fn, q, k, v, ct):
    def loss(q, k, v):
        return jnp.vdot(fn(q, k, v), ct)

    out = fn(q, k, v)
    return out, jax.grad(loss, (0, 1, 2))(q, k, v)


def _assert_equal(a, b, rtol=1e-4, atol=1e-5):
    (out_a, g_a), (out_b, g_b) = a, b
    np.testing.assert_allclose(out_a, out_b, rtol=rtol, atol=atol)
    for name, x, y in zip("qkv", g_a, g_b):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol, err_msg=f"d{name}")
        assert float(jnp.abs(y).max()) > 0


@pytest.mark.parametrize("chunk", [1, 4, 5, 13, 64])
@pytest.mark.parametrize("s", [T, T + 6])
def test_linear_chunks_equal_prefix_sums_and_the_quadratic_form(chunk, s):
    q, k, v, ct = _qkv(s)
    mask = jnp.ones((B, s), bool).at[1, 2].set(False).at[0, -1].set(False)
    fn = attention.get("linear")
    chunked = _value_and_grads(
        lambda q, k, v: fn(q, k, v, causal=True, mask=mask, chunk=chunk), q, k, v, ct
    )
    prefix = _value_and_grads(
        lambda q, k, v: fn(q, k, v, causal=True, mask=mask, chunk=0), q, k, v, ct
    )
    quadratic = _value_and_grads(
        lambda q, k, v: linear.quadratic_attention(
            linear.elu_plus_one(q), linear.elu_plus_one(k), v, causal=True, mask=mask
        ),
        q, k, v, ct,
    )  # fmt: skip
    _assert_equal(chunked, prefix)
    _assert_equal(chunked, quadratic)


@pytest.mark.parametrize("chunk", [3, 16])
def test_performer_chunks_equal_prefix_sums(chunk):
    q, k, v, ct = _qkv(T + 3, seed=1)
    fn = attention.get("performer")
    kw = dict(causal=True, num_features=32, seed=3)
    chunked = _value_and_grads(lambda q, k, v: fn(q, k, v, chunk=chunk, **kw), q, k, v, ct)
    prefix = _value_and_grads(lambda q, k, v: fn(q, k, v, chunk=0, **kw), q, k, v, ct)
    _assert_equal(chunked, prefix)


def test_chunked_is_the_default_and_causal():
    """The default chunked path stores K states, not T: no [B, T, H, M, D] array in its
    jaxpr; and output i does not depend on positions j > i (values and gradients)."""
    q, k, v, ct = _qkv()
    fn = attention.get("linear")
    jaxpr = str(jax.make_jaxpr(lambda q, k, v: fn(q, k, v, causal=True))(q, k, v))
    assert f"f32[{B},{T},{H},{D},{D}]" not in jaxpr
    jaxpr0 = str(jax.make_jaxpr(lambda q, k, v: fn(q, k, v, causal=True, chunk=0))(q, k, v))
    assert f"f32[{B},{T},{H},{D},{D}]" in jaxpr0  # the check can fail
    i = 6
    jac = jax.jacobian(lambda k: fn(q, k, v, causal=True, chunk=4)[:, i])(k)
    assert float(jnp.abs(jac[:, :, :, :, i + 1 :]).max()) == 0.0
    assert float(jnp.abs(jac[:, :, :, :, : i + 1]).max()) > 0.0


@pytest.mark.parametrize("name", ["linear", "performer"])
@pytest.mark.parametrize("chunk", [-1, 2.5, True])
def test_bad_chunk_is_named(name, chunk):
    q, k, v, _ = _qkv()
    with pytest.raises(ValueError, match=f"{name} option chunk="):
        attention.get(name)(q, k, v, causal=True, chunk=chunk)
    with pytest.raises(ValueError, match=f"{name} option chunk="):
        registry.spec(name).validate({"chunk": chunk}, T)


@pytest.mark.parametrize("chunk", [4, 64])
def test_recurrent_prompt_in_chunks_equals_the_cumsum_recurrence(chunk):
    """Decoding: a prompt of T tokens after a cached prefix, in chunks == the cumsum form
    (outputs and the new state) == the full causal forward's last T rows."""
    q, k, v, _ = _qkv(T + 6, seed=2)
    k_pre, v_pre = k[:, :6], v[:, :6]
    k_new, v_new = k[:, 6:], v[:, 6:]
    phi = linear.elu_plus_one
    _, state = linear.recurrent_attention(phi(q[:, :6]), phi(k_pre), v_pre, chunk=0)
    got, got_state = linear.recurrent_attention(phi(q), phi(k_new), v_new, state, chunk=chunk)
    want, want_state = linear.recurrent_attention(phi(q), phi(k_new), v_new, state, chunk=0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for key in ("kv", "z"):
        np.testing.assert_allclose(got_state[key], want_state[key], rtol=1e-5, atol=1e-5)
    full = attention.get("linear")(q, k, v, causal=True)  # T queries after 6 more keys
    np.testing.assert_allclose(got, full, rtol=1e-4, atol=1e-5)
