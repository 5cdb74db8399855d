"""Packed classifier rows with a CLS slot per example (``TransformerClassifier`` with CLS
pooling on packed rows, ``seqjax.data.packing``).

Legend: B batch, T packed row length, K examples per row, L = T + K.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def packed_cls_rows(tokens_BT, segment_ids_BT, positions_BT, K: int):
    """Packed rows ``[B, T]`` widened to ``[B, T + K]`` with a CLS slot at the start of every
    example (every slot moves right by the examples started at or before it, so example k's
    CLS slot is just before its first token, with position 0, its tokens positions 1, 2,
    ...), the CLS slots of absent examples at the end as padding.

    Returns ``(tokens_BL, segment_ids_BL, positions_BL, is_cls_BL, cls_BK)``: ``cls_BK`` the
    CLS slot of example k (L = T + K). Segments are numbered 1, 2, ... in row order.
    """
    B, T = tokens_BT.shape
    seg_BT = segment_ids_BT
    # every slot moves right by the number of examples started at or before it
    dest_BT = jnp.arange(T)[None, :] + jax.lax.cummax(seg_BT, axis=1)
    k_K = jnp.arange(1, K + 1, dtype=seg_BT.dtype)
    in_k_BKT = seg_BT[:, None, :] == k_K[None, :, None]
    present_BK = in_k_BKT.any(-1)
    first_BK = jnp.argmax(in_k_BKT, axis=-1)
    cls_BK = jnp.where(present_BK, first_BK + k_K[None, :] - 1, T + k_K[None, :] - 1)
    b_B1 = jnp.arange(B)[:, None]

    def scatter(x_BT, cls_value_BK):
        out = jnp.zeros((B, T + K), x_BT.dtype).at[b_B1, dest_BT].set(x_BT)
        return out.at[b_B1, cls_BK].set(cls_value_BK.astype(x_BT.dtype))

    zeros_BK = jnp.zeros((B, K), seg_BT.dtype)
    tokens_BL = scatter(tokens_BT, zeros_BK)
    segs_BL = scatter(seg_BT, jnp.where(present_BK, k_K[None, :], 0))
    pos_BL = scatter(jnp.where(seg_BT > 0, positions_BT + 1, 0), zeros_BK)
    is_cls_BL = scatter(jnp.zeros((B, T), bool), present_BK)
    return tokens_BL, segs_BL, pos_BL, is_cls_BL, cls_BK
