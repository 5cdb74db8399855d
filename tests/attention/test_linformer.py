"""Linformer as a pure function: the dense limit, the projected formula, lengths, padding
and the clear errors (Wang et al. 2020, §4, eq. 7).

Legend: B batch, T query length, S key length, H heads, D head dim, K projected length,
N max_len.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax import attention
from seqjax.attention import dense, linformer

B, T, H, D = 2, 12, 3, 8
ATOL = 2e-5


def _qkv(seed=0, t=T, s=T):
    kq, kk, kv = jax.random.split(jax.random.key(seed), 3)
    return (
        jax.random.normal(kq, (B, t, H, D)),
        jax.random.normal(kk, (B, s, H, D)),
        jax.random.normal(kv, (B, s, H, D)),
    )


def _projections(sharing, k, n, seed=1):
    """E/F of the shapes each sharing mode uses (F = None where F = E)."""
    ke, kf = jax.random.split(jax.random.key(seed))
    shape = (H, k, n) if sharing == "none" else (k, n)
    e = jax.random.normal(ke, shape) / np.sqrt(n)
    f = jax.random.normal(kf, shape) / np.sqrt(n)
    return e, (f if sharing in ("none", "headwise") else None)


def _identity(sharing, n):
    eye = jnp.eye(n)
    e = jnp.broadcast_to(eye, (H, n, n)) if sharing == "none" else eye
    return e, (e if sharing in ("none", "headwise") else None)


def _lin(q, k, v, e, f, sharing, n, **kw):
    return linformer.linformer_attention(
        q, k, v, k=e.shape[-2], max_len=n, sharing=sharing, proj_e=e, proj_f=f, **kw
    )


@pytest.mark.parametrize("sharing", ["none", "headwise", "kv"])
def test_identity_projection_equals_dense_values_and_gradients(sharing):
    """k = n and E = F = I: Linformer is exactly full attention (values and gradients).

    ("layerwise" runs the same function code as "kv", F = E, with a model-owned E.)
    """
    q, k, v = _qkv(t=7, s=T)  # cross-attention shapes: T != S
    e, f = _identity(sharing, T)

    def loss(fn, q, k, v):
        out = fn(q, k, v)
        return (out * jnp.cos(out)).sum(), out

    def both(q, k, v):  # one jit: eager per-op dispatch of the backward pass is slow
        lin = functools.partial(_lin, e=e, f=f, sharing=sharing, n=T)
        vg = jax.value_and_grad(loss, (1, 2, 3), has_aux=True)
        return vg(lin, q, k, v), vg(dense.reference_attention, q, k, v)

    ((_, o_lin), g_lin), ((_, o_ref), g_ref) = jax.jit(both)(q, k, v)
    np.testing.assert_allclose(o_lin, o_ref, atol=ATOL)
    for a, b in zip(g_lin, g_ref):
        np.testing.assert_allclose(a, b, atol=ATOL)


@pytest.mark.parametrize("sharing", ["none", "headwise", "kv"])
def test_equals_dense_attention_on_projected_keys_and_values(sharing):
    """Eq. 7: linformer(Q, K, V) = softmax(Q (E K)^T / sqrt(D)) (F V), grads incl. E and F."""
    q, k, v = _qkv(seed=3)
    e, f = _projections(sharing, 5, T)
    f_eff = e if f is None else f

    def project(p, x):  # [.., K, S] x [B, S, H, D] -> [B, K, H, D], written per head
        p_HKS = jnp.broadcast_to(p, (H,) + p.shape[-2:])
        return jnp.stack([p_HKS[i] @ x[:, :, i] for i in range(H)], axis=2)

    def via_dense(q, k, v, e, f):
        return dense.reference_attention(q, project(e, k), project(f, v))

    def via_linformer(q, k, v, e, f):
        return _lin(q, k, v, e, None if sharing == "kv" else f, sharing, T)

    def loss(fn, *args):
        return jnp.sin(fn(*args)).sum()

    @jax.jit
    def both(q, k, v, e, f):
        if sharing == "kv":  # F = E: gradients reach E through keys and values
            lin = lambda q, k, v, e: loss(via_linformer, q, k, v, e, e)  # noqa: E731
            ref = lambda q, k, v, e: loss(via_dense, q, k, v, e, e)  # noqa: E731
            args, argnums = (q, k, v, e), (0, 1, 2, 3)
        else:
            lin = functools.partial(loss, via_linformer)
            ref = functools.partial(loss, via_dense)
            args, argnums = (q, k, v, e, f), (0, 1, 2, 3, 4)
        outs = via_linformer(q, k, v, e, f), via_dense(q, k, v, e, f)
        return outs, jax.grad(lin, argnums)(*args), jax.grad(ref, argnums)(*args)

    (o_lin, o_ref), g_lin, g_ref = both(q, k, v, e, f_eff)
    np.testing.assert_allclose(o_lin, o_ref, atol=ATOL)
    for a, b in zip(g_lin, g_ref):
        np.testing.assert_allclose(a, b, atol=ATOL)


def test_shorter_inputs_use_the_first_columns():
    """S < max_len uses E[:, :S] and F[:, :S] (as the fairseq reference of Wang et al. 2020)."""
    n, s = 20, T
    q, k, v = _qkv(seed=4)
    e, f = _projections("headwise", 6, n)
    out = _lin(q, k, v, e, f, "headwise", n)
    want = _lin(q, k, v, e[:, :s], f[:, :s], "headwise", s)
    np.testing.assert_allclose(out, want, atol=ATOL)


@pytest.mark.parametrize("sharing", ["none", "kv"])
def test_padding_content_does_not_change_real_outputs(sharing):
    """Padded K/V rows are zeroed before the projection: their content is invisible."""
    q, k, v = _qkv(seed=5)
    keep = np.ones((B, T), bool)
    keep[0, 9:] = False  # right padding
    keep[1, [2, 5, 6]] = False  # holes anywhere
    keep = jnp.asarray(keep)
    e, f = _projections(sharing, 4, T)
    _, k2, v2 = _qkv(seed=6)  # other content, used only at padded positions
    k_alt = jnp.where(keep[:, :, None, None], k, 100.0 * k2)
    v_alt = jnp.where(keep[:, :, None, None], v, -50.0 * v2)

    @jax.jit
    def f_out(k, v):
        return _lin(q, k, v, e, f, sharing, T, mask=keep)

    np.testing.assert_allclose(f_out(k, v), f_out(k_alt, v_alt), atol=ATOL)
    # Nothing flows back into the padded rows either.
    g_k, g_v = jax.jit(jax.grad(lambda k, v: f_out(k, v).sum(), (0, 1)))(k_alt, v_alt)
    pad = ~np.asarray(keep)
    assert np.all(np.asarray(g_k)[pad] == 0) and np.all(np.asarray(g_v)[pad] == 0)
    assert np.abs(np.asarray(g_k)[~pad]).sum() > 0
    # Not trivially true: without the mask the padded content does change the outputs.
    no_mask = jax.jit(lambda k, v: _lin(q, k, v, e, f, sharing, T))
    assert not np.allclose(no_mask(k, v), no_mask(k_alt, v_alt), atol=1e-3)


def test_right_padding_equals_the_unpadded_sequence():
    """E[:, :S] times zeroed padded rows adds nothing: right padding = no padding."""
    q, k, v = _qkv(seed=7)
    e, f = _projections("headwise", 4, 16)
    real = 9
    keep = jnp.arange(T)[None, :] < real
    padded = _lin(q, k, v, e, f, "headwise", 16, mask=jnp.broadcast_to(keep, (B, T)))
    short = _lin(q, k[:, :real], v[:, :real], e, f, "headwise", 16)
    np.testing.assert_allclose(padded, short, atol=ATOL)


def test_fully_masked_batch_row_gives_zeros():
    q, k, v = _qkv(seed=8)
    e, f = _projections("headwise", 4, T)
    keep = jnp.asarray(np.array([[False] * T, [True] * T]))
    out = np.asarray(_lin(q, k, v, e, f, "headwise", T, mask=keep))
    assert np.isfinite(out).all()
    np.testing.assert_array_equal(out[0], 0.0)


def test_registered_and_dropout_needs_rng():
    fn = attention.get("linformer")  # the registered function behind the options check
    assert fn.__wrapped__ is linformer.linformer_attention
    assert attention.spec("linformer").validate is linformer.validate
    q, k, v = _qkv()
    e, f = _projections("headwise", 4, T)
    with pytest.raises(ValueError, match="dropout_rng"):
        _lin(q, k, v, e, f, "headwise", T, dropout_rate=0.1)
    out = _lin(q, k, v, e, f, "headwise", T, dropout_rate=0.5, dropout_rng=jax.random.key(0))
    assert np.isfinite(np.asarray(out)).all()
    assert not np.allclose(out, _lin(q, k, v, e, f, "headwise", T), atol=1e-3)


def test_clear_errors():
    q, k, v = _qkv()
    e, f = _projections("headwise", 4, T)
    with pytest.raises(ValueError, match="causal=True.*leak the future"):
        _lin(q, k, v, e, f, "headwise", T, causal=True)
    with pytest.raises(ValueError, match="segment_ids"):
        _lin(q, k, v, e, f, "headwise", T, segment_ids=jnp.zeros((B, T), jnp.int32))
    q_long, k_long, v_long = _qkv(t=T + 1, s=T + 1)
    with pytest.raises(ValueError, match="exceeds max_len=12"):
        _lin(q_long, k_long, v_long, e, f, "headwise", T)
    with pytest.raises(ValueError, match="needs its projection proj_e"):
        linformer.linformer_attention(q, k, v, k=4, max_len=T, sharing="layerwise")
    with pytest.raises(ValueError, match="separate proj_f"):
        _lin(q, k, v, e, None, "headwise", T)
    with pytest.raises(ValueError, match=r"shape \[H, k, max_len\]"):
        _lin(q, k, v, e, f, "none", T)
    with pytest.raises(ValueError, match="inconsistent with options"):
        linformer.linformer_attention(q, k, v, k=5, max_len=T, proj_e=e, proj_f=f)
    with pytest.raises(ValueError, match="sharing='rows' is not one of"):
        linformer.check_options(dict(max_len=8, sharing="rows"))
    with pytest.raises(ValueError, match="needs option max_len"):
        linformer.check_options(dict(k=4))
    with pytest.raises(ValueError, match="k=0 must be a positive integer"):
        linformer.check_options(dict(k=0, max_len=8))
    with pytest.raises(ValueError, match="k=16 exceeds max_len=8"):
        linformer.check_options(dict(k=16, max_len=8))
    linformer.validate(dict(k=4, max_len=64), 64)
    with pytest.raises(ValueError, match="sequence length 65 exceeds linformer max_len=64"):
        linformer.validate(dict(k=4, max_len=64), 65)
