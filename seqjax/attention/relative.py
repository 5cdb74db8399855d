"""Transformer-XL relative positional attention (Dai et al. 2019, §3.3 and appendix B).

For query i (absolute position ``M + i`` after a memory of ``M = S - T`` positions) and key
j at distance ``d = M + i - j``:

    score(i, j) = [(q_i + u) . k_j  +  (q_i + v) . (W_R R_d)] / sqrt(D)      (eq. in §3.3)

terms (a)+(c) and (b)+(d) of the paper. ``R`` is the sinusoid embedding of the distance
(``[sin, cos]`` concatenated, Vaswani et al. §3.5) capped at ``clamp_len``; ``u`` and ``v``
are learned ``[H, D]`` biases (per layer with ``untie_r``, else shared by all layers).

The relative shift: ``BD_raw[i, m] = (q_i + v) . r[m]`` is computed against the ``S``
projected embeddings ordered by distance ``S-1 ... 0`` (row m has distance ``S-1-m``), and
``BD[i, j] = BD_raw[i, j + T - 1 - i]`` is taken with an exact gather (equivalent to the
reference code's pad-reshape trick, with no garbage entries: positions the trick fills with
garbage are the future ones the causal mask hides anyway).

Bidirectional (``causal=False``; XLNet, Yang et al. 2019, §2.3 and appendix A.2): every
query sees every key, distances run from ``S-1`` down to ``-(T-1)``, ``r`` has ``S + T - 1``
rows in that order and the same gather ``BD[i, j] = BD_raw[i, j + T - 1 - i]`` reads them
(no masked entry any more). XLNet's relative segment encoding (§2.5) adds a third term

    ef(i, j) = (q_i + b_s) . s_{ij},    s_{ij} = seg_embed[same segment ? 0 : 1]

(``r_s_bias`` = ``b_s``, ``seg_embed`` ``[2, H, D]``, segments from ``token_types`` over
``[memory; segment]``: the reference gives memory positions type 0), and a dense
``attn_mask`` ``[B, T, S]`` (True = may attend) carries XLNet's permutation masks.

Masks: causal (query i sees memory and segment positions ``j <= M + i``), optionally
``same_length`` (every query sees at most ``mem_len`` keys: distance ``< mem_len``, the
reference code's ``same_length`` band used for evaluation), key padding, segments.

Implementations (option ``implementation``), equal in values and gradients:
  * ``"reference"`` (default): materializes the ``[B, H, T, S]`` scores and the shift gather
    above; supports attention dropout and every JAX transformation.
  * ``"blockwise"``: ``seqjax.attention.relative_blockwise``: online softmax over key
    blocks, the shift done inside each block, blocks outside the causal / ``same_length``
    band skipped; memory linear in S. No attention dropout (asking for it raises).
  * ``"auto"``: ``blockwise``, or ``reference`` when attention dropout is on (the reason is
    logged once).

Legend: B batch, T segment (query) length, S = M + T key length, H heads, D head dim,
E = H * D width of the sinusoid embeddings.
"""

from __future__ import annotations

import functools
import logging

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from seqjax.attention import masks as masks_lib
from seqjax.attention import numerics, registry, relative_blockwise

log = logging.getLogger(__name__)

IMPLEMENTATIONS = ("reference", "blockwise", "auto")


def relative_sinusoid(klen: int, width: int, clamp_len: int = -1, qlen_future: int = 0):
    """Sinusoid embeddings of distances ``klen-1 ... -qlen_future`` (descending),
    ``[klen + qlen_future, width]`` (``qlen_future = T - 1`` for bidirectional attention).

    Distances beyond ``clamp_len`` in magnitude (when ``clamp_len > 0``) use the embedding of
    ``+-clamp_len`` (Transformer-XL evaluation with a long memory; XLNet's clamp).
    """
    dist = jnp.arange(klen - 1, -qlen_future - 1, -1, dtype=jnp.float32)
    if clamp_len > 0:
        dist = jnp.clip(dist, -float(clamp_len), float(clamp_len))
    inv_freq = 1.0 / (10000.0 ** (jnp.arange(0.0, width, 2.0) / width))
    angle = dist[:, None] * inv_freq[None, :]
    return jnp.concatenate([jnp.sin(angle), jnp.cos(angle)], axis=-1)


