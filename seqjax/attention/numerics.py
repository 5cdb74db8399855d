"""The numerics every attention mechanism shares: one definition of each convention.

A mechanism is *its scores + its mask + one call*: it computes its logits (or lets
``scores`` do it), builds its boolean mask, and calls ``attend_logits`` (or ``attend`` for
the ``[B, T, H, D]`` layout), which applies, in this order and with these conventions,

1. the mask: invalid logits become ``-inf``;
2. the softmax over the keys in float32, Vaswani et al. 2017, eq. (1)
   ``softmax(Q K^T / sqrt(D) + mask) V``, with the max subtracted under a stop-gradient;
   a row with no valid key gives zeros (never NaN) and ``lse = -inf``;
3. attention dropout (Srivastava et al. 2014, inverted: kept entries scaled by
   ``1 / (1 - rate)``) on the probabilities, the keep mask a counter-based hash of
   (seed, batch, head, query, key) (``dropout_keep``) that every engine computes alike;
4. the values: probabilities cast to the value dtype, products accumulated in float32.

The blockwise engines (``blockwise``, ``pallas_blocks``) keep running statistics instead
of the whole row (the online softmax, Milakov & Gimelshein 2018, §3, Alg. 3; Dao et al.
2022, Alg. 1) and end with ``finish_online_softmax``; partial attentions over disjoint key sets
are combined exactly from their log-sum-exps by ``merge_lse`` (the same rescaling, applied
to whole parts: ``out = sum_p exp(lse_p - lse) out_p`` with ``lse = logsumexp_p lse_p``).

Legend: B batch, T query length, S key length, H heads, D head dim (Dv of the values),
P parts of a merge.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

DROPOUT_RNG_MESSAGE = "dropout_rate > 0 needs a dropout_rng"


def default_scale(scale, head_dim: int):
    """The logit scale: ``scale`` when given, else ``1 / sqrt(D)`` (Vaswani et al., eq. 1)."""
    return 1.0 / math.sqrt(head_dim) if scale is None else scale


def check_dropout(dropout_rate, dropout_rng) -> None:
    """Raises ``ValueError`` for a rate outside ``[0, 1)`` or a rate > 0 without a key."""
    if not 0.0 <= dropout_rate < 1.0:
        raise ValueError(f"dropout_rate must be in [0, 1); got {dropout_rate!r}")
    if dropout_rate > 0.0 and dropout_rng is None:
        raise ValueError(
            f"{DROPOUT_RNG_MESSAGE} (got dropout_rate={dropout_rate} and dropout_rng=None): "
            "pass a jax.random key, or set the attention dropout rate to 0"
        )


def scores(q_BTHD, k_BSHD, scale):
    """Scaled logits ``Q K^T * scale``: float32 ``[B, H, T, S]`` (Vaswani et al., eq. 1)."""
    logits_BHTS = jnp.einsum("bthd,bshd->bhts", q_BTHD, k_BSHD, preferred_element_type=jnp.float32)
    return logits_BHTS * scale


def lse_from_stats(m, l):
    """``log sum_j exp(s_j)`` from the max ``m`` and ``l = sum_j exp(s_j - m)``; ``-inf``
    where ``l == 0`` (no valid key)."""
    empty = l == 0.0
    return jnp.where(empty, -jnp.inf, m + jnp.log(jnp.where(empty, 1.0, l)))


def masked_softmax(logits, valid=None, *, return_lse=False):
    """Softmax over the last axis in float32; rows with no valid key give zeros, not NaN.

    Args:
      logits: float ``[..., S]``.
      valid: bool broadcastable to ``logits`` (True = attend), or None (all valid).
      return_lse: also return the log-sum-exp of the valid logits ``[...]`` (``-inf`` for
        rows with no valid key), differentiable.

    Returns:
      probabilities like ``logits`` (and the log-sum-exp if ``return_lse``).
    """
    if valid is not None:
        logits = jnp.where(valid, logits, -jnp.inf)
    m = logits.max(-1, keepdims=True)
    m = jax.lax.stop_gradient(jnp.where(jnp.isfinite(m), m, 0.0))
    e = jnp.exp(logits - m)
    denom = e.sum(-1, keepdims=True)
    probs = e / jnp.where(denom == 0.0, 1.0, denom)
    if not return_lse:
        return probs
    return probs, lse_from_stats(m, denom)[..., 0]


# Constants of the murmur3 32-bit finalizer (and the golden ratio), as int32 bit patterns.
_FMIX_1 = 0x85EBCA6B - (1 << 32)
_FMIX_2 = 0xC2B2AE35 - (1 << 32)
_GOLDEN = 0x9E3779B9 - (1 << 32)
DROPOUT_BITS = 24  # the keep test compares the top 24 bits of the hash


def _srl(x, n: int):
    return jax.lax.shift_right_logical(x, jnp.full_like(x, n))


def _fmix32(x):
    """murmur3's 32-bit finalizer on int32 bit patterns (a bijection with full avalanche):
    integer multiplies wrap, shifts are logical, so jnp and Triton compute the same bits."""
    x = x ^ _srl(x, 16)
    x = x * jnp.int32(_FMIX_1)
    x = x ^ _srl(x, 13)
    x = x * jnp.int32(_FMIX_2)
    return x ^ _srl(x, 16)


def dropout_seeds(rng):
    """The two int32 seeds of the counter-based dropout hash, drawn from a JAX key."""
    bits = jax.random.bits(rng, (2,), jnp.uint32)
    return jax.lax.bitcast_convert_type(bits, jnp.int32)


def dropout_keep(seed0, seed1, row, q_pos, k_pos, rate: float):
    """Counter-based keep mask of attention dropout: a hash of (seed, row, query, key).

    ``row`` indexes (batch, head) as ``b * H + h``; ``q_pos`` / ``k_pos`` are the absolute
    query and key positions (int32, broadcastable against each other and ``row``). The
    same (seed, b, h, q, k) gives the same bit in every engine, whatever its blocks are
    (the materialized reference, ``blockwise``, the Pallas kernels), so their dropout is
    identical, and the backward pass regenerates the mask instead of storing it (as
    FlashAttention does with Philox; Dao et al. 2022, §3.1, "Dropout"). A key is kept
    with probability ``1 - rate`` (to 2^-24).
    """
    rank = max(jnp.ndim(row), jnp.ndim(q_pos), jnp.ndim(k_pos))
    row, q_pos, k_pos = (jnp.reshape(x, (1,) * (rank - jnp.ndim(x)) + jnp.shape(x))
                         for x in (row, q_pos, k_pos))  # fmt: skip
    row_hash = _fmix32(seed0 ^ _fmix32(row.astype(jnp.int32) + seed1))
    q_hash = _fmix32(row_hash ^ (q_pos.astype(jnp.int32) * jnp.int32(_GOLDEN)))
    x = _fmix32(q_hash + k_pos.astype(jnp.int32) * jnp.int32(_FMIX_1))
    threshold = int(round(rate * (1 << DROPOUT_BITS)))
    return _srl(x, 32 - DROPOUT_BITS) >= threshold


def dropout(probs, rate, rng):
    """Inverted dropout on attention probabilities ``[..., T, S]`` (identity for
    ``rate == 0``): the keep mask is ``dropout_keep`` with ``row`` the flattened index of the
    leading axes (``b * H + h`` for ``[B, H, T, S]``), query and key their positions."""
    if rate == 0.0:
        return probs
    *lead, t, s = probs.shape
    seeds = dropout_seeds(rng)
    n_rows = math.prod(lead)
    row = jnp.arange(n_rows, dtype=jnp.int32).reshape(*lead, 1, 1)
    q_pos = jnp.arange(t, dtype=jnp.int32)[:, None]
    k_pos = jnp.arange(s, dtype=jnp.int32)[None, :]
    keep = dropout_keep(seeds[0], seeds[1], row, q_pos, k_pos, rate)
    return (probs * dropout_scale(keep, rate)).astype(probs.dtype)


def dropout_scale(keep, rate: float):
    """float32 ``1 / (1 - rate)`` where kept, 0 where dropped (inverted dropout)."""
    return jnp.where(keep, jnp.float32(1.0 / (1.0 - rate)), jnp.float32(0.0))


def attend_logits(
    logits,
    v,
    valid=None,
    *,
    dropout_rate=0.0,
    dropout_rng=None,
    out_dtype=None,
    spec="bhts,bshd->bthd",
    return_lse=False,
):
    """Mask, float32 softmax, dropout and values: everything after a mechanism's scores.

    Args:
      logits: float32 scaled logits, ``[B, H, T, S]`` for the default ``spec``.
      v: values, ``[B, S, H, Dv]`` for the default ``spec``.
      valid: bool mask broadcastable to ``logits`` (True = attend) or None.
      dropout_rate, dropout_rng: dropout on the probabilities (see ``check_dropout``).
      out_dtype: dtype of the output; None keeps the float32 accumulator.
      spec: the ``einsum`` of probabilities and values (mechanisms with other layouts, e.g.
        LSH chunks, pass theirs).
      return_lse: also return the log-sum-exp of the logits (for ``merge_lse``).

    Returns:
      the output (``[B, T, H, Dv]`` for the default ``spec``), and the log-sum-exp if
      ``return_lse``.
    """
    check_dropout(dropout_rate, dropout_rng)
    probs, lse = masked_softmax(logits, valid, return_lse=True)
    probs = dropout(probs, dropout_rate, dropout_rng)
    with jax.named_scope("weighted_values"):
        out = jnp.einsum(spec, probs.astype(v.dtype), v, preferred_element_type=jnp.float32)
    out = out if out_dtype is None else out.astype(out_dtype)
    return (out, lse) if return_lse else out


def attend(q, k, v, valid=None, *, scale=None, dropout_rate=0.0, dropout_rng=None, bias=None):
    """Materialized attention ``softmax(Q K^T / sqrt(D) + bias + mask) V`` (Vaswani et al.,
    eq. 1; ``bias`` a score modification, ``seqjax.attention.score_mod``).

    Args:
      q: ``[B, T, H, D]``; k: ``[B, S, H, D]``; v: ``[B, S, H, Dv]``.
      valid: bool mask broadcastable to ``[B, H, T, S]`` (True = attend) or None.
      scale: logit scale, default ``1/sqrt(D)``.
      dropout_rate, dropout_rng: dropout on the attention probabilities.
      bias: float additive bias ``[B|1, H, T, S]`` on the scaled logits, or None.

    Returns:
      ``[B, T, H, Dv]`` in the dtype of ``q``.
    """
    logits_BHTS = scores(q, k, default_scale(scale, q.shape[-1]))
    if bias is not None:
        logits_BHTS = logits_BHTS + bias.astype(jnp.float32)
    return attend_logits(
        logits_BHTS,
        v,
        valid,
        dropout_rate=dropout_rate,
        dropout_rng=dropout_rng,
        out_dtype=q.dtype,
    )


def finish_online_softmax(m, l, acc):
    """Output and log-sum-exp from the online-softmax state (FlashAttention-2, Dao 2023,
    Alg. 1, lines 12-13): ``out = acc / l``, ``lse = m + log l``; rows with ``l == 0`` (no
    visible key) give ``out = 0`` and ``lse = -inf``.

    Args:
      m: running max ``[...]``; l: running sum ``[...]``; acc: running ``P V`` ``[..., Dv]``.
    """
    out = acc / jnp.where(l == 0.0, 1.0, l)[..., None]
    return out, lse_from_stats(m, l)


def backward_stats(rowsum_g_out, lse, g_lse):
    """The per-row terms of the softmax backward pass (FlashAttention-2, Dao 2023, Alg. 2,
    line 4):
    ``delta = rowsum(dO * O) - d lse`` (``d lse_i / d s_ij = P_ij``, so an lse cotangent
    enters ``dS = P (dP - delta)`` as ``-d lse``) and the lse with ``-inf`` replaced by 0.

    Returns:
      ``(delta, lse_safe)`` in the layout of ``lse``.
    """
    finite = jnp.isfinite(lse)
    return rowsum_g_out - jnp.where(finite, g_lse, 0.0), jnp.where(finite, lse, 0.0)


def merge_lse(outs, lses, *, return_lse=False):
    """Exact union of attentions over disjoint key sets from their ``(out, lse)`` pairs.

    ``out = sum_p w_p out_p / sum_p w_p`` with ``w_p = exp(lse_p - m)`` (the log-sum-exp
    rescaling of Milakov & Gimelshein 2018, §3, applied to whole parts); ``m`` is any
    constant (here the stop-gradient max), and rows with no visible key in any part give
    zeros, not NaN.

    Args:
      outs: P outputs ``[..., Dv]``.
      lses: P log-sum-exps ``[...]`` (the shape of the outputs without the last axis).
      return_lse: also return the merged log-sum-exp ``logsumexp_p lse_p``.

    Returns:
      float32 ``[..., Dv]`` (and ``[...]`` if ``return_lse``).
    """
    lse_max = lses[0]
    for lse in lses[1:]:
        lse_max = jnp.maximum(lse_max, lse)
    lse_max = jax.lax.stop_gradient(jnp.where(jnp.isfinite(lse_max), lse_max, 0.0))
    num, den = 0.0, 0.0
    for out, lse in zip(outs, lses, strict=True):
        w = jnp.exp(lse - lse_max)
        num = num + w[..., None] * out.astype(jnp.float32)
        den = den + w
    merged = num / jnp.where(den == 0.0, 1.0, den)[..., None]
    return (merged, lse_from_stats(lse_max, den)) if return_lse else merged


def pad_to(x, length: int, axis: int = 1, value=0):
    """``x`` padded with ``value`` at the end of ``axis`` up to ``length`` (no copy if equal)."""
    pad = length - x.shape[axis]
    if pad == 0:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, pad)
    return jnp.pad(x, widths, constant_values=value)


def pad_to_multiple(x, multiple: int, axis: int = 1, value=0):
    """``x`` padded at the end of ``axis`` to the next multiple of ``multiple``."""
    return pad_to(x, -(-x.shape[axis] // multiple) * multiple, axis, value)
