"""Attention under any sparsity pattern: a mask function or a block mask ("flex").

A pattern is given either as

* a **mask function** ``fn(q_idx, k_idx) -> bool`` on broadcastable integer index arrays,
  written with array operators only so that it runs on numpy (to derive the block table
  once) and inside the kernels (for the partially filled blocks) — the ``mask_mod`` idea of
  PyTorch's FlexAttention; or
* a **block mask** ``bool [nq, nk]`` (which ``(query block, key block)`` pairs attend in
  full), as BigBird (Zaheer et al. 2020, §2 and App. D) defines its random blocks.

seqjax derives the key-block table (``table int32 [nq, W]``, ``count int32 [nq]``) once per
(pattern, lengths, block sizes) and runs it with the same engines as the Sparse Transformer:
the plain-JAX ``blockwise`` engine or the Pallas kernels of ``pallas_blocks``; only the
listed block pairs are computed, forward and backward. On TPUs the pattern goes to splash
attention instead (``seqjax.attention.splash``). ``implementation`` = ``auto`` (splash on
TPU without dropout, Pallas on GPU with the planner's tiles, plain JAX elsewhere),
``blocksparse``, ``pallas``, ``splash`` or ``masked`` (the dense ground truth with the
pattern as a ``[T, S]`` mask).

Named patterns (``pattern=...`` in a model config): ``sliding_window`` (``window``),
``dilated`` (``window``, ``dilation``), ``global_tokens`` (``num_global`` plus a sliding
``window``), ``bigbird`` (``window`` blocks, ``num_global`` blocks split between the first
and the last blocks, exactly ``num_random`` random blocks per row outside the band and the
globals, drawn per head and per layer from ``seed`` and ``layer``; a block layout
``[H, nq, nk]`` laid out as google-research/bigbird's, see
``sparse_patterns.bigbird_block_mask``), and the Sparse Transformer's ``strided``
(``stride``) and ``fixed`` (``stride``, ``c``) patterns of Child et al. 2019 eqs.
(§4.2-4.3) as instances. (The registered ``sparse_strided``/``sparse_fixed`` mechanisms
are faster for those two: they split the pattern into two parts whose tables are denser,
see ``sparse_blocks``.)

**Positions.** With fewer queries than keys (a KV cache, a memory) query i sits at the
absolute position ``i + S - T`` (bottom-right, as ``causal`` in ``seqjax.attention.masks``),
and patterns are evaluated there: one query after 9 earlier positions with
``sliding_window``, window 2, sees keys 7, 8, 9, the same as in the full forward pass.
BigBird's layout is drawn over the key blocks and the queries take its last rows, which
needs ``S - T`` to be a multiple of ``block_size`` (otherwise an error says so). A user
``block_mask`` is taken as given (rows = query blocks of this call).

**BigBird per head.** Heads whose random blocks differ run as one call of the engines per
head (``q[:, :, h]`` with head h's block mask, its own dropout stream ``fold_in(rng, h)``
and its slice of a score modification), so each head computes only its own blocks; a
score modification sliced to one head has no kernel form, so those calls run
``blocksparse`` where ``pallas`` was asked (logged once). ``layer`` (default 0) is folded
into ``seed``: a model passes its layer index, so every layer draws its own blocks.

**Score modifications** (``score_mod``: ALiBi, T5 bias; ``seqjax.attention.score_mod``;
RoPE rotates q and k before any mechanism) are added to the scaled logits by every engine
but splash: ``masked`` materialises the ``[H, T, S]`` bias, ``blocksparse`` computes it per
visited block (its parameters get their gradient in the custom VJP) and ``pallas`` computes
it inside the kernels from (query position, key position, head). Splash attention has no
bias input, so ``implementation="splash"`` with a score modification raises, and ``auto``
on a TPU runs ``blocksparse`` instead (logged once). The bias is evaluated at the same
absolute query positions as the pattern: ``score_mod.q_offset`` must be ``S - T``.

Legend: B batch, T query length, S key length, H heads, D head dim, bq/bk block sizes.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from seqjax.attention import blockwise, dense, pallas_blocks, pallas_plan, registry, splash
from seqjax.attention import masks as masks_lib
from seqjax.attention.sparse_patterns import bigbird_block_mask, check_seed

__all__ = ["bigbird_block_mask", "block_table", "flex_attention", "make_pattern", "Pattern"]

log = logging.getLogger(__name__)
IMPLEMENTATIONS = ("auto", "blocksparse", "pallas", "splash", "masked")
PATTERNS = ("sliding_window", "dilated", "global_tokens", "bigbird", "strided", "fixed")
OPTIONS = (
    "pattern",
    "mask_fn",
    "block_mask",
    "window",
    "dilation",
    "num_global",
    "num_random",
    "stride",
    "c",
    "seed",
    "layer",
    "block_size",
    "implementation",
)


@dataclasses.dataclass(frozen=True)
class Pattern:
    """A hashable mask function ``(q_idx, k_idx) -> bool`` (numpy or jax arrays).

    Causality is not part of a pattern: the ``causal`` option of the call adds it.
    """

    kind: str
    window: int = 0
    dilation: int = 1
    num_global: int = 0
    stride: int = 0
    c: int = 0

    def __call__(self, q, k):
        if self.kind == "sliding_window":  # |i - j| <= window
            return abs(q - k) <= self.window
        if self.kind == "dilated":  # every dilation-th key within window * dilation
            dist = abs(q - k)
            return (dist <= self.window * self.dilation) & (dist % self.dilation == 0)
        if self.kind == "global_tokens":  # the first num_global tokens see and are seen
            near = abs(q - k) <= self.window
            return near | (q < self.num_global) | (k < self.num_global)
        if self.kind == "strided":  # Child et al. §4.2: |i - j| <= l or (i - j) mod l == 0
            return (abs(q - k) <= self.stride) | ((q - k) % self.stride == 0)
        if self.kind == "fixed":  # §4.3: same block, or j in the last c cells of its block
            same = (q // self.stride) == (k // self.stride)
            return same | (k % self.stride >= self.stride - self.c)
        raise ValueError(f"unknown flex pattern {self.kind!r}; valid: {', '.join(PATTERNS)}")


def make_pattern(pattern: str, *, window=0, dilation=1, num_global=0, stride=0, c=0) -> Pattern:
    """A named ``Pattern``; raises ``ValueError`` naming the option when it is invalid."""
    if pattern not in PATTERNS or pattern == "bigbird":
        raise ValueError(f"unknown flex pattern {pattern!r}; valid: {', '.join(PATTERNS)}")
    needs = {
        "sliding_window": ("window",),
        "dilated": ("window", "dilation"),
        "global_tokens": ("window", "num_global"),
        "strided": ("stride",),
        "fixed": ("stride", "c"),
    }[pattern]
    values = dict(window=window, dilation=dilation, num_global=num_global, stride=stride, c=c)
    for name in needs:
        v = values[name]
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"flex pattern {pattern!r} needs option {name} >= 1; got {v!r}")
    if pattern == "fixed" and c > stride:
        raise ValueError(f"flex pattern 'fixed' needs 1 <= c <= stride; got c={c}, stride={stride}")
    return Pattern(pattern, **values)


@functools.lru_cache(maxsize=128)
def block_table(mask_fn: Callable | None, block_mask_key, t, s, bq, bk, causal, offset):
    """``(table, count, pairs)`` of the blocks holding at least one visible (q, k) pair.

    ``block_mask_key`` is ``(bytes, shape)`` of a block mask (hashable) or None. Evaluated
    in strips of query blocks with numpy, once per argument set (cached).
    """
    nq, nk = -(-t // bq), -(-s // bk)
    if block_mask_key is not None:
        data, shape = block_mask_key
        layout = np.frombuffer(data, bool).reshape(shape).copy()
    else:
        layout = np.zeros((nq, nk), bool)
        k_idx = np.arange(s)[None, :]
        for i in range(nq):
            q_idx = np.arange(i * bq, min(t, (i + 1) * bq))[:, None]
            visible = np.broadcast_to(mask_fn(q_idx, k_idx), (q_idx.shape[0], s))
            if causal:
                visible = visible & (k_idx <= q_idx + offset)
            cols = visible.any(0)
            layout[i] = np.pad(cols, (0, nk * bk - s)).reshape(nk, bk).any(1)
    count = layout.sum(1).astype(np.int32)
    width = max(1, int(count.max()))
    table = np.zeros((nq, width), np.int32)
    for i in range(nq):
        js = np.nonzero(layout[i])[0]
        table[i, : js.size] = js
    return table, count, int(count.sum())


def _block_mask_fn(layout: np.ndarray, bq: int, bk: int):
    """Element mask of a block mask (used only by the ``masked`` ground truth)."""
    layout_j = jnp.asarray(layout)

    def fn(q, k):
        return layout_j[q // bq, k // bk]

    return fn


def flex_attention(
    q,
    k,
    v,
    *,
    causal=False,
    mask=None,
    segment_ids=None,
    dropout_rate=0.0,
    dropout_rng=None,
    scale=None,
    pattern=None,
    mask_fn=None,
    block_mask=None,
    window=0,
    dilation=1,
    num_global=0,
    num_random=0,
    stride=0,
    c=0,
    seed=0,
    layer=0,
    block_size=64,
    implementation="auto",
    score_mod=None,
):
    """Attention restricted to a pattern (module docstring), registered as ``"flex"``.

    Args:
      q, k, v: ``[B, T, H, D]``, ``[B, S, H, D]``, ``[B, S, H, Dv]``.
      causal, mask, segment_ids, dropout_rate, dropout_rng, scale: the common options.
      pattern: a name of ``PATTERNS`` with its options, or None with ``mask_fn`` or
        ``block_mask`` given.
      mask_fn: ``fn(q_idx, k_idx) -> bool`` (hashable: a module-level function or a
        ``Pattern``); block_mask: ``bool [ceil(T/bs), ceil(S/bs)]`` numpy array.
      seed, layer: BigBird's random blocks are drawn per head from ``(seed, layer)``.
      block_size: query and key block size of the engines (a power of two >= 16 for the
        Pallas kernels).
      implementation: one of ``IMPLEMENTATIONS``.
      score_mod: optional positional bias (``seqjax.attention.score_mod.ScoreMod``) at
        absolute positions, its ``q_offset`` equal to ``S - T`` (module docstring).

    Returns:
      ``[B, T, H, Dv]`` in the dtype of ``q``.
    """
    registry.check_qkv(q, k, v)
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(
            f"flex option implementation={implementation!r} is not one of {IMPLEMENTATIONS}"
        )
    given = [x is not None for x in (pattern, mask_fn, block_mask)]
    if sum(given) != 1:
        raise ValueError("flex attention needs exactly one of pattern, mask_fn, block_mask")
    b, t, _, d = q.shape
    s = k.shape[1]
    bs = int(block_size)
    nq, nk = -(-t // bs), -(-s // bs)
    offset = masks_lib.causal_offset(t, s)
    if score_mod is not None:
        implementation = _score_mod_implementation(implementation, score_mod, offset)
    if pattern == "bigbird":
        # The layout of the whole (key) sequence; the queries are its last T positions.
        if offset < 0 or offset % bs:
            raise ValueError(
                f"flex pattern 'bigbird' with {t} queries and {s} keys needs the queries to "
                f"start on a block boundary (S - T = {s - t} a non-negative multiple of "
                f"block_size={bs}); valid: T == S, or S - T in multiples of block_size"
            )
        layout_HQK = bigbird_block_mask(
            nk, nk, window=window, num_global=num_global, num_random=num_random, seed=seed,
            layer=layer, num_heads=q.shape[2], causal=causal,
        )[:, offset // bs :]  # fmt: skip
        if (layout_HQK != layout_HQK[:1]).any():
            return _per_head(
                q, k, v, layout_HQK, block_size=bs, implementation=implementation,
                dropout_rate=dropout_rate, dropout_rng=dropout_rng, score_mod=score_mod,
                causal=causal, mask=mask, segment_ids=segment_ids, scale=scale,
            )  # fmt: skip
        block_mask = layout_HQK[0]
    elif pattern is not None:
        mask_fn = make_pattern(
            pattern, window=window, dilation=dilation, num_global=num_global, stride=stride, c=c
        )
    splash_fn = mask_fn  # splash shifts to absolute positions itself
    # Patterns at absolute (bottom-right aligned) query positions, like causality: one
    # query after S - 1 keys is at position S - 1 (seqjax.attention.masks).
    mask_fn = masks_lib.at_absolute(mask_fn, t, s)
    key = None
    if block_mask is not None:
        block_mask = np.asarray(block_mask, bool)
        if block_mask.shape != (nq, nk):
            raise ValueError(
                f"flex block_mask must have shape [ceil(T/block_size), ceil(S/block_size)] = "
                f"[{nq}, {nk}]; got {block_mask.shape}"
            )
        key = (block_mask.tobytes(), block_mask.shape)
        elem_fn = None
    else:

        def elem_fn(q_pos, k_pos):  # the engines pass 1-D positions of a block
            return mask_fn(q_pos[:, None], k_pos[None, :])

    common = dict(causal=causal, mask=mask, segment_ids=segment_ids, scale=scale)
    if implementation == "masked":
        fn = mask_fn if block_mask is None else _block_mask_fn(block_mask, bs, bs)
        pattern_TS = fn(jnp.arange(t)[:, None], jnp.arange(s)[None, :])
        extra = masks_lib.dense_mask(b, t, s, causal=causal, mask=mask, segment_ids=segment_ids)
        valid = pattern_TS[None, None] if extra is None else extra & pattern_TS[None, None]
        bias = None if score_mod is None else score_mod.dense_bias(t, s)[None]
        return dense.masked_attention(
            q, k, v, valid, scale=scale, dropout_rate=dropout_rate, dropout_rng=dropout_rng,
            bias=bias,
        )  # fmt: skip
    backend = jax.default_backend()
    if implementation == "splash" or (
        implementation == "auto" and backend == "tpu" and dropout_rate == 0.0 and key is None
    ):
        if key is not None:
            raise ValueError(
                "flex implementation 'splash' takes a pattern or mask_fn, not a block_mask"
            )
        if implementation == "auto":
            registry.note_auto("splash")
        return splash.splash_attention(
            q, k, v, head_fns=splash_fn, dropout_rate=dropout_rate, **common
        )
    engine = blockwise.blockwise_attention
    if implementation == "pallas" or (implementation == "auto" and backend == "gpu"):
        tile, why = _kernel_tile(q, k, v, bs, key, dropout_rate, score_mod)
        if why is None:
            engine = pallas_blocks.block_sparse_attention
            if key is not None and tile != bs:
                fine = pallas_plan.refine_layout(block_mask, bs, tile, t, s)
                key = (fine.tobytes(), fine.shape)
            bs = tile
        elif implementation == "pallas":
            raise ValueError(f"flex implementation='pallas': {why}")
        else:
            _log_kernel_fallback(why)
    if implementation == "auto":
        registry.note_auto(
            "pallas" if engine is not blockwise.blockwise_attention else "blocksparse"
        )
    table, count, _ = block_table(mask_fn if key is None else None, key, t, s, bs, bs, causal,
                                  offset)  # fmt: skip
    if score_mod is not None:
        common["score_mod"] = score_mod
    return engine(
        q, k, v, table=table, count=count, block_q=bs, block_k=bs, mask_fn=elem_fn,
        dropout_rate=dropout_rate, dropout_rng=dropout_rng, **common,
    )  # fmt: skip


def _per_head(q, k, v, layout_HQK, *, implementation, dropout_rng, score_mod, **common):
    """Attention with one block layout per head (``layout_HQK bool [H, nq, nk]``, BigBird's
    per-head random blocks) as one ``flex_attention`` call per head on ``[B, T, 1, D]``.

    Head h gets the dropout stream ``fold_in(dropout_rng, h)`` and ``score_mod`` restricted
    to its head (``ScoreMod.remap(heads=[h])``, which has no kernel form: ``pallas`` then
    runs ``blocksparse``, logged once). Returns ``[B, T, H, Dv]``.
    """
    if score_mod is not None and implementation == "pallas":
        _log_auto_choice("a score modification of one head (BigBird per head) has no kernel form")
        implementation = "blocksparse"
    outs = []
    for hd in range(layout_HQK.shape[0]):
        one = slice(hd, hd + 1)
        outs.append(
            flex_attention(
                q[:, :, one],
                k[:, :, one],
                v[:, :, one],
                block_mask=layout_HQK[hd],
                implementation=implementation,
                dropout_rng=None if dropout_rng is None else jax.random.fold_in(dropout_rng, hd),
                score_mod=None if score_mod is None else score_mod.remap(heads=[hd]),
                **common,
            )  # fmt: skip
        )
    return jnp.concatenate(outs, axis=2)


def _kernel_tile(q, k, v, bs: int, key, dropout_rate: float, score_mod):
    """``(tile, why)``: the Pallas kernels' tile for block size ``bs`` (the planner's,
    ``pallas_plan.kernel_tile``; a power of two dividing ``bs`` for a block mask), or why
    the kernels cannot run this call."""
    t, s = q.shape[1], k.shape[1]
    tile = pallas_plan.kernel_tile(
        t, s, q.shape[-1], v.shape[-1], q.dtype, bs, exact=key is not None,
        learned_bias=pallas_blocks.learned_bias(score_mod),
    )  # fmt: skip
    if tile is None:
        return bs, (
            f"block_size={bs} has no power-of-two tile >= 16 (for a block_mask: dividing it) "
            f"or head dims {q.shape[-1]}/{v.shape[-1]} exceed {pallas_plan.MAX_HEAD_DIM}"
        )
    why = pallas_blocks.supported(
        q, k, v, block_q=tile, block_k=tile, table=np.zeros((2, 1)), dropout_rate=dropout_rate,
        score_mod=score_mod,
    )  # fmt: skip
    return tile, why


@functools.lru_cache(maxsize=8)
def _log_kernel_fallback(why: str) -> None:
    log.warning("flex 'auto' on GPU runs the plain-JAX block-sparse engine: %s", why)


def _score_mod_implementation(implementation: str, score_mod, offset: int) -> str:
    """The implementation that adds ``score_mod``: splash has no bias input (raises;
    ``auto`` on TPU becomes ``blocksparse``), nor do the Pallas kernels for a bias without
    a kernel form (``auto`` on GPU becomes ``blocksparse``). Raises when a concrete
    ``score_mod.q_offset`` is not the patterns' ``S - T``."""
    q_offset = score_mod.q_offset
    if isinstance(q_offset, (int, np.integer)) and int(q_offset) != offset:
        raise ValueError(
            f"flex evaluates its pattern at absolute query positions S - T + i = {offset} + i; "
            f"the score_mod's q_offset={int(q_offset)} must equal S - T = {offset}"
        )
    if implementation == "splash":
        raise ValueError(
            "flex implementation='splash' cannot add a positional score bias "
            "(model.positional 'alibi'/'t5_bias'): splash attention has no bias input; use "
            "implementation 'auto', 'blocksparse', 'pallas' or 'masked'"
        )
    if implementation != "auto":
        return implementation
    backend = jax.default_backend()
    if backend == "tpu":
        _log_auto_choice("splash attention has no bias input")
        return "blocksparse"
    if backend == "gpu" and score_mod.form is None:
        _log_auto_choice("the Pallas kernels compute only the ALiBi and T5 biases")
        return "blocksparse"
    return implementation


