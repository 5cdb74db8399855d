"""The chunked cross-entropy (``seqjax.models.chunked_xent``) equals the plain form of the
materialized logits (``seqjax.tasks.losses.cross_entropy_sums``) in values and in
gradients w.r.t. the hidden states, the output embedding (both layouts), the bias and the
token weights; and the LM task uses it where ``train.xent_chunk`` says so."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax.models import chunked_xent
from seqjax.tasks import losses

B, T, E, V = 3, 7, 16, 37


def _inputs(seed=0, dtype=jnp.float32):
    ks = jax.random.split(jax.random.PRNGKey(seed), 5)
    h = jax.random.normal(ks[0], (B, T, E), dtype)
    w = jax.random.normal(ks[1], (V, E), jnp.float32) * 0.5
    bias = jax.random.normal(ks[2], (V,), jnp.float32)
    targets = jax.random.randint(ks[3], (B, T), 0, V)
    weights = (jax.random.uniform(ks[4], (B, T)) > 0.25).astype(jnp.float32) * 1.5
    return h, w, bias, targets, weights


def _plain(h, w, bias, targets, weights, layout):
    w_ve = w if layout == "ve" else w.T
    logits = jnp.einsum("bte,ve->btv", h.astype(jnp.float32), w_ve) + bias[None, None]
    return losses.cross_entropy_sums(logits, targets, weights)


def _chunked(h, w, bias, targets, weights, layout, chunk):
    return chunked_xent.chunked_cross_entropy_sums(
        h, w, targets, weights, chunk=chunk, layout=layout, bias_V=bias
    )


@pytest.mark.parametrize("layout", ["ve", "ev"])
@pytest.mark.parametrize("chunk", [1, 4, 21, 64])  # 4: a padded tail; 64 > N: one chunk
def test_values_and_gradients_equal_the_plain_form(layout, chunk):
    h, w, bias, targets, weights = _inputs()
    w = w if layout == "ve" else w.T
    got = _chunked(h, w, bias, targets, weights, layout, chunk)
    want = _plain(h, w, bias, targets, weights, layout)
    for key in ("loss_sum", "correct_sum", "weight_sum"):
        np.testing.assert_allclose(got[key], want[key], rtol=1e-5, err_msg=key)
    assert float(want["correct_sum"]) > 0  # the argmax count is exercised

    def loss(fn):  # a mean loss, as the train step takes it
        return lambda *a: fn(*a)["loss_sum"] / 7.0

    argnums = (0, 1, 2, 4)
    g_got = jax.grad(loss(lambda *a: _chunked(*a, layout, chunk)), argnums)(
        h, w, bias, targets, weights
    )
    g_want = jax.grad(loss(lambda *a: _plain(*a, layout)), argnums)(h, w, bias, targets, weights)
    for name, a, b in zip(("h", "w", "bias", "weights"), g_got, g_want):
        assert a.shape == b.shape and a.dtype == b.dtype, name
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=name)
        assert float(jnp.abs(b).max()) > 0, name


def test_jit_and_bf16_hidden_states():
    h, w, bias, targets, weights = _inputs(seed=1, dtype=jnp.bfloat16)
    fn = jax.jit(lambda h, w: _chunked(h, w, bias, targets, weights, "ve", 5)["loss_sum"])
    got, (dh, dw) = jax.value_and_grad(fn, (0, 1))(h, w)
    want, (dh_p, dw_p) = jax.value_and_grad(
        lambda h, w: _plain(h, w, bias, targets, weights, "ve")["loss_sum"], (0, 1)
    )(h, w)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert dh.dtype == jnp.bfloat16 and dw.dtype == jnp.float32
    np.testing.assert_allclose(dh.astype(jnp.float32), dh_p.astype(jnp.float32), rtol=1e-2)
    np.testing.assert_allclose(dw, dw_p, rtol=1e-5, atol=1e-6)


def test_no_full_logits_in_the_compiled_gradient():
    """The largest float32 intermediate of the chunked gradient is [C, V], never [N, V]."""
    n, c, e, v = 512, 64, 8, 1000
    h = jnp.ones((n, e))
    w = jnp.ones((v, e))
    t, wt = jnp.zeros((n,), jnp.int32), jnp.ones((n,))

    def f(h, w):
        return chunked_xent.chunked_cross_entropy_sums(h, w, t, wt, chunk=c)["loss_sum"]

    hlo = jax.jit(jax.grad(f, (0, 1))).lower(h, w).as_text()
    assert f"{c}x{v}xf32" in hlo.replace("tensor<", "").replace(">", "")
    assert f"{n}x{v}" not in hlo


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(chunk=0), "chunk=0 must be a positive integer"),
        (dict(chunk=4, layout="vv"), "layout='vv' must be one of"),
    ],
)
def test_bad_arguments_raise(kwargs, match):
    h, w, _, targets, weights = _inputs()
    with pytest.raises(ValueError, match=match):
        chunked_xent.chunked_cross_entropy_sums(h, w, targets, weights, **kwargs)
