"""Block-sparse execution of the Sparse Transformer patterns (Child et al. 2019, §4.2-4.3).

A naive key-block table gains little here: the strided column and the fixed summary cells
touch every earlier key block. Each pattern is therefore split into two disjoint parts, each
computed by the exact blockwise engine (``seqjax.attention.blockwise``, forward AND backward
visit only the listed block pairs) and merged exactly through their log-sum-exps
(``out = sum_p exp(lse_p - lse) out_p``, ``lse = logsumexp_p lse_p``; ``numerics.merge_lse``):

* strided A1 (``local_band``): a band of key blocks around each query block;
* strided A2 (``columns``): the reshape/transpose trick. With T = n l, position r l + col
  sits in row r, column col of an ``[n, l]`` grid; A2 links positions of the same column,
  so transposing to ``[B l, n, H, D]`` turns it into ordinary attention of length n. When
  merged with A1, the rows already covered by the band (r' in {r - 1, r}, and r + 1 when
  bidirectional) are masked out so the parts stay disjoint;
* fixed A1 (``block_diagonal``): each query block sees only its own block of l;
* fixed A2 (``summaries``): the c summary cells of every block are gathered into a compact
  ``[B, n c, H, D]`` key set whose absolute positions are known statically; causal query
  blocks visit only a prefix of it. When merged with A1 the summary cells of the query's own
  block are masked out (A1 holds them).

Cost for stride l ≈ sqrt(T): strided O(T l + T n) = O(T sqrt(T)); fixed O(T l + T n c), i.e.
c / l of dense. No ``T x T`` array exists in the forward or backward program (tested).

Legend: B batch, T (padded) sequence length = n l, H heads, D head dim, l stride, n = T / l
blocks, c summary cells per block.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from seqjax.attention import blockwise, numerics, pallas_blocks, pallas_plan

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=64)
def _log_fallback(part: int, why: str) -> None:
    log.warning("block-sparse part %d runs on the plain-JAX engine: %s", part, why)


@dataclasses.dataclass(frozen=True)
class Context:
    """Masks, scale and dropout shared by every part (already padded to length T).

    Attributes:
      mask: bool ``[B, T]`` key-padding mask (True = keep) or None.
      q_seg, kv_seg: int ``[B, T]`` segment ids or None.
      scale: logit scale.
      dropout_rate, dropout_rng: attention-probability dropout (one fold-in per part).
      engine: ``"jax"`` (the plain-JAX engine ``blockwise``) or ``"pallas"`` (the kernels of
        ``pallas_blocks``, with tiles from ``pallas_plan``; a part they cannot run, e.g.
        one whose remapped score bias has no kernel form, falls back to ``"jax"``, logged).
      score_mod: optional positional bias (``seqjax.attention.score_mod.ScoreMod``, a
        function of ``q - k`` such as ALiBi or T5's), applied by every part in its own
        coordinates (``ScoreMod.remap``); parts with one run on the plain-JAX engine.
    """

    mask: jax.Array | None
    q_seg: jax.Array | None
    kv_seg: jax.Array | None
    scale: float
    dropout_rate: float = 0.0
    dropout_rng: jax.Array | None = None
    engine: str = "jax"
    score_mod: Any = None

    def with_heads(self, heads) -> Context:
        """This context for a part that runs on the heads ``heads`` only (``None``: all)."""
        if heads is None or self.score_mod is None:
            return self
        return dataclasses.replace(self, score_mod=self.score_mod.remap(heads=heads))

    def segments(self, kv_index=None):
        if self.q_seg is None:
            return None
        kv = self.kv_seg if kv_index is None else self.kv_seg[:, kv_index]
        return (self.q_seg, kv)

    def rng(self, part: int):
        if self.dropout_rng is None:
            return None
        return jax.random.fold_in(self.dropout_rng, part)


def range_table(lo: np.ndarray, hi: np.ndarray, block_k: int):
    """Key-block table visiting, for query block i, the key positions ``[lo[i], hi[i])``."""
    first = lo // block_k
    last = np.maximum(hi - 1, lo) // block_k
    count = np.where(hi > lo, last - first + 1, 0).astype(np.int32)
    width = max(1, int(count.max()))
    table = first[:, None] + np.arange(width)[None, :]
    table = np.where(np.arange(width)[None, :] < count[:, None], table, 0)
    return table.astype(np.int32), count


def _attend(
    q, k, v, ctx: Context, *, table, count, block_q, block_k, mask_fn, part, score_mod=None, **over
):
    """One exact block-sparse part with its log-sum-exp ``[B, H, T]`` (``score_mod``: the
    context's bias in this part's coordinates, default ``ctx.score_mod``)."""
    kwargs = dict(mask=ctx.mask, segment_ids=ctx.segments())
    kwargs.update(over)
    score_mod = ctx.score_mod if score_mod is None else score_mod
    if score_mod is not None:
        kwargs["score_mod"] = score_mod
    engine = blockwise.blockwise_attention
    if ctx.engine == "pallas":
        why = pallas_blocks.supported(
            q, k, v, block_q=block_q, block_k=block_k, table=table,
            dropout_rate=ctx.dropout_rate, score_mod=score_mod,
        )  # fmt: skip
        if why is None:
            engine = pallas_blocks.block_sparse_attention
        else:
            _log_fallback(part, why)
    return engine(
        q,
        k,
        v,
        table=table,
        count=count,
        block_q=block_q,
        block_k=block_k,
        causal=False,  # causality is part of every mask_fn, in absolute positions
        mask_fn=mask_fn,
        scale=ctx.scale,
        dropout_rate=ctx.dropout_rate,
        dropout_rng=ctx.rng(part),
        return_lse=True,
        **kwargs,
    )


def _range_part(q, k, v, ctx: Context, *, lo, hi, block: int, mask_fn, part: int):
    """A part whose query block i visits the key positions ``[lo[i], hi[i])``."""
    table, count = range_table(lo, hi, block)
    kw = dict(table=table, count=count, block_q=block, block_k=block)
    return _attend(q, k, v, ctx, mask_fn=mask_fn, part=part, **kw)


def local_band(q, k, v, ctx: Context, *, stride: int, block: int, causal: bool, part: int = 0):
    """Strided A1: keys ``i - l <= j <= i`` (``|i - j| <= l`` when bidirectional)."""
    t, l = q.shape[1], stride
    starts = np.arange(t // block) * block
    ahead = 0 if causal else l
    lo = np.maximum(starts - l, 0)
    hi = np.minimum(starts + block + ahead, t)

    def mask_fn(q_pos, k_pos):
        qq, kk = q_pos[:, None], k_pos[None, :]
        return (kk >= qq - l) & (kk <= qq + ahead)

    return _range_part(q, k, v, ctx, lo=lo, hi=hi, block=block, mask_fn=mask_fn, part=part)


def block_diagonal(q, k, v, ctx: Context, *, stride: int, block: int, causal: bool, part=0):
    """Fixed A1: keys in the query's own block of l (``j <= i`` when causal)."""
    t, l = q.shape[1], stride
    starts = np.arange(t // block) * block
    lo = (starts // l) * l
    hi = starts + block if causal else lo + l

    def mask_fn(q_pos, k_pos):
        qq, kk = q_pos[:, None], k_pos[None, :]
        same = (kk // l) == (qq // l)
        return same & (kk <= qq) if causal else same

    return _range_part(q, k, v, ctx, lo=lo, hi=hi, block=block, mask_fn=mask_fn, part=part)


def _to_columns(x, stride: int):
    """``[B, n l, ...]`` -> ``[B l, n, ...]``: column col of the ``[n, l]`` grid, contiguous."""
    b, t = x.shape[:2]
    n = t // stride
    x = x.reshape(b, n, stride, *x.shape[2:])
    return jnp.swapaxes(x, 1, 2).reshape(b * stride, n, *x.shape[3:])


def columns(q, k, v, ctx: Context, *, stride: int, causal: bool, exclude_band: bool, part=1):
    """Strided A2 via the transpose trick: keys ``j = i - m l`` (``m >= 0`` when causal).

    Args:
      exclude_band: drop the rows the A1 band already covers (|m| <= 1, causal m in {0, 1}),
        for an exact merge with ``local_band``.
    """
    b, t, h, _ = q.shape
    l, n = stride, t // stride
    col = {name: None for name in ("mask", "q_seg", "kv_seg")}
    for name in col:
        if getattr(ctx, name) is not None:
            col[name] = _to_columns(getattr(ctx, name), l)
    seg = (col["q_seg"], col["kv_seg"]) if col["q_seg"] is not None else None

    def mask_fn(q_row, k_row):
        qq, kk = q_row[:, None], k_row[None, :]
        if causal:
            return kk <= qq - (2 if exclude_band else 0)
        return jnp.abs(qq - kk) >= 2 if exclude_band else jnp.ones_like(qq == kk)

    table, count = np.zeros((1, 1), np.int32), np.ones((1,), np.int32)
    mod = None
    if ctx.score_mod is not None:  # q - k = (r_q - r_k) l in the column layout
        mod = ctx.score_mod.remap(scale=l)  # keeps ALiBi's / T5's kernel form
    out, lse = _attend(
        _to_columns(q, l),
        _to_columns(k, l),
        _to_columns(v, l),
        ctx,
        table=table,
        count=count,
        block_q=n,
        block_k=n,
        mask_fn=mask_fn,
        part=part,
        score_mod=mod,
        mask=col["mask"],
        segment_ids=seg,
    )
    out = jnp.swapaxes(out.reshape(b, l, n, h, -1), 1, 2).reshape(b, t, h, -1)
    lse = lse.reshape(b, l, h, n).transpose(0, 2, 3, 1).reshape(b, h, t)  # row r, column col
    return out, lse


def summary_positions(num_blocks: int, stride: int, c: int, sub_block: int) -> np.ndarray:
    """Absolute positions ``[n c]`` of the summary cells (sub-block ``sub_block``)."""
    first = stride - (sub_block + 1) * c
    return (np.arange(num_blocks)[:, None] * stride + first + np.arange(c)[None, :]).reshape(-1)


def summaries(
    q, k, v, ctx: Context, *, stride, c, sub_block, causal, exclude_own_block, block, part=2
):
    """Fixed A2 over the gathered summary cells ``[B, n c, H, D]`` (§4.3).

    Args:
      sub_block: which c-sized sub-block of each block holds the summary cells.
      exclude_own_block: drop the summary cells of the query's own block (A1 has them), for
        an exact merge with ``block_diagonal``.
      block: query and key block size of the blockwise engine.
    """
    t, l = q.shape[1], stride
    n = t // l
    positions = summary_positions(n, l, c, sub_block)
    first = l - (sub_block + 1) * c
    s = n * c
    # The kernels take power-of-two tiles: the gathered keys are padded (and masked) up to one.
    block_k = min(block, pallas_plan.pow2_at_least_16(s) if ctx.engine == "pallas" else s)
    nq = -(-t // block)
    last_q = np.minimum((np.arange(nq) + 1) * block, t) - 1
    if not causal:
        need = np.full((nq,), s)
    elif exclude_own_block:
        need = (last_q // l) * c
    else:
        need = (last_q // l) * c + np.clip(last_q % l - first + 1, 0, c)
    table, count = range_table(np.zeros_like(need), need, block_k)

    def mask_fn(q_pos, k_idx):
        qq, kk = q_pos[:, None], k_idx[None, :]
        key_block = kk // c
        if exclude_own_block:
            own = qq // l
            return key_block < own if causal else key_block != own
        if causal:
            return key_block * l + first + kk % c <= qq
        return jnp.ones_like(qq == kk)

    idx = jnp.asarray(positions)
    mask = None if ctx.mask is None else ctx.mask[:, idx]
    mod = None
    if ctx.score_mod is not None:  # key k of the gathered set sits at positions[k]
        mod = ctx.score_mod.remap(k_map=lambda kk: jnp.asarray(positions)[kk])
    return _attend(
        q,
        k[:, idx],
        v[:, idx],
        ctx,
        table=table,
        count=count,
        block_q=block,
        block_k=block_k,
        mask_fn=mask_fn,
        part=part,
        score_mod=mod,
        mask=mask,
        segment_ids=ctx.segments(idx),
    )


def merge(parts):
    """Exact union of the parts (disjoint key sets) from their ``(out [B, T, H, Dv],
    lse [B, H, T])`` pairs, by ``numerics.merge_lse``.

    Returns:
      ``[B, T, H, Dv]`` float32.
    """
    outs = [out for out, _ in parts]
    lses_BTH = [jnp.swapaxes(lse, 1, 2) for _, lse in parts]
    return numerics.merge_lse(outs, lses_BTH)