@functools.lru_cache(maxsize=8)
def _log_auto_choice(why: str) -> None:
    log.info("flex 'auto' with a score modification runs 'blocksparse': %s", why)


def _validate(options: dict, seq_len: int) -> None:
    """Config-time check of the options (called before anything compiles)."""
    impl = options.get("implementation", "auto")
    if impl not in IMPLEMENTATIONS:
        raise ValueError(f"flex option implementation={impl!r} is not one of {IMPLEMENTATIONS}")
    pattern = options.get("pattern")
    if pattern is None and options.get("mask_fn") is None and options.get("block_mask") is None:
        raise ValueError(f"flex needs option pattern (one of {', '.join(PATTERNS)})")
    if pattern is not None and pattern != "bigbird":
        keys = ("window", "dilation", "num_global", "stride", "c")
        make_pattern(pattern, **{k: options[k] for k in keys if k in options})
    elif pattern == "bigbird":
        for name in ("window", "num_global", "num_random"):
            v = options.get(name, 0)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"flex pattern 'bigbird' option {name} must be >= 0; got {v!r}")
        check_seed("seed", options.get("seed", 0))
        check_seed("layer", options.get("layer", 0))
    bs = options.get("block_size", 64)
    if isinstance(bs, bool) or not isinstance(bs, (int, np.integer)) or bs < 1:
        raise ValueError(f"flex option block_size must be a positive integer; got {bs!r}")


