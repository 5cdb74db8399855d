"""Properties of Reformer LSH attention (``seqjax.attention.lsh``; Kitaev et al. 2020, §2).

Legend: B batch, T length, H heads, D head dim.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax import attention, models
from seqjax.attention import lsh
from seqjax.models import layers

B, T, H, D = 2, 32, 2, 8
TOL = dict(rtol=2e-5, atol=2e-5)


def _inputs(seed=0, t=T):
    kq, kv = jax.random.split(jax.random.PRNGKey(seed))
    return jax.random.normal(kq, (B, t, H, D)), jax.random.normal(kv, (B, t, H, D))


def _mask(t=T):
    lengths = np.array([[t - 7], [t]])
    return jnp.asarray(np.arange(t)[None, :] < lengths)


def _value_and_grads(fn, q, v):
    """``fn(q, v)`` and the gradients of a random projection of it, in one compile."""
    w = jax.random.normal(jax.random.PRNGKey(9), q.shape[:3] + (v.shape[-1],))

    @jax.jit
    def run(q, v):
        out, vjp = jax.vjp(fn, q, v)
        return out, vjp(w)

    return run(q, v)


# One bucket and one chunk covering the sequence (and, equivalently, every chunk seeing every
# other chunk) is full shared-QK attention with the self mask: values and gradients.
@pytest.mark.parametrize(
    "causal,masked,opts",
    [
        # One bucket: slow (CI keeps the real-hashing case below, which covers more).
        pytest.param(
            False, True, dict(n_hashes=2, chunk_len=T, n_buckets=1), marks=pytest.mark.slow
        ),
        pytest.param(
            True, False, dict(n_hashes=1, chunk_len=T, n_buckets=1), marks=pytest.mark.slow
        ),
        # Real hashing, 4 chunks whose windows cover all chunks: exercises sort/window/unsort.
        (
            True,
            True,
            dict(n_hashes=3, chunk_len=8, n_buckets=4, n_chunks_before=3, n_chunks_after=3),
        ),
    ],
)
def test_equals_full_shared_qk_attention(causal, masked, opts):
    q, v = _inputs()
    mask = _mask() if masked else None
    rng = jax.random.PRNGKey(3)
    got, (dq, dv) = _value_and_grads(
        lambda q, v: lsh.lsh_attention(q, None, v, causal=causal, mask=mask, rng=rng, **opts), q, v
    )
    want, (dq_ref, dv_ref) = _value_and_grads(
        lambda q, v: lsh.shared_qk_reference(q, v, causal=causal, mask=mask), q, v
    )
    np.testing.assert_allclose(got, want, **TOL)
    np.testing.assert_allclose(dq, dq_ref, **TOL)
    np.testing.assert_allclose(dv, dv_ref, **TOL)


def _hashed(q, v, **kw):
    opts = dict(n_hashes=2, chunk_len=4, rng=jax.random.PRNGKey(5))
    opts.update(kw)
    return lsh.lsh_attention(q, None, v, **opts)


def _grads_of_position(fn, q, v, i):
    """Gradients of a random projection of ``fn(q, v)[:, i]`` w.r.t. ``q`` and ``v``."""
    w = jax.random.normal(jax.random.PRNGKey(8), (q.shape[0], H, D))
    return jax.jit(jax.grad(lambda q, v: (fn(q, v)[:, i] * w).sum(), argnums=(0, 1)))(q, v)


def test_causal_lsh_never_uses_the_future():
    """Output i has zero gradient w.r.t. every input at j > i, and future values can change
    freely (hashing depends on queries only). T = 30 is not a multiple of chunk_len: the
    internal padding is exercised too."""
    q, v = _inputs(1, t=30)
    i = 13
    dq, dv = _grads_of_position(lambda q, v: _hashed(q, v, causal=True), q, v, i)
    assert np.all(np.asarray(dq)[:, i + 1 :] == 0.0)
    assert np.all(np.asarray(dv)[:, i + 1 :] == 0.0)
    assert np.any(np.asarray(dv)[:, :i] != 0.0)  # the past is used
    fn = jax.jit(lambda q, v: _hashed(q, v, causal=True))
    v2 = v.at[:, i + 1 :].set(123.0)
    np.testing.assert_array_equal(fn(q, v)[:, : i + 1], fn(q, v2)[:, : i + 1])


def test_padding_invariance_and_padded_keys_get_no_weight():
    q, v = _inputs(2)
    mask = _mask()
    pad = ~np.asarray(mask)
    kq, kv = jax.random.split(jax.random.PRNGKey(7))
    q2 = jnp.where(pad[:, :, None, None], jax.random.normal(kq, q.shape), q)
    v2 = jnp.where(pad[:, :, None, None], 1e3 * jax.random.normal(kv, v.shape), v)
    fn = jax.jit(lambda q, v: _hashed(q, v, mask=mask))
    out, out2 = np.asarray(fn(q, v)), np.asarray(fn(q2, v2))
    np.testing.assert_array_equal(out[~pad], out2[~pad])  # exact: padding sorts last


def test_self_mask_rule():
    """A position attends to itself only when nothing else is visible (logit -1e5)."""
    q, v = _inputs(3)
    out = jax.jit(lambda q, v: _hashed(q, v, causal=True))(q, v)
    np.testing.assert_allclose(out[:, 0], v[:, 0], rtol=1e-6)  # position 0 sees only itself
    # With other keys visible the own value gets (numerically) zero weight.
    i = 9
    _, dv = _grads_of_position(lambda q, v: lsh.lsh_attention(q, None, v, chunk_len=T), q, v, i)
    assert np.all(np.asarray(dv)[:, i] == 0.0)
    assert np.all(np.any(np.asarray(dv)[:, :i] != 0.0, axis=(1, 3)))  # other keys are used
    # Only key visible is the query itself (everything else padded): output = own value.
    only = jnp.asarray(np.arange(T)[None, :] == 5).repeat(B, 0)
    out_only = jax.jit(lambda q, v: lsh.lsh_attention(q, None, v, mask=only))(q, v)
    np.testing.assert_allclose(out_only[:, 5], v[:, 5], rtol=1e-6)


def test_rng_controls_the_hashing():
    q, v = _inputs(4)
    fn = jax.jit(lambda q, v, rng: _hashed(q, v, rng=rng, n_hashes=1))
    a, b, c = (fn(q, v, jax.random.PRNGKey(s)) for s in (11, 11, 12))
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)
    rot = lsh.rotations(jax.random.PRNGKey(0), num_heads=H, n_hashes=2, head_dim=D, n_buckets=8)
    rot2 = lsh.rotations(jax.random.PRNGKey(1), num_heads=H, n_hashes=2, head_dim=D, n_buckets=8)
    x = q.transpose(0, 2, 1, 3)
    bk, bk2 = lsh.hash_buckets(x, rot, 8), lsh.hash_buckets(x, rot2, 8)
    assert bk.shape == (B, H, 2, T) and int(bk.min()) >= 0 and int(bk.max()) < 8
    assert np.any(bk != bk2)  # different key, different hashing
    assert np.any(bk[:, :, 0] != bk[:, :, 1])  # separate rotations per round
    # argmax([xR; -xR]) is invariant to scaling x (keys are normalized queries).
    np.testing.assert_array_equal(bk, lsh.hash_buckets(3.0 * x, rot, 8))
    # Equal to the argmax of the explicit concatenation (which hash_buckets never builds).
    xr = jnp.einsum("bhtd,hrdk->bhrtk", x, rot)
    np.testing.assert_array_equal(bk, jnp.argmax(jnp.concatenate([xr, -xr], -1), -1))
    # Factorized buckets (4, 6): each factor hashes with its own columns, b1 + 4 b2.
    rot_f = lsh.rotations(jax.random.PRNGKey(0), num_heads=H, n_hashes=2, head_dim=D,
                          n_buckets=(4, 6))  # fmt: skip
    assert rot_f.shape[-1] == 2 + 3
    xr = jnp.einsum("bhtd,hrdk->bhrtk", x, rot_f)
    b1 = jnp.argmax(jnp.concatenate([xr[..., :2], -xr[..., :2]], -1), -1)
    b2 = jnp.argmax(jnp.concatenate([xr[..., 2:], -xr[..., 2:]], -1), -1)
    bf = lsh.hash_buckets(x, rot_f, (4, 6))
    np.testing.assert_array_equal(bf, b1 + 4 * b2)
    assert int(bf.max()) < 24 and len(np.unique(np.asarray(bf))) > 6


def test_unsort_gradient_is_a_gather_not_a_scatter():
    q, v = _inputs(5)
    grad = jax.grad(lambda q, v: _hashed(q, v, causal=True).sum(), argnums=(0, 1))
    jaxpr = str(jax.make_jaxpr(grad)(q, v))
    assert "scatter" not in jaxpr
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 6, 3))
    perm = jnp.stack([jax.random.permutation(jax.random.PRNGKey(s), 6) for s in (1, 2)])
    inv = jnp.argsort(perm, -1)
    w = jax.random.normal(jax.random.PRNGKey(3), (2, 6, 3))
    g = jax.grad(lambda x: (lsh.permute(x, perm, inv) * w).sum())(x)
    g_ref = jax.grad(lambda x: (jnp.take_along_axis(x, perm[..., None], 1) * w).sum())(x)
    np.testing.assert_allclose(g, g_ref)


@pytest.mark.slow  # odd lengths are also covered by test_causal_lsh_never_uses_the_future
def test_odd_length_and_dropout_are_finite():
    q, v = _inputs(6, t=30)  # not a multiple of chunk_len: padded internally
    out = jax.jit(
        lambda q, v: _hashed(q, v, causal=True, dropout_rate=0.1, dropout_rng=jax.random.PRNGKey(1))
    )(q, v)
    assert out.shape == (B, 30, H, D) and bool(jnp.isfinite(out).all())


@pytest.mark.parametrize(
    "opts,field",
    [
        (dict(n_buckets=3), "n_buckets"),
        (dict(n_buckets=(4, 3)), "n_buckets"),
        (dict(chunk_len=0), "chunk_len"),
        (dict(n_hashes=0), "n_hashes"),
        (dict(n_chunks_before=-1), "n_chunks_before"),
    ],
)
def test_bad_options_name_the_field(opts, field):
    q, v = _inputs()
    with pytest.raises(ValueError, match=field):
        lsh.lsh_attention(q, None, v, **opts)
    with pytest.raises(ValueError, match=field):
        attention.spec("lsh").validate(opts, T)


def test_rejects_explicit_keys():
    q, v = _inputs()
    with pytest.raises(ValueError, match="shared-QK"):
        lsh.lsh_attention(q, v, v)


def test_module_has_no_key_projection_and_uses_the_lsh_stream():
    mha = layers.MultiHeadAttention(
        num_heads=H,
        head_dim=D,
        mechanism="lsh",
        options=layers.freeze_options(dict(n_hashes=2, chunk_len=4)),
        causal=True,
    )
    x = jax.random.normal(jax.random.PRNGKey(0), (B, T, 16))
    params = jax.jit(mha.init)(jax.random.PRNGKey(1), x)["params"]
    assert set(params) == {"query", "value", "out"}
    run = jax.jit(lambda rngs: mha.apply({"params": params}, x, rngs=rngs))
    a = run({"lsh": jax.random.PRNGKey(2)})
    b = run({"lsh": jax.random.PRNGKey(2)})
    c = run({"lsh": jax.random.PRNGKey(3)})
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)
    # No RNG stream (evaluation, decoding): the deterministic fallback key, no crash.
    np.testing.assert_array_equal(run({}), run({}))


def _padded(x_BTHD, total):
    return jnp.pad(x_BTHD, ((0, 0), (0, total - x_BTHD.shape[1]), (0, 0), (0, 0)))


@pytest.mark.parametrize("causal", [False, True])
def test_default_n_buckets_from_max_len_is_padding_length_invariant(causal):
    """13 real positions followed by 11 or 20 padded ones: with ``max_len`` (what models
    pass) the default ``n_buckets`` no longer follows the padded length, so the real
    positions' outputs are identical; and they equal the explicit ``n_buckets``."""
    real, max_len = 13, 40
    q, v = _inputs(11, t=real)
    outs = []
    for total in (real + 11, real + 20):
        mask = jnp.broadcast_to(jnp.arange(total) < real, (B, total))
        fn = jax.jit(
            lambda q, v, mask=mask: _hashed(q, v, causal=causal, mask=mask, max_len=max_len)
        )
        outs.append(np.asarray(fn(_padded(q, total), _padded(v, total)))[:, :real])
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-6, atol=1e-6)
    nb = lsh.default_n_buckets(max_len, 4)
    explicit = jax.jit(lambda q, v: _hashed(q, v, causal=causal, n_buckets=nb))(q, v)
    np.testing.assert_allclose(outs[0], explicit, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="max_len"):
        _hashed(q, v, max_len=0)


