"""Performer attention: FAVOR+ (Choromanski et al. 2021, "Rethinking Attention with
Performers").

The softmax kernel ``SM(q, k) = exp(q^T k)`` is estimated by positive random features
(§2.3, Lemma 1, eq. 7 with h(x) = exp(-|x|^2 / 2), f = exp):

    phi(x) = exp(-|x|^2 / 2) / sqrt(m) * [exp(w_1^T x), ..., exp(w_m^T x)],
    E[phi(q)^T phi(k)] = exp(q^T k),

applied to ``x = q * sqrt(scale)`` and ``k * sqrt(scale)`` (``scale`` defaults to
1/sqrt(D), so ``phi(q)^T phi(k)`` estimates ``exp(q^T k / sqrt(D))``). The attention is
then the kernelized form ``phi(Q) (phi(K)^T V) / (phi(Q) phi(K)^T 1)`` (§2.2, eq. 4-5),
computed by ``seqjax.attention.linear.feature_attention``: O(T m D); the causal form
(§2.6 "unidirectional") in chunks of ``chunk`` positions (default 128: quadratic inside a
chunk, a running ``[m, D]`` state between chunks, ``seqjax.attention.linear_chunked``) or
by prefix sums (``chunk=0``), with an O(1) recurrent state for decoding.

Random features (§2.4 "Orthogonal random features"): the m rows of ``W [m, D]`` come in
blocks of D orthonormal rows (QR of a Gaussian matrix), each row rescaled by the norm of an
independent D-dimensional Gaussian vector, so every row is marginally N(0, I_D) while rows
within a block are exactly orthogonal (``orthogonal=False``: i.i.d. Gaussian rows). The
estimator's error falls as 1/sqrt(m) (Theorem 4 for the MSE; tested as a rate).

Feature drawing and redrawing (§4.2 "redrawing"): ``W`` is a function of an explicit key.
Called directly, ``rng=None`` uses ``PRNGKey(seed)``. In a model (``module_params``) the
key is, with ``redraw=False`` (default), fixed per layer (``seed`` + the layer's path, as
LSH's evaluation key), so training, evaluation and decoding share one ``W``; with
``redraw=True`` a training step draws a fresh ``W`` from its ``"dropout"`` stream (a new
draw every step), and evaluation/decoding use the fixed per-layer ``W``.

Numerical stabilisers (they cancel exactly in the ratio): each query's features are
divided by their own max; in the bidirectional form the keys' features by the max over
the *visible* keys of each (batch, head). The causal form takes no key stabiliser, so that
output i is a function of keys j <= i in floating point too, and decoding (which does not
know future keys) computes the same numbers as the full forward. The normaliser is
divided exactly (no epsilon: the stabilised features make an additive one a bias), with 0
where a query sees no key.

Common options: ``mask`` (key padding: padded keys' features are zeroed), ``causal``
(bottom-right aligned, as the other mechanisms), ``scale``. ``dropout_rate > 0`` and
``segment_ids`` are refused (no attention matrix; running sums would mix segments).

Legend: B batch, T query length, S key/value length, H heads, D head dim, Dv value dim,
M number of random features (option ``num_features``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from seqjax.attention import linear, linear_chunked, numerics, registry
from seqjax.attention.lsh import fallback_key

DEFAULT_FEATURES = 256  # LRA's Performer rows use 256 random features
OPTIONS = ("num_features", "seed", "redraw", "orthogonal", "chunk")


def check_num_features(num_features) -> int:
    """Validates ``num_features`` (one clear error naming the option)."""
    v = num_features
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise ValueError(
            f"performer option num_features={v!r} must be a positive integer (the number of "
            "random features m; set config.model.attention_options.performer.num_features)"
        )
    return int(v)


def orthonormal_columns(a_NDD):
    """``Q`` of ``A = QR`` with ``diag(R) > 0``, per block: ``float32 [N, D, D]``.

    With ``diag(R) > 0`` the Q factor of a Gaussian matrix is Haar-distributed (uniform on
    the orthogonal group), which FAVOR+'s orthogonal features need (§2.4). Classical
    Gram-Schmidt with one re-orthogonalisation pass ("twice is enough", Giraud et al. 2005),
    in plain XLA ops rather than ``jnp.linalg.qr``: on CPU that is a LAPACK custom call, and
    XLA (jax 0.10.2) can deadlock when two of them run concurrently in one program -- one per
    Performer layer in a training step (``tests/attention/test_performer.py`` reproduces it).
    """
    n, d = a_NDD.shape[0], a_NDD.shape[-1]
    a_NDD = a_NDD.astype(jnp.float32)

    def add_column(j, q_NDD):
        v_ND = a_NDD[:, :, j]
        for _ in range(2):  # columns j.. of Q are still zero: only 0..j-1 project out
            coef_ND = jnp.einsum("nij,ni->nj", q_NDD, v_ND)
            v_ND = v_ND - jnp.einsum("nij,nj->ni", q_NDD, coef_ND)
        v_ND = v_ND / jnp.linalg.norm(v_ND, axis=-1, keepdims=True)
        return jax.lax.dynamic_update_slice(q_NDD, v_ND[:, :, None], (0, 0, j))

    return jax.lax.fori_loop(0, d, add_column, jnp.zeros((n, d, d), jnp.float32))


def random_features(rng, num_features: int, head_dim: int, *, orthogonal: bool = True):
    """``W float32 [M, D]``: FAVOR+'s (orthogonal) Gaussian projection rows (§2.4)."""
    m, d = check_num_features(num_features), int(head_dim)
    n_blocks = -(-m // d)
    keys = jax.random.split(rng, 2)
    if not orthogonal:
        return jax.random.normal(keys[0], (m, d), jnp.float32)
    gauss_NDD = jax.random.normal(keys[0], (n_blocks, d, d), jnp.float32)
    q_NDD = orthonormal_columns(gauss_NDD)  # Haar-distributed orthogonal blocks
    w_MD = jnp.swapaxes(q_NDD, 1, 2).reshape(n_blocks * d, d)[:m]  # orthonormal rows per block
    norms_M = jnp.linalg.norm(jax.random.normal(keys[-1], (m, d), jnp.float32), axis=-1)
    return w_MD * norms_M[:, None]  # rows marginally N(0, I_D)


def _log_features(x_BTHD, w_MD, scale):
    """``w^T x - |x|^2 / 2`` for ``x = input * sqrt(scale)``: float32 ``[B, T, H, M]``."""
    x = x_BTHD.astype(jnp.float32) * jnp.sqrt(jnp.float32(scale))
    wx_BTHM = jnp.einsum("bthd,md->bthm", x, w_MD)
    return wx_BTHM - 0.5 * jnp.sum(x * x, axis=-1, keepdims=True)


def query_features(q_BTHD, w_MD, scale):
    """phi(q) / max_m phi(q) per query (the per-query constant cancels in the ratio)."""
    logit = _log_features(q_BTHD, w_MD, scale)
    stab = jax.lax.stop_gradient(logit.max(axis=-1, keepdims=True))
    return jnp.exp(logit - stab) / np.sqrt(w_MD.shape[0])


def key_features(k_BSHD, w_MD, scale, *, mask=None, stabilise=True):
    """phi(k), divided by its max over the visible keys of each (batch, head) when
    ``stabilise`` (bidirectional only: the causal form must not look at later keys)."""
    logit = _log_features(k_BSHD, w_MD, scale)
    if stabilise:
        masked = logit
        if mask is not None:
            masked = jnp.where(mask[:, :, None, None], logit, -jnp.inf)
        stab = masked.max(axis=(1, 3), keepdims=True)
        stab = jax.lax.stop_gradient(jnp.where(jnp.isfinite(stab), stab, 0.0))
        logit = logit - stab
    return jnp.exp(logit) / np.sqrt(w_MD.shape[0])


def _projection(q_BTHD, *, num_features, seed, orthogonal, rng):
    key = jax.random.PRNGKey(int(seed)) if rng is None else rng
    return random_features(key, num_features, q_BTHD.shape[-1], orthogonal=orthogonal)


def performer_attention(
    q_BTHD,
    k_BSHD,
    v_BSHD,
    *,
    causal=False,
    mask=None,
    segment_ids=None,
    dropout_rate=0.0,
    dropout_rng=None,
    scale=None,
    num_features=DEFAULT_FEATURES,
    seed=0,
    redraw=False,
    orthogonal=True,
    rng=None,
    chunk=linear_chunked.DEFAULT_CHUNK,
):
    """FAVOR+ attention (module docstring), registered as ``"performer"``.

    Args:
      q_BTHD, k_BSHD, v_BSHD: ``[B, T, H, D]``, ``[B, S, H, D]``, ``[B, S, H, Dv]``.
      causal, mask, scale: the common options (``segment_ids``/dropout are refused).
      num_features: m, the number of random features.
      seed: the key of ``W`` when ``rng`` is None.
      redraw: used by ``module_params`` (a fresh ``W`` per training step).
      orthogonal: orthogonal random features (FAVOR+) or i.i.d. Gaussian rows.
      rng: explicit key of ``W``.
      chunk: causal chunk length (0 = prefix sums); equal results either way.

    Returns:
      ``[B, T, H, Dv]`` in the dtype of ``q``.
    """
    del dropout_rng, redraw
    registry.check_qkv(q_BTHD, k_BSHD, v_BSHD)
    linear.refuse_unsupported("performer", segment_ids=segment_ids, dropout_rate=dropout_rate)
    chunk = linear_chunked.check_chunk(chunk, "performer")
    scale = numerics.default_scale(scale, q_BTHD.shape[-1])
    w_MD = _projection(q_BTHD, num_features=num_features, seed=seed, orthogonal=orthogonal, rng=rng)
    key_mask = None if mask is None else jnp.broadcast_to(mask.astype(bool), k_BSHD.shape[:2])
    phi_q = query_features(q_BTHD, w_MD, scale)
    phi_k = key_features(k_BSHD, w_MD, scale, mask=key_mask, stabilise=not causal)
    out = linear.feature_attention(
        phi_q, phi_k, v_BSHD, causal=causal, mask=mask, eps=0.0, chunk=chunk
    )
    return out.astype(q_BTHD.dtype)


def performer_decode(
    q_BTHD,
    k_BTHD,
    v_BTHD,
    state=None,
    *,
    mask=None,
    scale=None,
    num_features=DEFAULT_FEATURES,
    seed=0,
    orthogonal=True,
    rng=None,
    chunk=linear_chunked.DEFAULT_CHUNK,
    **unused,
):
    """The ``decode_state`` hook: causal FAVOR+ of new tokens after ``state``."""
    del unused
    scale = numerics.default_scale(scale, q_BTHD.shape[-1])
    w_MD = _projection(q_BTHD, num_features=num_features, seed=seed, orthogonal=orthogonal, rng=rng)
    phi_q = query_features(q_BTHD, w_MD, scale)
    phi_k = key_features(k_BTHD, w_MD, scale, stabilise=False)
    out, state = linear.recurrent_attention(
        phi_q, phi_k, v_BTHD, state, mask=mask, eps=0.0,
        chunk=linear_chunked.check_chunk(chunk, "performer"),
    )  # fmt: skip
    return out.astype(q_BTHD.dtype), state


def _module_params(module, *, q, k, v, options) -> dict:
    """The key of this layer's ``W``: a fresh one per training step (``"dropout"`` stream)
    when ``redraw``, else fixed per layer (``seed`` + the layer's path)."""
    del q, k, v
    if options.get("redraw", False) and module.has_rng("dropout"):
        return {"rng": module.make_rng("dropout")}
    return {"rng": fallback_key(int(options.get("seed", 0)), module.path)}


def _validate(options: dict, seq_len: int) -> None:
    """Config-time check of the options (called before anything compiles)."""
    del seq_len
    check_num_features(options.get("num_features", DEFAULT_FEATURES))
    linear_chunked.check_chunk(options.get("chunk", linear_chunked.DEFAULT_CHUNK), "performer")
    for name in ("redraw", "orthogonal"):
        if name in options and not isinstance(options[name], bool):
            raise ValueError(
                f"performer option {name} must be True or False; got {options[name]!r}"
            )
    seed = options.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"performer option seed must be an integer; got {seed!r}")


registry.register(
    registry.Mechanism(
        name="performer",
        fn=performer_attention,
        module_params=_module_params,
        options=OPTIONS,
        validate=_validate,
        decode_state=performer_decode,
        doc="Performer FAVOR+ (Choromanski et al. 2021): positive orthogonal random "
        "features, causal in chunks (or prefix sums, chunk=0), O(1)-state decoding",
        attention_dropout=False,
        packing="its running sums over the row would mix the examples",
    )
)
