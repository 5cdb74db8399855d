"""Sparse Transformer attention (Child et al. 2019): strided and fixed factorized patterns.

Registered as ``"sparse_strided"`` (§4.2) and ``"sparse_fixed"`` (§4.3). The patterns and the
c convention (**c summary cells per block: j mod l in {l - c, ..., l - 1}**, as in OpenAI's
code; the paper prints c + 1 values) are defined in ``seqjax.attention.sparse_patterns``.

Options:
  * ``stride`` (l): block length / stride; default the power of two nearest sqrt(T).
  * ``c``: summary cells per block (``sparse_fixed`` only), 1 <= c <= stride; default l / 4
    (the paper's enwik8 model: l = 128, c = 32).
  * ``block_size``: block size of the block-sparse engine for the A1 part; must divide
    ``stride``; default the largest divisor of ``stride`` up to 64.
  * ``head_mode``: ``"merged"`` (every head attends to A1 ∪ A2) or ``"split"`` (heads
    ``[0, H/2)`` attend to A1, ``[H/2, H)`` to A2; H must be even) — §4.3, "merged head" and
    "multi-head" attention.
  * ``distinct_summaries`` (``sparse_fixed`` only): head h uses the summary sub-block
    ``h mod (l / c)`` counted back from the end of each block, instead of all heads sharing
    the last c cells (§4.3: distinct sub-blocks per head were preferable).
  * ``implementation``: ``"auto"`` (default: ``"pallas"`` on a GPU, ``"splash"`` on a
    TPU when there is no dropout or bias, else ``"blocksparse"``), ``"blocksparse"``
    (computes only the blocks the pattern needs, forward and backward, O(T sqrt(T)) for
    l ≈ sqrt(T); see ``sparse_blocks``),
    ``"pallas"`` (the same block tables run by the Pallas kernels of ``pallas_blocks``:
    Triton on GPU, interpret mode elsewhere; the block is the planner's tile, a power of
    two dividing l, ``kernel_block``; parts the kernels cannot take (l without a
    power-of-two divisor >= 16, a remapped bias) fall back to the plain-JAX engine,
    logged), ``"splash"`` (TPU splash attention with the per-head patterns as lazy
    masks; see ``seqjax.attention.splash``) or
    ``"masked"`` (dense attention with the pattern as a ``[H, T, T]`` mask, the ground truth
    for tests, O(T^2)).
  * ``causal`` (the common option): the paper's decoder patterns; False gives the
    bidirectional encoder variants (A1 = the window/block both ways, A2 = the column both
    ways / the summary cells of every block).

Sparse attention is self-attention: queries and keys must have the same length (no
cross-attention; token-by-token decoding runs through ``seqjax.decoding.pattern_cache``,
which gathers exactly the positions this pattern attends). Padding masks and packed
``segment_ids`` combine with the pattern; a query with no visible key returns zeros.

Legend: B batch, T sequence length, H heads, D head dim.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from seqjax.attention import masks as masks_lib
from seqjax.attention import numerics, pallas_plan, registry, splash
from seqjax.attention import sparse_blocks as blocks
from seqjax.attention import sparse_patterns as patterns
from seqjax.attention.sparse_patterns import head_patterns, pattern  # noqa: F401 (public API)

IMPLEMENTATIONS = ("auto", "blocksparse", "pallas", "splash", "masked")
HEAD_MODES = ("merged", "split")
OPTIONS = ("stride", "c", "block_size", "head_mode", "distinct_summaries", "implementation")
# Engine block for the gathered summary keys (fixed A2): large enough to amortise the loop,
# at most one pattern block so causal query blocks skip most of the summary prefix.
SUMMARY_BLOCK = 64
# Default engine block for A1: the largest divisor of the stride up to this (on CPU, 64 was
# faster than 128 at T = 12,288, l = 128).
DEFAULT_BLOCK = 64


def auto_stride(seq_len: int) -> int:
    """The power of two nearest sqrt(T) (the paper uses l ≈ sqrt(T))."""
    return int(2 ** round(np.log2(max(1.0, np.sqrt(seq_len)))))


def resolve_options(
    kind: str,
    seq_len: int,
    *,
    stride=None,
    c=None,
    block_size=None,
    head_mode="merged",
    distinct_summaries=False,
    implementation="auto",
) -> dict:
    """Validates the options of ``sparse_<kind>`` for length T and fills in defaults.

    Raises:
      ValueError: naming the option and its valid values.
    """
    name = f"sparse_{kind}"
    stride = auto_stride(seq_len) if stride is None else stride
    c = patterns.check_pattern_args(kind, stride, c)
    if stride > seq_len:
        raise ValueError(
            f"{name} option stride={stride} exceeds the sequence length {seq_len}; the pattern "
            f"would be dense. Use stride <= {seq_len} (≈ sqrt(T) = {auto_stride(seq_len)})"
        )
    if block_size is None:
        block_size = max(b for b in range(1, min(stride, DEFAULT_BLOCK) + 1) if stride % b == 0)
    if (
        isinstance(block_size, bool)
        or not isinstance(block_size, (int, np.integer))
        or block_size < 1
        or stride % block_size
    ):
        raise ValueError(
            f"{name} option block_size must be a positive divisor of stride={stride}; "
            f"got {block_size!r}"
        )
    if head_mode not in HEAD_MODES:
        raise ValueError(f"{name} option head_mode={head_mode!r} is not one of {HEAD_MODES}")
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(
            f"{name} option implementation={implementation!r} is not one of {IMPLEMENTATIONS}"
        )
    if distinct_summaries not in (True, False):
        raise ValueError(
            f"{name} option distinct_summaries must be a bool; got {distinct_summaries!r}"
        )
    if distinct_summaries and kind != "fixed":
        raise ValueError("option distinct_summaries applies to sparse_fixed only")
    return dict(
        stride=int(stride),
        c=c,
        block_size=int(block_size),
        head_mode=head_mode,
        distinct_summaries=bool(distinct_summaries),
        implementation=implementation,
    )


def masked_attention(
    q, k, v, *, kind, opts, causal, mask, segment_ids, scale, drop, drop_rng, score_mod=None
):
    """Dense attention with the per-head pattern as a mask (the ``"masked"`` ground truth)."""
    b, t, h, d = q.shape
    layout = patterns.head_layout(
        kind,
        h,
        opts["stride"],
        opts["c"],
        head_mode=opts["head_mode"],
        distinct_summaries=opts["distinct_summaries"],
    )
    pos = jnp.arange(t)
    per_head = []
    for parts, sub_block in layout:
        m = None
        for part in parts:
            p = patterns.pattern_from_positions(
                jnp,
                part,
                pos[:, None],
                pos[None, :],
                opts["stride"],
                c=opts["c"],
                causal=causal,
                summary_block=sub_block,
            )
            m = p if m is None else m | p
        per_head.append(m)
    valid_BHTS = jnp.stack(per_head)[None]
    extra = masks_lib.dense_mask(b, t, t, causal=False, mask=mask, segment_ids=segment_ids)
    if extra is not None:
        valid_BHTS = valid_BHTS & extra
    bias = None if score_mod is None else score_mod.dense_bias(t, t)[None]
    return numerics.attend(
        q, k, v, valid_BHTS, scale=scale, dropout_rate=drop, dropout_rng=drop_rng, bias=bias
    )


def _take_heads(x, heads):
    return x if heads is None else jnp.take(x, jnp.asarray(heads), axis=2)


def _second_half(q, k, v, ctx, *, kind, opts, causal, heads, exclude):
    """A2 on the given heads (``None`` = all), grouped by summary sub-block when distinct."""
    l = opts["stride"]
    if kind == "strided":
        return blocks.columns(q, k, v, ctx, stride=l, causal=causal, exclude_band=exclude)
    all_heads = np.arange(q.shape[2]) if heads is None else np.asarray(heads)
    groups: dict[int, list[int]] = {}
    for local, hd in enumerate(all_heads):
        sub = int(hd) % (l // opts["c"]) if opts["distinct_summaries"] else 0
        groups.setdefault(sub, []).append(local)
    outs, lses, order = [], [], []
    # The kernels take the planner's tile (opts["block_size"] is it); the plain-JAX engine a
    # larger block to amortise its loop.
    summary_block = opts["block_size"]
    if ctx.engine != "pallas":
        summary_block = max(summary_block, min(l, SUMMARY_BLOCK))
    for g, (sub, local) in enumerate(sorted(groups.items())):
        sel = None if len(groups) == 1 else local
        out, lse = blocks.summaries(
            _take_heads(q, sel),
            _take_heads(k, sel),
            _take_heads(v, sel),
            ctx.with_heads(sel),
            stride=l,
            c=opts["c"],
            sub_block=sub,
            causal=causal,
            exclude_own_block=exclude,
            block=summary_block,
            part=2 + g,
        )
        outs.append(out)
        lses.append(lse)
        order.extend(local)
    if len(outs) == 1:
        return outs[0], lses[0]
    inverse = np.argsort(np.asarray(order))
    out = _take_heads(jnp.concatenate(outs, axis=2), inverse)
    lse = jnp.take(jnp.concatenate(lses, axis=1), jnp.asarray(inverse), axis=1)
    return out, lse


def blocksparse_attention(
    q, k, v, *, kind, opts, causal, mask, segment_ids, scale, drop, drop_rng, score_mod=None
):
    """The pattern computed block-sparsely, forward and backward (see ``sparse_blocks``)."""
    b, t, h, _ = q.shape
    l, bs = opts["stride"], opts["block_size"]
    tp = -(-t // l) * l  # pad to whole blocks of l; padded keys are masked out
    key_mask = masks_lib.check_key_mask(mask, b, t)
    if key_mask is None and tp > t:
        key_mask = jnp.ones((b, t), bool)
    if key_mask is not None:
        key_mask = numerics.pad_to(jnp.broadcast_to(key_mask, (b, t)), tp, value=False)
    q_seg, kv_seg = masks_lib.split_segment_ids(segment_ids, t, t)
    if q_seg is not None:
        q_seg, kv_seg = numerics.pad_to(q_seg, tp), numerics.pad_to(kv_seg, tp)
    engine = "pallas" if opts["implementation"] == "pallas" else "jax"
    if engine == "pallas":  # the planner's tile, a power of two dividing the stride
        bs = kernel_block(l, t, q.shape[-1], v.shape[-1], q.dtype, bs)
        opts = dict(opts, block_size=bs)
    ctx = blocks.Context(
        key_mask, q_seg, kv_seg, scale, drop, drop_rng, engine=engine, score_mod=score_mod
    )
    qp, kp, vp = numerics.pad_to(q, tp), numerics.pad_to(k, tp), numerics.pad_to(v, tp)
    first = blocks.local_band if kind == "strided" else blocks.block_diagonal
    kw = dict(kind=kind, opts=opts, causal=causal)
    if opts["head_mode"] == "merged":
        part1 = first(qp, kp, vp, ctx, stride=l, block=bs, causal=causal)
        part2 = _second_half(qp, kp, vp, ctx, heads=None, exclude=True, **kw)
        out = blocks.merge([part1, part2])
    else:
        half = h // 2
        sel1, sel2 = np.arange(half), np.arange(half, h)
        a = [_take_heads(x, sel1) for x in (qp, kp, vp)]
        out1, _ = first(*a, ctx.with_heads(sel1), stride=l, block=bs, causal=causal)
        a = [_take_heads(x, sel2) for x in (qp, kp, vp)]
        out2, _ = _second_half(*a, ctx.with_heads(sel2), heads=sel2, exclude=False, **kw)
        out = jnp.concatenate([out1, out2], axis=2)
    return out[:, :t].astype(q.dtype)


def kernel_block(stride: int, t: int, d: int, dv: int, dtype, block: int) -> int:
    """The Pallas kernels' block for a pattern of stride l: the planner's tile
    (``pallas_plan.kernel_tile``) bounded by the largest power of two dividing l (the
    parts' tables need a block dividing l). Below 16 the kernels cannot tile it: the parts then
    fall back to the plain-JAX engine with ``block`` (logged)."""
    tile = pallas_plan.kernel_tile(t, t, d, dv, dtype, stride, exact=True)
    return block if tile is None else tile


def sparse_attention(
    q,
    k,
    v,
    *,
    kind: str,
    causal=False,
    mask=None,
    segment_ids=None,
    dropout_rate=0.0,
    dropout_rng=None,
    scale=None,
    score_mod=None,
    **options,
):
    """Sparse Transformer attention with the ``kind`` (``"strided"`` | ``"fixed"``) pattern.

    Args:
      q, k, v: ``[B, T, H, D]``, ``[B, T, H, D]``, ``[B, T, H, Dv]`` (self-attention).
      kind: ``"strided"`` (§4.2) or ``"fixed"`` (§4.3).
      causal, mask, segment_ids: see ``seqjax.attention.masks``; ``causal`` selects the
        paper's decoder patterns, otherwise the bidirectional variants.
      dropout_rate, dropout_rng: dropout on the attention probabilities.
      scale: logit scale, default ``1/sqrt(D)``.
      score_mod: optional positional bias (``seqjax.attention.score_mod``); honoured by
        ``masked``, ``blocksparse`` and ``pallas`` (the parts whose bias keeps its kernel
        form run in the kernels: strided's band and columns, fixed's blocks; fixed's
        gathered summaries and split heads on the plain-JAX engine, logged); ``splash``
        raises.
      **options: ``stride``, ``c``, ``block_size``, ``head_mode``, ``distinct_summaries``,
        ``implementation`` (module docstring).

    Returns:
      ``[B, T, H, Dv]`` in the dtype of ``q``.
    """
    name = f"sparse_{kind}"
    registry.check_options(name, options)
    registry.check_qkv(q, k, v)
    b, t, h, d = q.shape
    if k.shape[1] != t:
        raise ValueError(
            f"{name} is self-attention: q and k must have the same length; got {t} and "
            f"{k.shape[1]} (cross-attention is not supported; decoding "
            "steps use seqjax.decoding.pattern_cache)"
        )
    opts = resolve_options(kind, t, **options)
    if opts["head_mode"] == "split" and h % 2:
        raise ValueError(f"{name} option head_mode='split' needs an even number of heads; got {h}")
    numerics.check_dropout(dropout_rate, dropout_rng)
    scale = float(numerics.default_scale(scale, d))
    if score_mod is not None and opts["implementation"] == "splash":
        raise ValueError(
            f"{name} implementation='splash' cannot add a positional score bias "
            "(model.positional 'alibi'/'t5_bias'); use 'blocksparse' or 'masked'"
        )
    if opts["implementation"] == "auto":
        # The Pallas kernels on GPU (parts they cannot run fall back, logged); splash on
        # TPU without dropout or a bias; the plain-JAX engine elsewhere.
        backend = jax.default_backend()
        splash_ok = dropout_rate == 0.0 and score_mod is None
        kernel = {"gpu": "pallas", "tpu": "splash" if splash_ok else None}.get(backend)
        opts["implementation"] = kernel or "blocksparse"
        registry.note_auto(opts["implementation"])
    if opts["implementation"] == "splash":
        layout = patterns.head_layout(
            kind, h, opts["stride"], opts["c"], head_mode=opts["head_mode"],
            distinct_summaries=opts["distinct_summaries"],
        )  # fmt: skip
        fns = [splash.SparseHeadMask(parts, opts["stride"], opts["c"], causal, sub)
               for parts, sub in layout]  # fmt: skip
        return splash.splash_attention(
            q, k, v, head_fns=fns, causal=causal, mask=mask, segment_ids=segment_ids,
            scale=scale, dropout_rate=dropout_rate,
        )  # fmt: skip
    fn = masked_attention if opts["implementation"] == "masked" else blocksparse_attention
    return fn(
        q,
        k,
        v,
        kind=kind,
        opts=opts,
        causal=causal,
        mask=mask,
        segment_ids=segment_ids,
        scale=scale,
        drop=dropout_rate,
        drop_rng=dropout_rng,
        score_mod=score_mod,
    )


def sparse_strided(q, k, v, **kwargs):
    """``sparse_attention(kind="strided")`` (registered as ``"sparse_strided"``)."""
    return sparse_attention(q, k, v, kind="strided", **kwargs)


def sparse_fixed(q, k, v, **kwargs):
    """``sparse_attention(kind="fixed")`` (registered as ``"sparse_fixed"``)."""
    return sparse_attention(q, k, v, kind="fixed", **kwargs)


def _validator(kind: str):
    def validate(options: dict, seq_len: int) -> None:
        opts = {k: v for k, v in dict(options).items() if k in OPTIONS}
        resolve_options(kind, seq_len, **opts)

    return validate


def _fixed_period(options: dict, row_len) -> int:
    """The fixed pattern's summary columns sit at absolute multiples of its stride."""
    return int(options.get("stride") or auto_stride(row_len()))


for _fn, _kind, _doc in (
    (sparse_strided, "strided", "Sparse Transformer strided pattern (Child et al. 2019, §4.2)"),
    (sparse_fixed, "fixed", "Sparse Transformer fixed pattern (Child et al. 2019, §4.3)"),
):
    registry.register(
        registry.Mechanism(
            name=f"sparse_{_kind}",
            fn=_fn,
            options=OPTIONS,
            validate=_validator(_kind),
            doc=f"{_doc}; blocksparse | masked",
            packing_period=_fixed_period if _kind == "fixed" else None,
            stride_option="stride",
            decode_cache="pattern",
            context_parallel="ring_sparse",
        )
    )
