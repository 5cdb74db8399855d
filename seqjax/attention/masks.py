"""Masks shared by every attention implementation.

Legend: B batch, T query length, S key/value length, H heads.

Conventions (identical in every implementation, and tested to be):
  * ``mask``: boolean ``[B, S]`` key-padding mask, True = keep.
  * ``segment_ids``: int ``[B, T]`` (self-attention, T == S) or a pair
    ``(q_segment_ids [B, T], kv_segment_ids [B, S])``; query i sees key j only when their
    segment ids are equal (packed sequences).
  * ``causal``: bottom-right aligned. Query i sits at absolute position ``i + (S - T)``
    and sees keys ``j <= i + (S - T)``. For T == S this is the usual lower triangle; for a
    KV cache or a memory of S - T earlier positions it is what decoding needs. Sparsity
    patterns (``flex``, splash masks) are evaluated at the same absolute positions
    (``at_absolute``), so a query sees the same keys with or without the earlier queries.
  * A query row whose keys are all masked returns zeros (never NaN).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax.numpy as jnp


def split_segment_ids(segment_ids, t: int, s: int):
    """Returns ``(q_seg [B, T] | None, kv_seg [B, S] | None)`` from either accepted form."""
    if segment_ids is None:
        return None, None
    if isinstance(segment_ids, (tuple, list)):
        if len(segment_ids) != 2:
            raise ValueError("segment_ids must be an array [B, T] or a pair (q_ids, kv_ids)")
        q_seg, kv_seg = segment_ids
    else:
        if t != s:
            raise ValueError(
                f"segment_ids as one array needs seq_q == seq_k (got {t} and {s}); "
                "pass a pair (q_segment_ids [B, T], kv_segment_ids [B, S]) instead"
            )
        q_seg = kv_seg = segment_ids
    if q_seg.shape[-1] != t or kv_seg.shape[-1] != s:
        raise ValueError(
            f"segment_ids shapes {q_seg.shape}/{kv_seg.shape} do not match seq_q={t}, seq_k={s}"
        )
    return q_seg, kv_seg


def check_key_mask(mask, b: int, s: int):
    """Validates the ``[B, S]`` key-padding mask and returns it as bool (or None)."""
    if mask is None:
        return None
    if mask.ndim != 2 or mask.shape[1] != s or mask.shape[0] not in (1, b):
        raise ValueError(
            f"mask must be a boolean key-padding mask of shape [batch, seq_k] = [{b}, {s}]; "
            f"got {mask.shape}"
        )
    return mask.astype(bool)


def causal_offset(t: int, s: int) -> int:
    """Absolute position of query 0 under the bottom-right alignment."""
    return s - t


@dataclasses.dataclass(frozen=True)
class AtAbsolute:
    """A pattern ``fn(q_pos, k_pos)`` evaluated at absolute query positions.

    Query i of T sits at ``i + offset`` (``offset = causal_offset(T, S)``, the bottom-right
    alignment of the module docstring), so one query after a cache of S - 1 keys is
    evaluated at position S - 1, as in the full forward pass. Hashable when ``fn`` is.
    """

    fn: Callable
    offset: int

    def __call__(self, q, k):
        return self.fn(q + self.offset, k)


def at_absolute(fn, t: int, s: int):
    """``fn`` at absolute query positions (``AtAbsolute``); ``fn`` itself when T == S."""
    if fn is None or t == s:
        return fn
    return AtAbsolute(fn, causal_offset(t, s))


def block_mask(q_pos, k_pos, *, causal: bool, offset: int, t: int, s: int):
    """Position part of the mask for one block: ``bool [bq, bk]``.

    Args:
      q_pos: int ``[bq]`` query indices (may exceed ``t`` for padded blocks).
      k_pos: int ``[bk]`` key indices (may exceed ``s`` for padded blocks).
    """
    valid = (q_pos[:, None] < t) & (k_pos[None, :] < s)
    if causal:
        valid = valid & (k_pos[None, :] <= q_pos[:, None] + offset)
    return valid


def dense_mask(b: int, t: int, s: int, *, causal: bool, mask=None, segment_ids=None):
    """The full boolean mask ``[B, 1, T, S]`` (or None when nothing is masked)."""
    out = None
    if causal:
        out = block_mask(jnp.arange(t), jnp.arange(s), causal=True, offset=s - t, t=t, s=s)
        out = out[None, None]
    key_mask = check_key_mask(mask, b, s)
    if key_mask is not None:
        km = key_mask[:, None, None, :]
        out = km if out is None else out & km
    q_seg, kv_seg = split_segment_ids(segment_ids, t, s)
    if q_seg is not None:
        sm = (q_seg[:, :, None] == kv_seg[:, None, :])[:, None]
        out = sm if out is None else out & sm
    if out is not None:
        out = jnp.broadcast_to(out, (b, 1, t, s))
    return out