def rel_shift_gather(bd_raw_BHTR, s: int | None = None):
    """``out[..., i, j] = bd_raw[..., i, j + T - 1 - i]`` for ``j < S`` (``S`` defaults to
    the R columns of ``bd_raw``; indices are clipped: causal future entries are masked)."""
    t, r = bd_raw_BHTR.shape[-2:]
    s = r if s is None else s
    idx_TS = jnp.arange(s)[None, :] + (t - 1) - jnp.arange(t)[:, None]
    idx_TS = jnp.clip(idx_TS, 0, r - 1)
    idx = jnp.broadcast_to(idx_TS, bd_raw_BHTR.shape[:-1] + (s,))
    return jnp.take_along_axis(bd_raw_BHTR, idx, axis=-1)


def check_segment_options(seg_embed, r_s_bias, token_types, b, s, h, d) -> None:
    """One-line errors for the segment term's inputs (all three or none)."""
    given = [x is not None for x in (seg_embed, r_s_bias, token_types)]
    if any(given) and not all(given):
        raise ValueError(
            "relative segment term needs seg_embed, r_s_bias and token_types together; got "
            f"seg_embed={given[0]}, r_s_bias={given[1]}, token_types={given[2]}"
        )
    if all(given):
        if tuple(seg_embed.shape) != (2, h, d) or tuple(r_s_bias.shape) != (h, d):
            raise ValueError(
                f"seg_embed must be [2, heads, head_dim] = {(2, h, d)} and r_s_bias {(h, d)}; "
                f"got {tuple(seg_embed.shape)} and {tuple(r_s_bias.shape)}"
            )
        if tuple(token_types.shape) != (b, s):
            raise ValueError(
                f"token_types must be [batch, seq_k] = {(b, s)}; got {tuple(token_types.shape)}"
            )


def check_attn_mask(attn_mask, b, t, s) -> None:
    if attn_mask is not None and tuple(attn_mask.shape) != (b, t, s):
        raise ValueError(
            f"attn_mask must be [batch, seq_q, seq_k] = {(b, t, s)}; got {tuple(attn_mask.shape)}"
        )


