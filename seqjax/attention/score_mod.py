"""Positions as modifications of the attention scores: RoPE, ALiBi and T5's relative bias.

A *score modification* (PyTorch FlexAttention's ``score_mod``, restricted to additive biases
that depend on positions and heads only) is a ``ScoreMod``: a bias generator

    bias(params, q_pos [bq], k_pos [bk]) -> float32 [H, bq, bk]

added to the scaled logits ``Q K^T * scale`` before the mask and the softmax. ``params`` is
a (possibly empty) pytree of learned parameters; every exact engine differentiates through
it: the materialising reference (``numerics.attend`` with a bias) by autodiff, the
blockwise engine (``blockwise.blockwise_attention``) by pulling ``dS`` back through
``bias`` block by block inside its custom VJP. ``q_pos`` are absolute query positions
(``q_offset`` + index: the module sets the offset, e.g. the KV-cache index while decoding),
``k_pos`` absolute key positions.

Schemes (``model.positional``):

* ``"rope"``: rotary embeddings (Su et al. 2021, RoFormer, §3.4.2, eq. 34): queries and keys
  are rotated pairwise by angles ``p * base^(-2i/D)`` before the scores, so
  ``<R_p q, R_s k>`` depends on ``p - s`` only. Not a bias: ``apply_rope`` acts on q and k,
  so every mechanism honours it (keys are rotated before they enter a KV cache).
* ``"alibi"``: ALiBi (Press et al. 2022, §3): ``bias_h(i, j) = -m_h (i - j)`` with the
  geometric head slopes ``m_h = 2^(-8 h / H)``, h = 1..H (for H not a power of two, the
  paper's interleaving of the two nearest powers). Causal as in the paper; bidirectional
  attention uses ``-m_h |i - j|``.
* ``"t5_bias"``: T5's bucketed relative position bias (Raffel et al. 2020, §2.1; the
  bucketing of the Mesh TensorFlow code): a learned scalar per (bucket, head), the buckets
  exact for distances below ``num_buckets / 2`` (halved again when bidirectional, which
  also separates the two directions) and logarithmic up to ``max_distance``.
  T5 shares one table by all layers; here every attention layer learns its own
  (``MultiHeadAttention`` parameter ``t5_bias`` ``[num_buckets, H]``, logical axes
  ``(None, "heads")``).

Positions are those of the sequence as given (``arange``); packed ``segment_ids`` need no
restart: all three schemes depend on ``q - k`` only and attention across segments is masked.

Engines that honour a ``ScoreMod`` (``SCORE_MOD_SUPPORT``): ``dense``/``causal`` with
``implementation`` ``reference``, ``chunked`` (``auto`` picks one of the two) or ``pallas``;
``flex`` (and ``local``, a flex pattern) with ``masked``, ``blocksparse``, ``pallas`` or
``auto``; the Sparse Transformer patterns (``masked`` and the block-sparse engine, whose
parts see the bias in their own coordinates: ``ScoreMod.remap``; ``pallas`` runs those
remapped parts on the plain-JAX engine, logged). The Pallas block kernels
(``pallas_blocks``) compute the bias in-kernel from a ``KernelForm`` (ALiBi: the head's
slope times the distance; T5: the bucket by integer comparisons and a select over the
head's column of the table, whose gradient the dK/dV kernel sums per bucket); a bias
without a kernel form (remapped, custom) is refused there. Not honoured: cuDNN fused
attention and TPU splash (no additive bias input; flex's ``auto`` on TPU runs
``blocksparse`` instead), LSH (its sorted chunks would need the bias per chunk), Linformer
(keys are projected along the sequence: no key positions remain) and Transformer-XL's
``relative`` (a positional scheme of its own); ``check_supported`` names them before
anything compiles.

Legend: B batch, T query length, S key length, H heads, D head dim, bq/bk block lengths,
N buckets.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

SCHEMES = ("rope", "alibi", "t5_bias")
BIAS_SCHEMES = ("alibi", "t5_bias")
# Mechanism -> implementations that add a ScoreMod bias (None: every implementation).
_BLOCK_SPARSE = ("auto", "blocksparse", "pallas", "masked")
SCORE_MOD_SUPPORT = {
    "dense": ("auto", "reference", "chunked", "pallas"),
    "causal": ("auto", "reference", "chunked", "pallas"),
    "flex": _BLOCK_SPARSE,
    "local": _BLOCK_SPARSE,
    "sparse_strided": _BLOCK_SPARSE,
    "sparse_fixed": _BLOCK_SPARSE,
}


@dataclasses.dataclass(frozen=True)
class KernelForm:
    """A bias that a kernel computes itself from (query position, key position, head),
    given one small coefficient array (``ScoreMod.coefficients``) it loads per head:

    * ``"alibi"``: coefficients ``[H]`` (the constant slopes): ``-m_h (i - j)``, or
      ``-m_h |i - j|`` when not ``causal``;
    * ``"t5_bias"``: coefficients ``[N, H]`` (the learned table): ``table[bucket(j - i), h]``
      with the bucket computed by integer comparisons (``t5_bucket``).

    ``position_scale``: the kernel's positions are ``position_scale`` times the absolute
    ones (a part in a strided layout, e.g. the Sparse Transformer's columns: ``ScoreMod.remap
    (scale=l)``).
    """

    scheme: str
    causal: bool
    num_heads: int = 0
    num_buckets: int = 0
    max_distance: int = 0
    position_scale: int = 1


@dataclasses.dataclass(frozen=True)
class ScoreMod:
    """An additive, position-dependent score modification.

    Attributes:
      fn: ``fn(params, q_pos int [bq], k_pos int [bk]) -> float32 [H, bq, bk]``; must be a
        pure function of its arguments (it is called inside custom VJPs and loops).
      params: pytree of parameters of ``fn`` (differentiated), ``()`` when none.
      q_offset: absolute position of query row 0 (an int or a traced int scalar).
      form: how a kernel computes ``fn`` itself from (query position, key position, head)
        (``KernelForm``; set by ``alibi`` and ``t5_bias``), None for any other bias.
    """

    fn: Callable[[Any, jax.Array, jax.Array], jax.Array]
    params: Any = ()
    q_offset: Any = 0
    form: KernelForm | None = None

    def bias(self, params, q_pos, k_pos):
        """``fn`` on absolute positions, in float32."""
        return self.fn(params, q_pos, k_pos).astype(jnp.float32)

    def remap(self, *, q_map=None, k_map=None, heads=None, scale=None) -> ScoreMod:
        """The same modification seen from a part of an engine with its own coordinates:
        ``q_map``/``k_map`` turn the part's positions into absolute ones (e.g. gathered
        summary keys), ``heads`` selects the part's heads (an int sequence). ``scale`` alone:
        absolute positions are ``scale`` times the part's (the Sparse Transformer's column
        layout); that map keeps the kernel form (``KernelForm.position_scale``)."""
        fn = self.fn
        if scale is not None:
            if q_map is not None or k_map is not None or heads is not None:
                raise ValueError("ScoreMod.remap takes scale alone (no q_map, k_map, heads)")

            def scaled(params, q_pos, k_pos):
                return fn(params, q_pos * scale, k_pos * scale)

            form = self.form
            if form is not None:
                form = dataclasses.replace(form, position_scale=form.position_scale * scale)
            return dataclasses.replace(self, fn=scaled, form=form)

        def mapped(params, q_pos, k_pos):
            q_pos = q_pos if q_map is None else q_map(q_pos)
            k_pos = k_pos if k_map is None else k_map(k_pos)
            bias = fn(params, q_pos, k_pos)
            return bias if heads is None else bias[jnp.asarray(np.asarray(heads))]

        return dataclasses.replace(self, fn=mapped, form=None)

    def coefficients(self, params):
        """float32 coefficients of ``form`` (``[H]`` slopes or the ``[N, H]`` table)."""
        if self.form.scheme == "alibi":
            return jnp.asarray(alibi_slopes(self.form.num_heads))
        return jnp.asarray(params, jnp.float32)

    def dense_bias(self, t: int, s: int):
        """The materialised ``[H, T, S]`` bias of a ``T x S`` attention."""
        return self.bias(self.params, jnp.arange(t) + self.q_offset, jnp.arange(s))


# --- RoPE ------------------------------------------------------------------------------


def rope_frequencies(head_dim: int, base: float = 10000.0) -> np.ndarray:
    """``theta_i = base^(-2i / D)``, i < D/2 (Su et al. 2021, eq. 15): float32 ``[D/2]``."""
    if head_dim % 2:
        raise ValueError(f"model.positional='rope' needs an even head dim; got {head_dim}")
    return (base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)).astype(np.float32)


def apply_rope(x_BTHD, positions_BT, base: float = 10000.0):
    """Rotates consecutive pairs ``(x_2i, x_2i+1)`` of each head by ``p * theta_i`` (Su et
    al. 2021, eq. 34, the efficient form of the block-diagonal rotation ``R_p``).

    Args:
      x_BTHD: queries or keys ``[B, T, H, D]``.
      positions_BT: absolute positions, int ``[B, T]`` or ``[1, T]``.

    Returns:
      ``[B, T, H, D]`` in the dtype of ``x``; the rotation is computed in float32.
    """
    d = x_BTHD.shape[-1]
    theta_K = jnp.asarray(rope_frequencies(d, base))  # K = D / 2
    angle_BTK = positions_BT.astype(jnp.float32)[..., None] * theta_K[None, None]
    cos_BT1K, sin_BT1K = jnp.cos(angle_BTK)[:, :, None], jnp.sin(angle_BTK)[:, :, None]
    x = x_BTHD.astype(jnp.float32).reshape(*x_BTHD.shape[:-1], d // 2, 2)
    x0_BTHK, x1_BTHK = x[..., 0], x[..., 1]
    out = jnp.stack(
        [x0_BTHK * cos_BT1K - x1_BTHK * sin_BT1K, x0_BTHK * sin_BT1K + x1_BTHK * cos_BT1K], -1
    )
    return out.reshape(x_BTHD.shape).astype(x_BTHD.dtype)


# --- ALiBi -----------------------------------------------------------------------------


def alibi_slopes(num_heads: int) -> np.ndarray:
    """The head slopes of Press et al. 2022, §3: for H a power of two the geometric sequence
    ``2^(-8/H), 2^(-16/H), ..., 2^(-8)``; otherwise the slopes of the nearest lower power
    of two n followed by every other slope of 2n (the paper's code). float32 ``[H]``."""

    def powers_of_two(n):
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    n = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = powers_of_two(n)
    if n < num_heads:
        slopes += powers_of_two(2 * n)[0::2][: num_heads - n]
    return np.asarray(slopes, np.float32)


def alibi(num_heads: int, *, causal: bool = True, q_offset=0) -> ScoreMod:
    """ALiBi's linear distance penalty ``-m_h (i - j)`` (``-m_h |i - j|`` bidirectional)."""
    slopes_H = alibi_slopes(num_heads)

    def fn(params, q_pos, k_pos):
        del params
        dist = q_pos[:, None] - k_pos[None, :]
        dist = dist if causal else jnp.abs(dist)
        return -jnp.asarray(slopes_H)[:, None, None] * dist.astype(jnp.float32)[None]

    return ScoreMod(fn, (), q_offset, KernelForm("alibi", causal, num_heads=num_heads))


# --- T5 relative bias ------------------------------------------------------------------


@functools.lru_cache(maxsize=32)
def _t5_thresholds(num_buckets: int, max_distance: int) -> tuple[int, ...]:
    """The smallest distance of each logarithmic bucket ``max_exact + k`` (k >= 1).

    Mesh TensorFlow's formula ``max_exact + floor(log(n / max_exact) / log(max_distance /
    max_exact) * (num_buckets - max_exact))`` evaluated once in float64 on the integers,
    so that every engine (XLA, a Pallas kernel) buckets with integer comparisons only and
    agrees exactly, with no transcendental in a kernel.
    """
    max_exact = num_buckets // 2
    if max_exact < 1 or max_distance <= max_exact:
        raise ValueError(
            f"T5 bias buckets need 1 <= num_buckets // 2 < max_distance (per direction when "
            f"bidirectional); got num_buckets={num_buckets}, max_distance={max_distance}"
        )
    n = np.arange(max_exact, max_distance + 1, dtype=np.float64)
    ratio = np.log(n / max_exact) / np.log(max_distance / max_exact)
    large = max_exact + np.floor(ratio * (num_buckets - max_exact)).astype(np.int64)
    return tuple(
        int(n[np.argmax(large >= max_exact + k)]) for k in range(1, num_buckets - max_exact)
    )


def t5_bucket(relative_position, *, causal: bool, num_buckets: int = 32, max_distance: int = 128):
    """T5's bucket of ``relative_position = k_pos - q_pos`` (int array, any shape).

    Bidirectional: half of the buckets for each sign. Within a half, distances below half
    of it are exact; larger ones share logarithmically wider buckets up to
    ``max_distance`` (all beyond share the last one). Causal: future keys fall in bucket 0.
    Integer comparisons against ``_t5_thresholds`` (usable inside the Pallas kernels).
    """
    n = -relative_position
    ret = jnp.zeros_like(n)
    if not causal:
        num_buckets //= 2
        ret = ret + (n < 0).astype(n.dtype) * num_buckets
        n = jnp.abs(n)
    else:
        n = jnp.maximum(n, 0)
    max_exact = num_buckets // 2
    large = jnp.full_like(n, max_exact)
    for threshold in _t5_thresholds(num_buckets, max_distance):
        large = large + (n >= threshold).astype(n.dtype)
    return ret + jnp.where(n < max_exact, n, large)


def t5_bias(
    table_NH, *, causal: bool, num_buckets: int = 32, max_distance: int = 128, q_offset=0
) -> ScoreMod:
    """T5's learned bias ``table[bucket(j - i), h]`` (``table_NH``: ``[num_buckets, H]``)."""

    def fn(table, q_pos, k_pos):
        rel = k_pos[None, :] - q_pos[:, None]
        b = t5_bucket(rel, causal=causal, num_buckets=num_buckets, max_distance=max_distance)
        return jnp.moveaxis(table[b], -1, 0)  # [bq, bk, H] -> [H, bq, bk]

    form = KernelForm("t5_bias", causal, num_buckets=num_buckets, max_distance=max_distance)
    return ScoreMod(fn, table_NH, q_offset, form)


# --- Inside a kernel: one head's block from positions ------------------------------------


def kernel_bias(form: KernelForm, q_pos, k_pos, coef_at):
    """float32 ``[bq, bk]`` bias of one head inside a kernel: ``q_pos [bq]``, ``k_pos [bk]``
    absolute positions, ``coef_at(n)`` the head's n-th coefficient (a scalar ref load).
    Elementwise ops and scalar loads only (Triton/Mosaic), equal to ``ScoreMod.bias``."""
    if form.scheme == "alibi":
        dist = (q_pos[:, None] - k_pos[None, :]) * form.position_scale
        dist = dist if form.causal else jnp.abs(dist)
        return -coef_at(0) * dist.astype(jnp.float32)
    bucket = _kernel_bucket(form, q_pos, k_pos)
    out = jnp.zeros(bucket.shape, jnp.float32)
    for n in range(form.num_buckets):  # a table lookup as selects (no gather in a kernel)
        out = jnp.where(bucket == n, coef_at(n), out)
    return out


def kernel_bias_grad(form: KernelForm, q_pos, k_pos, ds_qk, width: int):
    """float32 ``[width]`` (``width >= N``): the cotangent of one head's T5 table column,
    ``sum of ds_qk [bq, bk]`` over the entries in each bucket."""
    bucket = _kernel_bucket(form, q_pos, k_pos)
    lanes = jax.lax.broadcasted_iota(jnp.int32, (width,), 0)
    out = jnp.zeros((width,), jnp.float32)
    for n in range(form.num_buckets):
        total = jnp.where(bucket == n, ds_qk, 0.0).sum(axis=1).sum(axis=0)
        out = out + jnp.where(lanes == n, total, 0.0)
    return out


def _kernel_bucket(form, q_pos, k_pos):
    rel = (k_pos[None, :] - q_pos[:, None]) * form.position_scale
    return t5_bucket(
        rel, causal=form.causal, num_buckets=form.num_buckets, max_distance=form.max_distance
    )


# --- Support -----------------------------------------------------------------------------


def check_supported(positional: str, attention: tuple) -> None:
    """Raises ``ValueError`` (naming the field and the valid values) when a per-layer
    mechanism of ``attention`` (``((name, options), ...)``) cannot honour the bias of
    ``positional``; RoPE acts on q and k and is honoured by every mechanism."""
    if positional not in BIAS_SCHEMES:
        return
    for name, options in attention:
        impls = SCORE_MOD_SUPPORT.get(name)
        if impls is None:
            raise ValueError(
                f"model.positional={positional!r} (a score bias) is not honoured by attention "
                f"{name!r}; use model.attention in {sorted(SCORE_MOD_SUPPORT)} or "
                "model.positional in ('rope', 'sinusoidal', 'learned', 'none')"
            )
        impl = dict(options).get("implementation", "auto")
        if impl not in impls:
            raise ValueError(
                f"model.positional={positional!r} (a score bias) is not honoured by {name!r} "
                f"implementation={impl!r} (cuDNN and splash attention take no bias); "
                f"use model.attention_options.{name}.implementation in {impls}"
            )
