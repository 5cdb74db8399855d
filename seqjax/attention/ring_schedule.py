"""Static ring schedules of sparsity patterns (for ``seqjax.attention.ring_sparse``).

A pattern ``fn(q_pos, k_pos) -> bool`` at absolute positions (a ``flex`` pattern, BigBird's
block layout as ``BlockLayout``, the Sparse Transformer's per-head patterns as
``SparseHeads``, Child et al. 2019 §4.2-4.3) is evaluated once with numpy per (query
shard, key shard) pair into block tables of the engine ``seqjax.attention.blockwise``; a
``Schedule`` lists the ring steps with any non-empty pair, the devices with work at each,
and the distinct tables of each step. Placement ``contiguous`` or ``zigzag`` (Brandon et
al. 2023 §3) maps each device's local tokens to absolute positions.

Legend: T sequence length, H heads, n size of the sequence axis, r device index, Tl = T / n
local length, bs engine block, nb = Tl / bs blocks.
"""

from __future__ import annotations

import dataclasses
import functools

import jax.numpy as jnp
import numpy as np

from seqjax.attention import sparse_patterns as patterns

MECHANISMS = ("sparse_strided", "sparse_fixed", "flex", "local")
PLACEMENTS = ("auto", "contiguous", "zigzag")


def _xp(*xs):
    return np if all(isinstance(x, (np.ndarray, np.generic, int)) for x in xs) else jnp


@dataclasses.dataclass(frozen=True)
class SparseHeads:
    """The Sparse Transformer's per-head pattern (``sparse_patterns.head_layout``) as a
    hashable ``fn(q_pos, k_pos) -> bool [bq, bk]`` (``[H, bq, bk]`` when heads differ)."""

    kind: str
    stride: int
    c: int | None
    causal: bool
    head_mode: str
    distinct_summaries: bool
    num_heads: int

    def __call__(self, q, k):
        xp = _xp(q, k)
        layout = patterns.head_layout(
            self.kind, self.num_heads, self.stride, self.c, head_mode=self.head_mode,
            distinct_summaries=self.distinct_summaries,
        )  # fmt: skip

        def one(parts, sub):
            m = None
            for part in parts:
                p = patterns.pattern_from_positions(
                    xp, part, q, k, self.stride, c=self.c, causal=self.causal, summary_block=sub
                )
                m = p if m is None else m | p
            return m

        if len(set(layout)) == 1:
            return one(*layout[0])
        return xp.stack([one(parts, sub) for parts, sub in layout])