def relative_attention(
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
    clamp_len=-1,
    untie_r=False,
    scale=None,
    dropout_rate=0.0,
    dropout_rng=None,
    implementation="reference",
    block_q=relative_blockwise.BLOCK_Q,
    block_k=relative_blockwise.BLOCK_K,
    rank_mask=None,
):
    """Transformer-XL attention (see module docstring).

    Args:
      q: ``[B, T, H, D]`` queries of the current segment.
      k, v: ``[B, S, H, D]`` keys/values over ``[memory; segment]``.
      r: ``[S, H, D]`` projected relative embeddings ``W_R R`` for distances S-1 ... 0
        (``[S + T - 1, H, D]``, distances S-1 ... -(T-1), when ``causal=False``).
      r_w_bias: ``u``, ``[H, D]``; r_r_bias: ``v``, ``[H, D]``.
      causal: True (Transformer-XL, a decoder) or False (XLNet: bidirectional distances).
      mask: key padding ``[B, S]``; segment_ids: packing segments (``masks``).
      attn_mask: bool ``[B, T, S]``, True = query may attend key (XLNet's permutation).
      seg_embed, r_s_bias, token_types: XLNet's segment term (``[2, H, D]``, ``[H, D]``,
        int ``[B, S]`` over ``[memory; segment]``); all or none.
      same_length: restrict every query to its ``mem_len`` most recent keys.
      mem_len: the configured memory length (used by ``same_length``).
      clamp_len, untie_r: consumed where ``r`` and the biases are built (the module hooks);
        accepted here so the options of the mechanism are one set.
      implementation: one of ``IMPLEMENTATIONS``.
      block_q, block_k: block sizes of ``"blockwise"``.
      rank_mask: ``(q_rank [B, T], k_rank [B, S], self_visible)``: XLNet's permutation as
        ranks (``relative_blockwise.rank_visible``; the blockwise engine never forms the
        ``[T, S]`` mask).

    Returns:
      ``[B, T, H, D]``.
    """
    del clamp_len, untie_r
    registry.check_qkv(q, k, v)
    numerics.check_dropout(dropout_rate, dropout_rng)
    b, t, h, d = q.shape
    s = k.shape[1]
    rows = s if causal else s + t - 1
    if r.shape[0] != rows or r.shape[1:] != (h, d):
        what = "seq_k" if causal else "seq_k + seq_q - 1 (causal=False)"
        raise ValueError(
            f"r must have shape [{what}, heads, head_dim] = {(rows, h, d)}; got {r.shape}"
        )
    check_segment_options(seg_embed, r_s_bias, token_types, b, s, h, d)
    check_attn_mask(attn_mask, b, t, s)
    if rank_mask is not None and (
        len(rank_mask) != 3 or rank_mask[0].shape != (b, t) or rank_mask[1].shape != (b, s)
    ):
        raise ValueError(f"rank_mask must be (q_rank [B, T], k_rank [B, S], self_visible) with "
                         f"B, T, S = {b}, {t}, {s}")  # fmt: skip
    if same_length and not causal:
        raise ValueError("same_length=True needs causal=True (a band of past keys)")
    if same_length and mem_len <= 0:
        raise ValueError("same_length=True needs mem_len > 0 (the window every query sees)")
    _check_implementation(implementation, block_q, block_k)
    if implementation == "auto":
        implementation = "blockwise"
        if dropout_rate > 0.0:
            implementation = "reference"
            _log_auto_choice("attention dropout (blockwise has none)")
    if implementation == "blockwise":
        if dropout_rate > 0.0:
            raise ValueError(
                f"relative implementation 'blockwise' has no attention dropout (dropout_rate="
                f"{dropout_rate}); use implementation 'reference' or 'auto', or set the "
                "attention dropout to 0"
            )
        return relative_blockwise.relative_blockwise_attention(
            q, k, v, r=r, r_w_bias=r_w_bias, r_r_bias=r_r_bias, causal=causal, mask=mask,
            segment_ids=segment_ids, attn_mask=attn_mask, seg_embed=seg_embed,
            r_s_bias=r_s_bias, token_types=token_types, same_length=same_length,
            mem_len=mem_len, scale=scale, block_q=block_q, block_k=block_k, rank_mask=rank_mask,
        )  # fmt: skip
    scale = numerics.default_scale(scale, d)
    f32 = jnp.float32
    with jax.named_scope("content_scores"):
        qw_BTHD = q + r_w_bias.astype(q.dtype)[None, None]
        ac_BHTS = jnp.einsum("bthd,bshd->bhts", qw_BTHD, k, preferred_element_type=f32)
    with jax.named_scope("position_scores"):
        bd_raw_BHTS = jnp.einsum(
            "bthd,shd->bhts",
            q + r_r_bias.astype(q.dtype)[None, None],
            r.astype(q.dtype),
            preferred_element_type=f32,
        )
        scores_BHTS = ac_BHTS + rel_shift_gather(bd_raw_BHTS, s)
    if seg_embed is not None:
        with jax.named_scope("segment_scores"):
            ef_BHT2, tq_BT = relative_blockwise.segment_scores(
                q, seg_embed=seg_embed, r_s_bias=r_s_bias, token_types_BS=token_types
            )
            differs_B1TS = (tq_BT[:, :, None] != token_types[:, None, :])[:, None]
            scores_BHTS = scores_BHTS + jnp.where(differs_B1TS, ef_BHT2[..., 1:], ef_BHT2[..., :1])
    logits_BHTS = scores_BHTS * scale
    valid = masks_lib.dense_mask(b, t, s, causal=causal, mask=mask, segment_ids=segment_ids)
    if rank_mask is not None:
        q_rank, k_rank, rank_self = rank_mask
        vis_BTS = relative_blockwise.rank_visible(
            q_rank, k_rank, rank_self, jnp.arange(t), jnp.arange(s), s - t
        )
        attn_mask = vis_BTS if attn_mask is None else attn_mask & vis_BTS
    if attn_mask is not None:
        am = attn_mask.astype(bool)[:, None]
        valid = am if valid is None else valid & am
    if same_length:
        dist_TS = (s - t) + jnp.arange(t)[:, None] - jnp.arange(s)[None, :]
        valid = valid & (dist_TS < mem_len)[None, None]
    return numerics.attend_logits(
        logits_BHTS, v, valid, dropout_rate=dropout_rate, dropout_rng=dropout_rng,
        out_dtype=q.dtype,
    )  # fmt: skip


