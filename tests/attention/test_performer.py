"""Performer / FAVOR+ (Choromanski et al. 2021): the error against dense softmax attention
falls as the number of random features grows (as a rate, ~1/sqrt(m), seeded); the
kernelized forms equal their quadratic forms; causality (values and gradients); padding;
orthogonal features; redrawing; clear option errors.

Legend: B batch, T query length, S key length, H heads, D head dim, M features.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax import attention
from seqjax.attention import dense, linear, performer

B, T, H, D = 2, 16, 2, 8


def _qkv(seed=0, t=T, s=T, sd=0.7):
    r = np.random.default_rng(seed)
    return tuple(
        jnp.asarray(r.normal(size=(B, n, H, D)) * (sd if i < 2 else 1.0), jnp.float32)
        for i, n in enumerate((t, s, s))
    )


def _rms_error(m, causal, n_draws=16):
    """Root-mean-square error against exact softmax attention over ``n_draws`` draws of W."""
    q, k, v = _qkv(0, sd=0.5)
    exact = dense.reference_attention(q, k, v, causal=causal)

    def mse(key):
        out = performer.performer_attention(q, k, v, causal=causal, num_features=m, rng=key)
        return jnp.mean((out - exact) ** 2)

    keys = jax.random.split(jax.random.key(0), n_draws)
    return float(jnp.sqrt(jax.jit(jax.vmap(mse))(keys).mean()))


@pytest.mark.parametrize("causal", [False, True])
def test_error_against_softmax_falls_as_one_over_sqrt_features(causal):
    ms = (16, 64, 256, 1024)
    errs = [_rms_error(m, causal) for m in ms]
    assert all(a > b for a, b in zip(errs, errs[1:])), errs
    # Log-log slope over m = 64 ... 1024: the estimator's 1/sqrt(m) (slope -1/2); the ratio
    # of two estimates converges to it from above (measured: about -0.42).
    slope = np.polyfit(np.log(ms[1:]), np.log(errs[1:]), 1)[0]
    assert -0.65 < slope < -0.35, (slope, errs)
    assert errs[-1] < 0.03


@pytest.mark.parametrize("causal", [False, True])
def test_equals_quadratic_form_of_its_features(causal):
    q, k, v = _qkv(1)
    key = jax.random.key(3)
    mask = jnp.asarray(np.arange(T)[None, :] < np.array([[T], [T - 4]]))
    out = performer.performer_attention(q, k, v, causal=causal, mask=mask, rng=key)
    w = performer.random_features(key, performer.DEFAULT_FEATURES, D)
    scale = 1 / np.sqrt(D)
    ref = linear.quadratic_attention(
        performer.query_features(q, w, scale),
        performer.key_features(k, w, scale, stabilise=False),
        v,
        causal=causal,
        mask=mask,
        eps=0.0,
    )
    np.testing.assert_allclose(out, ref, rtol=2e-5, atol=2e-5)


def test_causality_values_and_gradients():
    q, k, v = _qkv(2)
    fn = attention.get("performer")
    i = 6
    out = fn(q, k, v, causal=True, num_features=32)
    out2 = fn(q, k.at[:, i + 1 :].add(2.0), v.at[:, i + 1 :].add(-3.0), causal=True,
              num_features=32)  # fmt: skip
    np.testing.assert_array_equal(out[:, : i + 1], out2[:, : i + 1])
    g = jax.grad(
        lambda q, k, v: fn(q, k, v, causal=True, num_features=32)[:, i].sum(), argnums=(0, 1, 2)
    )(q, k, v)
    for x in g:
        assert float(jnp.abs(x[:, i + 1 :]).max()) == 0.0
    assert float(jnp.abs(g[1][:, : i + 1]).max()) > 0.0


@pytest.mark.parametrize("causal", [False, True])
def test_padding_equals_unpadded_sequence(causal):
    q, k, v = _qkv(4)
    n = 10
    mask = jnp.asarray(np.arange(T)[None, :] < n).repeat(B, 0)
    fn = attention.get("performer")
    k_pad, v_pad = k.at[:, n:].set(30.0), v.at[:, n:].set(-50.0)
    out = fn(q, k_pad, v_pad, causal=causal, mask=mask, num_features=64)[:, :n]
    alone = fn(q[:, :n], k[:, :n], v[:, :n], causal=causal, num_features=64)
    np.testing.assert_allclose(out, alone, rtol=1e-5, atol=1e-5)


def test_orthogonal_features_rows_orthogonal_within_blocks():
    w = np.asarray(performer.random_features(jax.random.key(0), 2 * D + 3, D))
    assert w.shape == (2 * D + 3, D)
    for blk in (w[:D], w[D : 2 * D]):
        gram = blk @ blk.T
        np.testing.assert_allclose(gram - np.diag(np.diag(gram)), 0.0, atol=1e-4)
    w_iid = performer.random_features(jax.random.key(0), 8, D, orthogonal=False)
    assert w_iid.shape == (8, D)


def test_orthonormal_columns_equal_lapack_qr_with_positive_diagonal():
    a = jax.random.normal(jax.random.key(3), (3, 16, 16), jnp.float32)
    q_ref, r_ref = np.linalg.qr(np.asarray(a, np.float64))
    q_ref = q_ref * np.sign(np.diagonal(r_ref, axis1=1, axis2=2))[:, None, :]
    q = np.asarray(jax.jit(performer.orthonormal_columns)(a))
    np.testing.assert_allclose(q, q_ref, atol=2e-5)
    np.testing.assert_allclose(np.swapaxes(q, 1, 2) @ q, np.broadcast_to(np.eye(16), q.shape),
                               atol=2e-5)  # fmt: skip


def test_feature_program_has_no_lapack_call():
    """XLA's CPU QR is a LAPACK custom call, and two of them running concurrently in one
    program can deadlock (jax 0.10.2: a 2-layer Performer step hung): the features must be
    computed with plain XLA ops."""

    def two_layers(key):
        k1, k2 = jax.random.split(key)
        return performer.random_features(k1, 32, D) + performer.random_features(k2, 32, D)

    hlo = jax.jit(two_layers).lower(jax.random.key(0)).as_text()
    assert "custom_call" not in hlo


def test_redraw_changes_features_only_in_training():
    from seqjax.models import layers

    x = jnp.asarray(np.random.default_rng(0).normal(size=(1, 6, 8)), jnp.float32)
    opts = layers.freeze_options({"num_features": 8, "redraw": True})
    mha = layers.MultiHeadAttention(num_heads=2, head_dim=4, mechanism="performer", options=opts)
    params = mha.init(jax.random.key(0), x)
    ev = mha.apply(params, x)
    np.testing.assert_array_equal(ev, mha.apply(params, x))  # fixed W without an rng stream
    t1 = mha.apply(params, x, rngs={"dropout": jax.random.key(1)})
    t2 = mha.apply(params, x, rngs={"dropout": jax.random.key(2)})
    assert float(jnp.abs(t1 - t2).max()) > 1e-4  # a fresh W per training step
    fixed = layers.MultiHeadAttention(
        num_heads=2, head_dim=4, mechanism="performer",
        options=layers.freeze_options({"num_features": 8}),
    )  # fmt: skip
    np.testing.assert_array_equal(
        fixed.apply(params, x, rngs={"dropout": jax.random.key(1)}), fixed.apply(params, x)
    )


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_num_features_must_be_positive(bad):
    spec = attention.spec("performer")
    with pytest.raises(ValueError, match="num_features"):
        spec.validate({"num_features": bad}, 16)
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="num_features"):
        spec.fn(q, k, v, num_features=bad)


def test_refuses_dropout_and_segments():
    q, k, v = _qkv()
    fn = attention.get("performer")
    with pytest.raises(ValueError, match="dropout"):
        fn(q, k, v, dropout_rate=0.1, dropout_rng=jax.random.key(0))
    with pytest.raises(ValueError, match="segment_ids"):
        fn(q, k, v, segment_ids=jnp.zeros((B, T), jnp.int32))