@dataclasses.dataclass(frozen=True)
class BlockLayout:
    """A block mask ``bool [nb, nb]`` (or one per head, ``[H, nb, nb]``: BigBird's per-head
    random blocks) over blocks of ``block`` absolute positions as an element pattern
    (hashable: the layout is kept as bytes); ``[H, ...]`` results when per head."""

    data: bytes
    shape: tuple[int, ...]
    block: int

    @classmethod
    def of(cls, layout, block: int) -> BlockLayout:
        layout = np.asarray(layout, bool)
        return cls(layout.tobytes(), layout.shape, int(block))

    def __call__(self, q, k):
        layout = np.frombuffer(self.data, bool).reshape(self.shape)
        xp = _xp(q, k)
        qb = xp.minimum(q // self.block, self.shape[-2] - 1)
        kb = xp.minimum(k // self.block, self.shape[-1] - 1)
        return xp.asarray(layout)[..., qb, kb]


def ring_pattern(mechanism: str, options: dict, *, t: int, num_heads: int, causal: bool):
    """``(pattern fn, engine block size)`` of a mechanism's options at length T.

    Raises:
      ValueError: naming the option (the mechanisms' own validators), or for a mechanism
        that is not one of ``MECHANISMS``.
    """
    from seqjax.attention import flex, local, sparse  # they import dense, which imports ring

    if mechanism in ("sparse_strided", "sparse_fixed"):
        kind = mechanism.split("_")[1]
        kept = {k: v for k, v in options.items() if k != "implementation"}
        opts = sparse.resolve_options(kind, t, **kept)
        if opts["head_mode"] == "split" and num_heads % 2:
            raise ValueError(
                f"{mechanism} option head_mode='split' needs an even number of heads; got "
                f"{num_heads}"
            )
        fn = SparseHeads(kind, opts["stride"], opts["c"], bool(causal), opts["head_mode"],
                         opts["distinct_summaries"], num_heads)  # fmt: skip
        return fn, opts["block_size"]
    if mechanism == "local":
        block_len = local.check_block_len(options.get("block_len", local.DEFAULT_BLOCK_LEN))
        bs = options.get("block_size") or min(block_len, 64)
        return local.BlockLocal(block_len), int(bs)
    if mechanism != "flex":
        raise ValueError(f"no ring pattern for attention {mechanism!r}; valid: {MECHANISMS}")
    flex._validate(options, t)
    bs = int(options.get("block_size", 64))
    given = [options.get(x) is not None for x in ("pattern", "mask_fn", "block_mask")]
    if sum(given) != 1:
        raise ValueError("flex attention needs exactly one of pattern, mask_fn, block_mask")
    name = options.get("pattern")
    if name == "bigbird":
        nb = -(-t // bs)
        layout = flex.bigbird_block_mask(
            nb, nb, window=options.get("window", 0), num_global=options.get("num_global", 0),
            num_random=options.get("num_random", 0), seed=options.get("seed", 0),
            layer=options.get("layer", 0), num_heads=num_heads, causal=causal,
        )  # fmt: skip
        if (layout == layout[:1]).all():
            layout = layout[0]
        return BlockLayout.of(layout, bs), bs
    if name is not None:
        keys = ("window", "dilation", "num_global", "stride", "c")
        return flex.make_pattern(name, **{k: options[k] for k in keys if k in options}), bs
    if options.get("block_mask") is not None:
        layout = np.asarray(options["block_mask"], bool)
        nb = -(-t // bs)
        if layout.shape != (nb, nb):
            raise ValueError(
                f"flex block_mask must have shape [ceil(T/block_size)] * 2 = [{nb}, {nb}]; "
                f"got {layout.shape}"
            )
        return BlockLayout.of(layout, bs), bs
    return options["mask_fn"], bs


def positions(placement: str, t: int, n: int) -> np.ndarray:
    """int ``[n, Tl]``: the absolute position of each device's local tokens."""
    tl = t // n
    if placement == "contiguous":
        return np.arange(t).reshape(n, tl)
    half = tl // 2
    r = np.arange(n)[:, None]
    lo = r * half + np.arange(half)[None, :]
    hi = (2 * n - 1 - r) * half + np.arange(half)[None, :]
    return np.concatenate([lo, hi], axis=1)


def _visible(fn, q_pos, k_pos, causal):
    """bool ``[len(q), len(k)]``: any head of the pattern (and causality) links the pair."""
    m = np.asarray(fn(q_pos[:, None], k_pos[None, :]))
    if m.ndim == 3:
        m = m.any(0)
    m = np.broadcast_to(m, (q_pos.size, k_pos.size))
    return m & (k_pos[None, :] <= q_pos[:, None]) if causal else m


@dataclasses.dataclass(frozen=True)
class Schedule:
    """The static ring schedule of a pattern.

    Attributes:
      placement: ``"contiguous"`` or ``"zigzag"``.
      pos: int ``[n, Tl]`` absolute positions of each device's tokens.
      steps: the executed ring steps (ascending; the others are skipped).
      active: per executed step, the devices with at least one non-empty block pair.
      branches: per executed step, the distinct ``(table, count)`` block tables (branch 0
        is the idle device's, no table).
      which: per executed step, int ``[n]``: each device's branch.
      pairs: int ``[n, n]``: non-empty block pairs of device r at step s (``pairs[s, r]``).
    """

    placement: str
    pos: np.ndarray
    steps: tuple[int, ...]
    active: tuple[tuple[int, ...], ...]
    branches: tuple[tuple, ...]
    which: tuple[np.ndarray, ...]
    pairs: np.ndarray

    @property
    def cost(self) -> int:
        """Block pairs on the critical path: the busiest device of every executed step."""
        return int(self.pairs.max(axis=1).sum())


@functools.lru_cache(maxsize=64)
def schedule(fn, t: int, n: int, bs: int, causal: bool, placement: str) -> Schedule:
    """The static schedule (``Schedule``) of pattern ``fn`` at length T on n devices with
    engine blocks of ``bs`` (evaluated with numpy, one query block at a time; cached)."""
    tl = t // n
    nb = -(-tl // bs)
    pos = positions(placement, t, n)
    layouts = np.zeros((n, n, nb, nb), bool)  # [s, r, query block, key block]
    for r in range(n):
        for src in range(n):
            s = (r - src) % n
            for i in range(nb):
                q_pos = pos[r, i * bs : (i + 1) * bs]
                cols = _visible(fn, q_pos, pos[src], causal).any(0)
                layouts[s, r, i] = np.pad(cols, (0, nb * bs - tl)).reshape(nb, bs).any(1)
    pairs = layouts.sum((2, 3))
    steps, active, branches, which = [], [], [], []
    for s in range(n):
        if not pairs[s].any():
            continue
        steps.append(s)
        active.append(tuple(int(r) for r in np.nonzero(pairs[s])[0]))
        keys, tables, idx = {}, [None], np.zeros((n,), np.int32)
        for r in active[-1]:
            layout = layouts[s, r]
            key = layout.tobytes()
            if key not in keys:
                count = layout.sum(1).astype(np.int32)
                table = np.zeros((nb, max(1, int(count.max()))), np.int32)
                for i in range(nb):
                    js = np.nonzero(layout[i])[0]
                    table[i, : js.size] = js
                keys[key] = len(tables)
                tables.append((table, count))
            idx[r] = keys[key]
        branches.append(tuple(tables))
        which.append(idx)
    return Schedule(placement, pos, tuple(steps), tuple(active), tuple(branches), tuple(which),
                    pairs)  # fmt: skip


def choose_schedule(fn, t, n, bs, causal, placement="auto") -> Schedule:
    """The schedule for ``placement``; ``auto``: zigzag when causal, T a multiple of 2n and
    cheaper (``Schedule.cost``, ties to contiguous), else contiguous."""
    if placement not in PLACEMENTS:
        raise ValueError(f"ring placement {placement!r} is not one of {PLACEMENTS}")
    if placement == "zigzag" and t % (2 * n):
        raise ValueError(f"ring placement 'zigzag' needs T={t} to be a multiple of 2n={2 * n}")
    if placement != "auto":
        return schedule(fn, t, n, bs, causal, placement)
    best = schedule(fn, t, n, bs, causal, "contiguous")
    if causal and t % (2 * n) == 0:
        zig = schedule(fn, t, n, bs, causal, "zigzag")
        if zig.cost < best.cost:
            best = zig
    return best