def test_lsh_classifier_is_padding_length_invariant():
    """An LSH classifier (n_buckets left at its default) gives the same logits whether the
    13 real tokens are followed by 11 or 20 padding tokens."""
    cfg = models.TransformerConfig(
        vocab_size=30, num_layers=2, d_model=16, num_heads=2, max_len=40, num_classes=3,
        causal=False, pad_id=0,
        attention=models.attention_cycle("lsh", {"lsh": dict(n_hashes=2, chunk_len=4)}),
    )  # fmt: skip
    model = models.TransformerClassifier(cfg)
    real = jnp.asarray(np.random.default_rng(0).integers(1, 30, (B, 13)), jnp.int32)
    params = jax.jit(model.init)(jax.random.PRNGKey(0), real)["params"]
    logits = [
        jax.jit(model.apply)({"params": params}, jnp.pad(real, ((0, 0), (0, pad))))
        for pad in (11, 20)
    ]
    np.testing.assert_allclose(logits[0], logits[1], rtol=1e-5, atol=1e-5)
    other = real.at[:, 2].set(real[:, 2] % 29 + 1)  # a real token does matter
    assert not np.allclose(jax.jit(model.apply)({"params": params}, other), logits[0][:, :])


def test_reverse_mode_of_any_order_but_forward_mode_raises():
    """Hessian-vector products as grad of grad equal the full shared-QK reference's (one
    chunk covering the sequence); jvp / jacfwd raise a message naming what works."""
    q, v = _inputs(12, t=8)
    t_q = jax.random.normal(jax.random.PRNGKey(13), q.shape)

    def hvp(attend):
        f = lambda q: jnp.sum(jnp.sin(attend(q)))  # noqa: E731
        return jax.jit(jax.grad(lambda q: jnp.sum(jax.grad(f)(q) * t_q)))(q)

    got = hvp(lambda q: lsh.lsh_attention(q, None, v, causal=True, chunk_len=8, n_buckets=1))
    want = hvp(lambda q: lsh.shared_qk_reference(q, v, causal=True))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    f = lambda q: jnp.sum(_hashed(q, v, causal=True))  # noqa: E731
    for transform in (lambda: jax.jvp(f, (q,), (q,)), lambda: jax.jit(jax.jacfwd(f))(q)):
        with pytest.raises(NotImplementedError, match="not forward mode"):
            transform()
