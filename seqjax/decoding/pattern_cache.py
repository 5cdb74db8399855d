"""Decoding caches for windowed and sparse causal attention: ring buffers and summary stores.

While decoding, the query of position i (the decode index) attends to the keys its pattern
allows among the positions ``<= i``. Its own key and value come with the call; the earlier
ones come from *buffers* whose slots hold known absolute positions, so every pattern, the
causal mask and the score modifications (ALiBi, T5 bias: ``seqjax.attention.score_mod``,
evaluated at ``(i, position)``; RoPE keys enter the buffers already rotated at their
position) are evaluated exactly as in the full forward pass. One query per call.

Layouts (``W`` slots per buffer, ``[B, W, H, D]`` keys and values each; L the model's
``max_len``; a ring's slot ``s`` holds the newest position ``p < i`` with ``p mod W = s``):

=====================================  ===========================================  ==========
pattern                                buffers                                      memory
=====================================  ===========================================  ==========
flex ``sliding_window`` (|i-j| <= w)   ring of the w previous positions             O(w)
flex ``dilated`` (w, dilation d)       ring of w d                                  O(w d)
``local`` (LRA blocks of b)            ring of b - 1 (the current block)            O(b)
flex ``global_tokens`` (w, g)          g sink slots + ring of w                     O(g + w)
Sparse Transformer fixed (l, c)        ring of l - 1 + summary store ceil(L/l) c_u  O(l + cL/l)
Sparse Transformer strided (l)         every position (a KV cache), l + L/l read    O(L)
=====================================  ===========================================  ==========

* **Fixed** (``sparse_fixed``, flex ``fixed``; Child et al. 2019, §4.3): the current block
  is a ring of l - 1 (positions of the previous block are dropped from it: they are in the
  store when they are summary cells, and invisible otherwise); the summary store keeps only
  the summary cells of every block, ``c_u`` per block (the union of the heads' cells: c,
  or up to l with ``distinct_summaries``). Memory O(l + c_u L / l) instead of O(L).
* **Strided** (``sparse_strided``, flex ``strided``; §4.2): position i attends to the l
  previous positions and to the column ``{i - m l}``. As i advances the column runs through
  every residue class, so every position is read again later and all keys/values are kept
  (the memory of a KV cache, O(L)); each step *gathers* exactly the ``l`` local and
  ``floor((L - 1) / l) - 1`` column positions, so the work per token is O(l + L/l) instead
  of O(L) (and O(L (l + L/l)) for the full forward that recomputation runs per token).
* Per-head patterns (``head_mode="split"``, ``distinct_summaries``) are evaluated per head
  on the gathered positions (``sparse_patterns.pattern_from_positions``).

Patterns without a cache here (they decode by recomputing the prefix): flex ``bigbird``
(random blocks), a user ``mask_fn`` / ``block_mask`` (no structure to exploit), and every
bidirectional pattern.

Legend: B batch, H heads, D head dim (Dv of the values), W buffer slots, N keys read per
step, L the model's max_len, l stride, c summary cells per block.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from seqjax.attention import flex, local, numerics
from seqjax.attention import registry as attention_registry
from seqjax.attention import sparse as sparse_lib
from seqjax.attention import sparse_patterns as patterns

# The flex patterns with a cache here (flex declares them: ``flex.CACHED_PATTERNS``).
FLEX_PATTERNS = flex.CACHED_PATTERNS
# Buffers whose slot for position i is never read at step i with an older position (the
# strided store: slot = position; the summary store: the current block is masked there).
STORES = ("store", "summary", "sink")


@dataclasses.dataclass(frozen=True)
class Plan:
    """How one layer's cache is laid out and read (module docstring).

    Attributes:
      description: one line for logs and reports (layout and memory).
      sizes: ``((buffer name, slots W), ...)``.
      read: ``i -> ((slots_N | None, pos_N), ...)`` per buffer: the slots read at step i
        (None: all of them) and the absolute position each holds (-1: empty or dropped).
      write: ``i -> ((slot, ok), ...)`` per buffer: where position i is stored (if ``ok``).
      visible: ``(i, pos_N) -> bool [H, N]``: the per-head pattern at absolute positions.
      scale: the mechanism's logit scale option (None: 1/sqrt(D)).
      write_first: per buffer, whether position i may be written before the step reads
        (its slot evicts nothing this step reads: the stores, not the rings). Writing
        first lets XLA update a large buffer in place instead of copying it to keep the
        old one readable (for the strided store at 8K: the difference between O(L) and
        O(l + L/l) memory traffic per token).
    """

    description: str
    sizes: tuple
    read: Callable
    write: Callable
    visible: Callable
    scale: float | None = None
    write_first: tuple = ()


def supports(mechanism: str, options: dict | None = None) -> bool:
    """Whether causal ``mechanism`` with ``options`` has a cache here (``options=None``:
    whether some configuration of it does, e.g. any ``flex`` named pattern but bigbird), as
    the mechanism declares it (``Mechanism.decode_cache="pattern"``)."""
    if attention_registry.find(mechanism) is None:
        return False
    return attention_registry.decode_cache(mechanism, options) == "pattern"


def _ring(size: int, keep: Callable | None = None):
    """A ring of ``size`` slots: ``(read, write)`` closures (positions by formula)."""
    slots = jnp.arange(size)

    def read(i):
        pos = (i - 1) - jnp.mod(i - 1 - slots, size)  # newest p < i with p = s mod size
        ok = pos >= 0
        if keep is not None:
            ok = ok & keep(i, pos)
        return None, jnp.where(ok, pos, -1)

    def write(i):
        return jnp.mod(i, size), jnp.asarray(True)

    return read, write


def _same_for_heads(mask_fn, num_heads: int):
    def visible(i, pos):
        return jnp.broadcast_to(mask_fn(i, pos), (num_heads, pos.shape[0]))

    return visible


def _sparse_visible(layout, stride: int, c):
    """Per-head Sparse Transformer patterns (``head_layout``) at absolute positions."""

    def visible(i, pos):
        rows = []
        for parts, sub in layout:
            m = None
            for part in parts:
                p = patterns.pattern_from_positions(
                    jnp, part, i, pos, stride, c=c, causal=True, summary_block=sub
                )
                m = p if m is None else m | p
            rows.append(m)
        return jnp.stack(rows)

    return visible


def _fixed_buffers(stride: int, cells: np.ndarray, length: int):
    """Ring of the current block + store of every block's summary cells (sorted ``cells``,
    residues mod ``stride``)."""
    cu, nb = len(cells), -(-length // stride)
    rank = np.full((stride,), -1, np.int32)
    rank[cells] = np.arange(cu)
    rank_l = jnp.asarray(rank)
    store_pos = jnp.asarray((np.arange(nb)[:, None] * stride + cells[None, :]).reshape(-1))
    ring_read, ring_write = _ring(stride - 1, keep=lambda i, p: p >= (i // stride) * stride)

    def store_read(i):
        return None, jnp.where(store_pos < (i // stride) * stride, store_pos, -1)

    def store_write(i):
        r = rank_l[jnp.mod(i, stride)]
        return (i // stride) * cu + jnp.maximum(r, 0), r >= 0

    buffers = [("summary", nb * cu, store_read, store_write)]
    if stride > 1:
        buffers.insert(0, ("block", stride - 1, ring_read, ring_write))
    return buffers, f"ring of {stride - 1} + summary store of {nb} x {cu}: O(l + c L / l)"


def _strided_buffers(stride: int, length: int):
    """Every position (slot = position); step i gathers the ``stride`` previous positions
    and the column ``i - m stride``, m >= 2."""
    n_col = max(0, (length - 1) // stride - 1)
    offsets = np.concatenate([np.arange(1, stride + 1), stride * np.arange(2, 2 + n_col)]).astype(
        np.int32
    )
    offsets_n = jnp.asarray(offsets)

    def read(i):
        pos = i - offsets_n
        return jnp.clip(pos, 0, length - 1), jnp.where(pos >= 0, pos, -1)

    def write(i):
        return jnp.minimum(i, length - 1), jnp.asarray(True)

    desc = f"all {length} positions, {len(offsets)} gathered per step: O(L) memory, O(l + L/l) work"
    return [("store", length, read, write)], desc


def _needs_length(mechanism, length):
    if length is None or length < 1:
        raise ValueError(
            f"the {mechanism!r} decoding cache needs the model's max_len (MultiHeadAttention."
            f"max_len, set by the models); got {length!r}"
        )


def make_plan(mechanism: str, options, num_heads: int, length: int | None) -> Plan:
    """The cache plan of causal ``mechanism`` with ``options`` (module docstring).

    Args:
      mechanism: ``"flex"``, ``"local"``, ``"sparse_strided"`` or ``"sparse_fixed"``.
      options: the mechanism's options (a mapping).
      num_heads: H.
      length: L, the model's max_len (the strided store, the fixed summary store and the
        Sparse Transformer's default stride depend on it).

    Raises:
      ValueError: a configuration without a cache (``supports`` is False), or bad options.
    """
    options = dict(options or {})
    scale = options.get("scale")
    if not supports(mechanism, options):
        raise ValueError(
            f"attention {mechanism!r} with options {sorted(options)} has no decoding cache; "
            f"cached: local, sparse_strided, sparse_fixed and flex pattern in {FLEX_PATTERNS}"
        )
    if mechanism == "local":
        block = local.check_block_len(options.get("block_len", local.DEFAULT_BLOCK_LEN))
        read, write = _ring(block - 1) if block > 1 else (None, None)
        buffers = [("block", block - 1, read, write)] if block > 1 else []
        visible = _same_for_heads(local.BlockLocal(block), num_heads)
        desc = f"local: ring of {block - 1} (the current block): O(block_len)"
    elif mechanism == "flex":
        keys = ("window", "dilation", "num_global", "stride", "c")
        pattern = flex.make_pattern(
            options["pattern"], **{k: options[k] for k in keys if k in options}
        )
        visible = _same_for_heads(pattern, num_heads)
        kind = pattern.kind
        if kind in ("sliding_window", "dilated"):
            size = pattern.window * (pattern.dilation if kind == "dilated" else 1)
            buffers = [("window", size, *_ring(size))]
            desc = f"flex {kind}: ring of {size}: O(window)"
        elif kind == "global_tokens":
            g = pattern.num_global
            sink_pos = jnp.arange(g)

            def sink_read(i):
                return None, jnp.where(sink_pos < i, sink_pos, -1)

            def sink_write(i):
                return jnp.minimum(i, g - 1), i < g

            ring = _ring(pattern.window, keep=lambda i, p: p >= g)
            buffers = [("sink", g, sink_read, sink_write), ("window", pattern.window, *ring)]
            desc = f"flex global_tokens: {g} sink slots + ring of {pattern.window}"
        else:
            _needs_length(mechanism, length)
            if kind == "fixed":
                cells = np.arange(pattern.stride - pattern.c, pattern.stride)
                buffers, desc = _fixed_buffers(pattern.stride, cells, length)
            else:
                buffers, desc = _strided_buffers(pattern.stride, length)
            desc = f"flex {kind}: {desc}"
    else:
        _needs_length(mechanism, length)
        kind = mechanism.removeprefix("sparse_")
        opts = {k: v for k, v in options.items() if k in sparse_lib.OPTIONS}
        opts = sparse_lib.resolve_options(kind, length, **opts)
        l, c = opts["stride"], opts["c"]
        if opts["head_mode"] == "split" and num_heads % 2:
            raise ValueError(
                f"{mechanism} option head_mode='split' needs an even number of heads; got "
                f"{num_heads}"
            )
        layout = patterns.head_layout(
            kind, num_heads, l, c, head_mode=opts["head_mode"],
            distinct_summaries=opts["distinct_summaries"],
        )  # fmt: skip
        visible = _sparse_visible(layout, l, c)
        if kind == "fixed":
            cells = set()
            for parts, sub in layout:
                if "summary" in parts:
                    lo = l - (sub + 1) * c
                    cells.update(range(lo, lo + c))
            cells = np.asarray(sorted(cells), np.int64)
            buffers, desc = _fixed_buffers(l, cells, length)
        else:
            buffers, desc = _strided_buffers(l, length)
        desc = f"{mechanism} (stride {l}): {desc}"
    return Plan(
        description=desc,
        sizes=tuple((name, size) for name, size, _, _ in buffers),
        read=lambda i: tuple(r(i) for _, _, r, _ in buffers),
        write=lambda i: tuple(w(i) for _, _, _, w in buffers),
        visible=visible,
        scale=scale,
        write_first=tuple(name in STORES for name, _, _, _ in buffers),
    )


def init_buffers(plan: Plan, batch: int, num_heads: int, head_dim: int, value_dim: int, dtype):
    """Zero buffers ``{name: (keys [B, W, H, D], values [B, W, H, Dv])}``."""
    return {
        name: (
            jnp.zeros((batch, size, num_heads, head_dim), dtype),
            jnp.zeros((batch, size, num_heads, value_dim), dtype),
        )
        for name, size in plan.sizes
    }


def step(plan: Plan, buffers: dict, q_B1HD, k_B1HD, v_B1HD, i, *, score_mod=None):
    """One decoding step at position ``i`` (a traced int32 scalar).

    Args:
      plan: the layer's ``Plan``.
      buffers: ``{name: (keys, values)}`` holding positions ``< i`` (``init_buffers``).
      q_B1HD, k_B1HD, v_B1HD: the new position's query, key and value.
      i: its absolute position.
      score_mod: optional ``seqjax.attention.score_mod.ScoreMod``; its bias is taken at
        ``(i, key position)``.

    Returns:
      ``(out [B, 1, H, Dv] in q's dtype, new buffers)``.
    """
    if q_B1HD.shape[1] != 1:
        raise ValueError(f"decoding with a cache feeds one token per call; got {q_B1HD.shape[1]}")
    i = jnp.asarray(i, jnp.int32)
    new = dict(buffers)
    writes = plan.write(i)
    first = plan.write_first or (False,) * len(plan.sizes)
    for (name, _), (slot, ok), early in zip(plan.sizes, writes, first, strict=True):
        if early:
            kb, vb = buffers[name]
            new[name] = (_write(kb, k_B1HD, slot, ok), _write(vb, v_B1HD, slot, ok))
    keys, values, positions = [k_B1HD], [v_B1HD], [i[None]]
    for (name, _), (slots, pos) in zip(plan.sizes, plan.read(i), strict=True):
        kb, vb = new[name]
        if slots is not None:
            kb, vb = jnp.take(kb, slots, axis=1), jnp.take(vb, slots, axis=1)
        keys.append(kb.astype(k_B1HD.dtype))
        values.append(vb.astype(v_B1HD.dtype))
        positions.append(pos.astype(jnp.int32))
    k_BNHD, v_BNHD = jnp.concatenate(keys, 1), jnp.concatenate(values, 1)
    pos_N = jnp.concatenate(positions)
    valid_HN = plan.visible(i, pos_N) & ((pos_N >= 0) & (pos_N <= i))[None, :]
    bias = None
    if score_mod is not None:
        bias = score_mod.bias(score_mod.params, i[None], pos_N)[None]  # [1, H, 1, N]
    out = numerics.attend(
        q_B1HD, k_BNHD, v_BNHD, valid_HN[None, :, None, :], scale=plan.scale, bias=bias
    )
    for (name, _), (slot, ok), early in zip(plan.sizes, writes, first, strict=True):
        if not early:  # rings: the slot still holds a position this step reads
            kb, vb = buffers[name]
            new[name] = (_write(kb, k_B1HD, slot, ok), _write(vb, v_B1HD, slot, ok))
    return out, new


def _write(buf_BWHD, x_B1HD, slot, ok):
    """``buf[:, slot] = x`` when ``ok`` (else unchanged), touching one slot only."""
    old = jax.lax.dynamic_slice_in_dim(buf_BWHD, slot, 1, axis=1)
    return jax.lax.dynamic_update_slice_in_dim(
        buf_BWHD, jnp.where(ok, x_B1HD.astype(buf_BWHD.dtype), old), slot, axis=1
    )