def _check_implementation(implementation, block_q, block_k) -> None:
    """One-line errors naming the option and its valid values."""
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(
            f"relative option implementation={implementation!r} is not one of {IMPLEMENTATIONS}"
        )
    for name, val in (("block_q", block_q), ("block_k", block_k)):
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 1:
            raise ValueError(f"relative option {name}={val!r} is invalid; valid: an integer >= 1")


@functools.lru_cache(maxsize=8)
def _log_auto_choice(why: str) -> None:
    log.info("relative attention 'auto' uses 'reference': %s", why)


def _validate(options: dict, seq_len: int) -> None:
    """Config-time check of the option values (``registry.Mechanism.validate``)."""
    del seq_len
    _check_implementation(
        options.get("implementation", "reference"),
        options.get("block_q", relative_blockwise.BLOCK_Q),
        options.get("block_k", relative_blockwise.BLOCK_K),
    )


def _bias_params(module, h: int, d: int) -> dict:
    init = nn.with_logical_partitioning(nn.initializers.normal(0.02), ("heads", "kv"))
    return {
        "r_w_bias": module.param("r_w_bias", init, (h, d)),
        "r_r_bias": module.param("r_r_bias", init, (h, d)),
    }


def _module_params(module, *, q, k, v, options):
    """Per layer: ``W_R`` projecting the sinusoids to heads, and u/v when ``untie_r``."""
    del v
    _, t, h, d = q.shape
    s = k.shape[1]
    r_SE = relative_sinusoid(s, h * d, options.get("clamp_len", -1))
    # W_R, stored as [E, H, D] so its logical names apply under sharding rules.
    w_r_EHD = module.param(
        "r_net",
        nn.with_logical_partitioning(
            nn.initializers.variance_scaling(
                1.0, "fan_in", "truncated_normal", in_axis=0, out_axis=(1, 2)
            ),
            ("embed", "heads", "kv"),
        ),
        (h * d, h, d),
    )
    r_SHD = jnp.einsum("se,ehd->shd", r_SE, w_r_EHD)
    out = {"r": r_SHD}
    if options.get("untie_r", False):
        out.update(_bias_params(module, h, d))
    return out


def _model_params(module, *, cfg, options):
    """u/v shared by every layer (the paper's default) unless ``untie_r``."""
    if options.get("untie_r", False):
        return {}
    return _bias_params(module, cfg.num_heads, cfg.dim_head)


registry.register(
    registry.Mechanism(
        name="relative",
        fn=relative_attention,
        module_params=_module_params,
        model_params=_model_params,
        options=("same_length", "mem_len", "clamp_len", "untie_r", "r", "r_w_bias", "r_r_bias")
        + ("implementation", "block_q", "block_k")
        + ("attn_mask", "seg_embed", "r_s_bias", "token_types"),
        validate=_validate,
        doc="Transformer-XL relative positional attention over [memory; segment] (Dai et al. "
        "2019); reference | blockwise | auto",
        memory_model="Transformer-XL's relative attention needs its recurrent memory model",
        packing="Transformer-XL's memory carries the previous segment's states into the next",
        context_parallel_refusal="Transformer-XL's relative attention shifts position scores "
        "across the whole segment and attends to a memory of earlier segments, neither of "
        "which is split along the sequence",
    )
)