# The named patterns one-token decoding keeps in ring buffers / summary stores
# (``seqjax.decoding.pattern_cache``; bigbird's random blocks and a mask function have none).
CACHED_PATTERNS = ("sliding_window", "dilated", "global_tokens", "strided", "fixed")


def _decode_cache(options: dict | None) -> str | None:
    if options is None:
        return "pattern"
    if options.get("mask_fn") is not None or options.get("block_mask") is not None:
        return None
    return "pattern" if options.get("pattern") in CACHED_PATTERNS else None


def _packing(options: dict) -> str | None:
    """Packed examples would see another pattern where it is tied to absolute positions."""
    if options.get("pattern") in (None, "bigbird", "global_tokens"):
        what = options.get("pattern") or "a mask_fn/block_mask"
        return (f"flex {what!r} (its pattern is tied to absolute positions of the row, so a "
                "packed example would see another pattern)")  # fmt: skip
    return None


registry.register(
    registry.Mechanism(
        name="flex",
        fn=flex_attention,
        options=OPTIONS,
        validate=_validate,
        doc="any pattern: mask function or block mask on the block-sparse engines "
        "(sliding_window, dilated, global_tokens, bigbird, strided, fixed)",
        packing=_packing,
        packing_period=lambda options, row_len: (
            int(options.get("stride", 1)) if options.get("pattern") == "fixed" else 1
        ),
        decode_cache=_decode_cache,
        context_parallel="ring_sparse",
        kernels=(("gpu", ("pallas",)), ("tpu", ("splash",))),
    )
)
