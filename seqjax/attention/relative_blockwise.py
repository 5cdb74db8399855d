"""Blockwise Transformer-XL relative attention (Dai et al. 2019, §3.3 and appendix B).

The same scores as ``seqjax.attention.relative`` (``score(i, j) = [(q_i + u) . k_j +
(q_i + v) . r_{M+i-j}] / sqrt(D)``, terms (a)+(c) and (b)+(d) of §3.3), computed one
(query block, key block) pair at a time with the online softmax of FlashAttention (Milakov
& Gimelshein 2018; Dao et al. 2022, Alg. 1): running max ``m``, normaliser ``l`` and
accumulator ``acc`` in float32, so no ``[T, S]`` array is ever formed.

The relative shift inside a block. For queries ``i0 .. i0+bq-1`` and keys ``j0 .. j0+bk-1``
the row of ``r`` (ordered by distance ``S-1 ... 0``) used by ``(i, j)`` is
``T - 1 - i + j``, so the block needs only the ``bq + bk - 1`` consecutive rows starting at
``m_lo = T - (i0 + bq) + j0``. The block computes ``BD_raw[i', c] = (q_i + v) . r[m_lo + c]``
(``[bq, bq + bk]``, one zero-valued spare column) and takes
``BD[i', j'] = BD_raw[i', j' + bq - 1 - i']`` as a strided view: flatten, drop the first
``bq - 1`` entries, reshape to rows of ``bq + bk - 1`` and keep the first ``bk`` columns
(row ``i'`` then starts ``i'`` entries earlier in ``BD_raw``: the shift, with no gather).

Blocks the mask removes entirely are never computed: a query block loops (``lax.scan``, a
static trip count) only over the key blocks from the first one inside the ``same_length``
band to the last one the causal mask lets it see. Query blocks are a static Python loop
(the last one may be shorter), so every loop length is static and reverse-mode autodiff
works through the scan; the scan body is rematerialized (``jax.checkpoint``), so the
backward pass keeps only the per-block carries (``O(T * D)`` per key block), not the
block scores.

Bidirectional attention (``causal=False``, XLNet: ``r`` has ``S + T - 1`` rows, distances
``S-1 ... -(T-1)``) uses the same block shift and visits every key block; XLNet's segment
term adds ``where(differs, ef_diff, ef_same)`` per block from two ``[B, H, T]`` dot products
(``segment_scores``), and a dense ``attn_mask`` (the permutation) is sliced per
block, or, with ``rank_mask``, the permutation is computed per block from two rank vectors
(``rank_visible``: no ``[T, S]`` mask exists anywhere).

Attention dropout is not implemented here (its random mask could not equal the reference's
``[B, H, T, S]`` draw); ``seqjax.attention.relative`` routes dropout to the materialized
path.

Legend: B batch, T segment (query) length, S = M + T key length, M memory length, H heads,
D head dim, bq/bk block sizes, nk number of key blocks, W = bq + bk columns of a block's
``BD_raw``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from seqjax.attention import masks as masks_lib
from seqjax.attention import numerics

# Defaults picked by timing the forward pass at B = 1, T = 1900, S = 3800, H = 4, D = 64 on
# XLA:CPU (2 cores, interleaved in one process, a loaded machine: see
# experiments/transformer_xl/README.md): 256 x 256 was fastest of 128..1024 squared.
BLOCK_Q = 256
BLOCK_K = 256


def key_block_range(
    i0: int, i1: int, *, t: int, s: int, bk: int, same_length: bool, mem_len: int, causal=True
):
    """Static ``[lo, hi)`` range of key blocks that queries ``i0 .. i1-1`` can see.

    Causal: query i sees keys ``j <= M + i``; ``same_length``: keys at distance
    ``M + i - j < mem_len``. Blocks outside the band are skipped entirely (none when not
    causal).
    """
    m = s - t
    nk = -(-s // bk)
    hi = min((m + i1 - 1) // bk + 1, nk) if causal else nk
    lo = max((m + i0 - mem_len + 1) // bk, 0) if same_length else 0
    return lo, hi


def shift_block(raw_BHqW, bk: int):
    """``out[..., i, j] = raw[..., i, j + bq - 1 - i]`` for ``j < bk`` (``W = bq + bk``)."""
    *lead, bq, w = raw_BHqW.shape
    flat = raw_BHqW.reshape(*lead, bq * w)
    flat = jax.lax.slice_in_dim(flat, bq - 1, bq - 1 + bq * (w - 1), axis=-1)
    return flat.reshape(*lead, bq, w - 1)[..., :bk]


def rank_visible(q_rank_BT, k_rank_BS, self_visible: bool, q_pos_T, k_pos_S, m: int):
    """XLNet's permutation as "may attend" from ranks (``seqjax.data.xlnet_perm``): query
    ``i`` sees key ``j`` iff ``q_rank[i] > k_rank[j]`` (memory and non-target keys carry
    -1: seen by all), or ``j`` is ``i`` itself when ``self_visible`` (the content stream).
    ``[B, T', S']`` for the query positions ``q_pos_T`` and key positions ``k_pos_S``."""
    vis = q_rank_BT[:, :, None] > k_rank_BS[:, None, :]
    if self_visible:
        vis = vis | (k_pos_S[None, :] == m + q_pos_T[:, None])[None]
    return vis


def segment_scores(q_BTHD, *, seg_embed, r_s_bias, token_types_BS):
    """XLNet's relative segment term (Yang et al. 2019, §2.5), unscaled, ``[B, H, T, S]``
    as ``(same [B, H, T, 1], different [B, H, T, 1], differs [B, 1, T, S])`` pieces."""
    t = q_BTHD.shape[1]
    qs_BTHD = q_BTHD + r_s_bias.astype(q_BTHD.dtype)[None, None]
    ef_BHT2 = jnp.einsum(
        "bthd,khd->bhtk", qs_BTHD, seg_embed.astype(q_BTHD.dtype),
        preferred_element_type=jnp.float32,
    )  # fmt: skip
    tq_BT = token_types_BS[:, -t:]
    return ef_BHT2, tq_BT


def relative_blockwise_attention(
    q,
    k,
    v,
    *,
    r,
    r_w_bias,
    r_r_bias,
    causal=True,
    mask=None,
    segment_ids=None,
    attn_mask=None,
    seg_embed=None,
    r_s_bias=None,
    token_types=None,
    same_length=False,
    mem_len=0,
    scale=None,
    block_q=BLOCK_Q,
    block_k=BLOCK_K,
    rank_mask=None,
):
    """Transformer-XL / XLNet attention, blockwise (see module docstring).

    Args:
      q: ``[B, T, H, D]``; k, v: ``[B, S, H, D]`` over ``[memory; segment]``.
      r: ``[S, H, D]`` projected relative embeddings for distances ``S-1 ... 0``
        (``[S + T - 1, H, D]`` down to ``-(T-1)`` when not ``causal``).
      r_w_bias, r_r_bias: ``u`` and ``v`` of §3.3, ``[H, D]``.
      causal: False for XLNet's bidirectional distances.
      mask: key padding ``[B, S]`` (True = keep); segment_ids: see ``masks``.
      attn_mask: bool ``[B, T, S]`` (True = may attend), XLNet's permutation mask.
      seg_embed, r_s_bias, token_types: XLNet's segment term (``segment_scores``).
      same_length, mem_len: every query sees only keys at distance ``< mem_len``.
      scale: logit scale, default ``1/sqrt(D)``.
      block_q, block_k: block sizes (clipped to T and S).
      rank_mask: ``(q_rank [B, T], k_rank [B, S], self_visible)``, the permutation as
        ranks (``rank_visible``), computed per block instead of ``attn_mask``.

    Returns:
      ``[B, T, H, D]`` in the dtype of ``q``.
    """
    b, t, h, d = q.shape
    s = k.shape[1]
    m_len = s - t
    bq, bk = min(int(block_q), t), min(int(block_k), s)
    nk = -(-s // bk)
    sp = nk * bk
    scale = float(numerics.default_scale(scale, d))
    f32 = jnp.float32
    key_mask = masks_lib.check_key_mask(mask, b, s)
    q_seg, kv_seg = masks_lib.split_segment_ids(segment_ids, t, s)
    if seg_embed is not None:
        ef_BHT2, tq_BT = segment_scores(
            q, seg_embed=seg_embed, r_s_bias=r_s_bias, token_types_BS=token_types
        )
        tk = numerics.pad_to(token_types, sp)
    am = numerics.pad_to(attn_mask.astype(bool), sp, axis=2) if attn_mask is not None else None
    if rank_mask is not None:
        q_rank, k_rank, rank_self = rank_mask
        krp = numerics.pad_to(k_rank, sp)

    qw_BTHD = q + r_w_bias.astype(q.dtype)[None, None]
    qr_BTHD = q + r_r_bias.astype(q.dtype)[None, None]
    kp, vp = numerics.pad_to(k, sp), numerics.pad_to(v, sp)
    # Row m of r serves distance S-1-m; a block reads rows m_lo .. m_lo + W - 1 <= T + sp - 1.
    rp = numerics.pad_to(r.astype(q.dtype), t + sp, axis=0)
    km = numerics.pad_to(key_mask, sp) if key_mask is not None else None
    ks = numerics.pad_to(kv_seg, sp) if kv_seg is not None else None

    outs = []
    for i0 in range(0, t, bq):
        i1 = min(i0 + bq, t)
        nq_i = i1 - i0  # this query block's size (the last one may be shorter)
        qw_blk, qr_blk = qw_BTHD[:, i0:i1], qr_BTHD[:, i0:i1]
        q_pos = i0 + jnp.arange(nq_i)
        qs_blk = q_seg[:, i0:i1] if q_seg is not None else None
        lo, hi = key_block_range(
            i0, i1, t=t, s=s, bk=bk, same_length=same_length, mem_len=mem_len, causal=causal
        )

        def body(carry, j, qw_blk=qw_blk, qr_blk=qr_blk, q_pos=q_pos, qs_blk=qs_blk, i0=i0, i1=i1):
            m, l, acc = carry
            nq_b = qw_blk.shape[1]
            j0 = j * bk
            k_blk = jax.lax.dynamic_slice_in_dim(kp, j0, bk, axis=1)
            v_blk = jax.lax.dynamic_slice_in_dim(vp, j0, bk, axis=1)
            r_blk = jax.lax.dynamic_slice_in_dim(rp, t - i1 + j0, nq_b + bk, axis=0)
            # Named scopes: the groups of experiments/transformer_xl/profile_eval.py.
            with jax.named_scope("content_scores"):
                ac = jnp.einsum("bqhd,bkhd->bhqk", qw_blk, k_blk, preferred_element_type=f32)
            with jax.named_scope("position_scores"):
                bd_raw = jnp.einsum("bqhd,whd->bhqw", qr_blk, r_blk, preferred_element_type=f32)
                scores = ac + shift_block(bd_raw, bk)
            if seg_embed is not None:
                with jax.named_scope("segment_scores"):
                    tk_blk = jax.lax.dynamic_slice_in_dim(tk, j0, bk, axis=1)
                    differs = (tq_BT[:, i0:i1, None] != tk_blk[:, None, :])[:, None]
                    ef = ef_BHT2[:, :, i0:i1]
                    scores = scores + jnp.where(differs, ef[..., 1:], ef[..., :1])
            logits = scores * scale
            k_pos = j0 + jnp.arange(bk)
            valid = k_pos[None, :] < s
            if causal:
                valid = valid & (k_pos[None, :] <= m_len + q_pos[:, None])
            if same_length:
                valid = valid & (m_len + q_pos[:, None] - k_pos[None, :] < mem_len)
            valid = valid[None, None]
            if km is not None:
                valid = valid & jax.lax.dynamic_slice_in_dim(km, j0, bk, axis=1)[:, None, None]
            if ks is not None:
                ks_blk = jax.lax.dynamic_slice_in_dim(ks, j0, bk, axis=1)
                valid = valid & (qs_blk[:, :, None] == ks_blk[:, None, :])[:, None]
            if am is not None:
                am_blk = jax.lax.dynamic_slice_in_dim(am[:, i0:i1], j0, bk, axis=2)
                valid = valid & am_blk[:, None]
            if rank_mask is not None:
                kr_blk = jax.lax.dynamic_slice_in_dim(krp, j0, bk, axis=1)
                vis = rank_visible(q_rank[:, i0:i1], kr_blk, rank_self, q_pos, k_pos, m_len)
                valid = valid & vis[:, None]
            logits = jnp.where(valid, logits, -jnp.inf)
            # The output does not depend on the running max: no gradient through it.
            m_new = jax.lax.stop_gradient(jnp.maximum(m, logits.max(-1)))
            m_safe = jnp.where(jnp.isfinite(m_new), m_new, 0.0)
            p = jnp.exp(logits - m_safe[..., None])
            corr = jnp.exp(m - m_safe)
            with jax.named_scope("weighted_values"):
                pv = jnp.einsum(
                    "bhqk,bkhd->bhqd", p.astype(v.dtype), v_blk, preferred_element_type=f32
                )
            return (m_new, l * corr + p.sum(-1), acc * corr[..., None] + pv), None

        init = (
            jnp.full((b, h, nq_i), -jnp.inf, f32),
            jnp.zeros((b, h, nq_i), f32),
            jnp.zeros((b, h, nq_i, v.shape[-1]), f32),
        )
        if hi > lo:
            body_remat = jax.checkpoint(body, prevent_cse=False)
            (m_fin, l, acc), _ = jax.lax.scan(body_remat, init, jnp.arange(lo, hi))
        else:  # no visible key (impossible with mem_len >= 1): zeros, as the reference
            m_fin, l, acc = init
        out, _ = numerics.finish_online_softmax(m_fin, l, acc)
        outs.append(out.transpose(0, 2, 1, 3))
    return jnp.concatenate(outs, axis=1).astype(q.dtype)
