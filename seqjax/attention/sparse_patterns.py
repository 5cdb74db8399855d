"""Sparse Transformer connectivity patterns (Child et al. 2019, §4.2-4.3, Figure 3).

Each pattern is a union of two index sets per query position i, with stride l:

* strided (§4.2): A1(i) = {j : max(0, i - l) <= j <= i} (``"local"``) and
  A2(i) = {j <= i : (i - j) mod l = 0} (``"strided_only"``);
* fixed (§4.3): A1(i) = {j <= i : floor(j / l) = floor(i / l)} (``"block"``) and
  A2(i) = {j <= i : j mod l in {l - c, ..., l - 1}} (``"summary"``).

**c convention.** The paper prints the summary set as {l - c, ..., l}, which has c + 1
elements and includes l (never a value of ``j mod l``); OpenAI's block-sparse code uses
exactly c cells. seqjax uses **c cells: the last c positions of every block of l**
(``j mod l >= l - c``), so c = l makes the summary every position and the paper's c = 32 at
l = 128 means 32 summary positions per block. With ``summary_block = k`` the summary cells
are the k-th c-sized sub-block counted back from the end of the block,
``j mod l in [l - (k + 1) c, l - k c)``, so several heads can look at distinct sub-blocks
(§4.3: "having them attend to distinct sub-blocks of length c ... was preferable").

**Bidirectional** (``causal=False``, for encoders): A1 becomes the window |i - j| <= l
(strided) or the whole block (fixed); A2 has no ``j <= i`` restriction, so the strided
column runs both ways and the fixed summary cells come from every block, past and future.

The formulas are written once over an array module (numpy or jax.numpy), so the numpy
``pattern`` used for tables, plots and tests and the traced mask of the ``"masked"``
implementation cannot drift apart.

**BigBird** (Zaheer et al. 2020, §2, Fig. 1, App. D): ``bigbird_block_mask`` draws the block
layout of ``flex``'s ``pattern="bigbird"`` (window, global and random blocks), per head and
per layer as google-research/bigbird does.

Legend: T sequence length, H heads, nq/nk query/key blocks; ``[H, T, T]`` masks are (query,
key), True = attend; ``[H, nq, nk]`` block layouts likewise per block.
"""

from __future__ import annotations

import numpy as np

UNIONS = ("strided", "fixed")
HALVES = {"strided": ("local", "strided_only"), "fixed": ("block", "summary")}
KINDS = UNIONS + HALVES["strided"] + HALVES["fixed"]


def default_c(stride: int) -> int:
    """Summary cells per block when ``c`` is not given: l / 4 (the paper's c = 32 at l = 128)."""
    return max(1, stride // 4)


def check_pattern_args(kind: str, stride, c, *, summary_block: int = 0) -> int | None:
    """Validates pattern arguments; returns the effective ``c`` (None for strided kinds).

    Raises:
      ValueError: naming the bad argument and the valid values.
    """
    if kind not in KINDS:
        raise ValueError(f"sparse pattern kind {kind!r} is not one of {KINDS}")
    if isinstance(stride, bool) or not isinstance(stride, (int, np.integer)) or stride < 1:
        raise ValueError(f"sparse option stride must be an integer >= 1; got {stride!r}")
    uses_c = kind in ("fixed", "summary")
    if not uses_c:
        if c is not None:
            raise ValueError(
                f"sparse option c applies to the fixed pattern only; kind {kind!r} got c={c!r} "
                "(remove it)"
            )
        return None
    c = default_c(int(stride)) if c is None else c
    if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or not 1 <= c <= stride:
        raise ValueError(
            f"sparse option c (summary cells per block) must be an integer in [1, stride={stride}]"
            f"; got {c!r}"
        )
    if summary_block < 0 or (summary_block + 1) * c > stride:
        raise ValueError(
            f"summary_block={summary_block} needs (summary_block + 1) * c <= stride; "
            f"got c={c}, stride={stride} (valid: 0..{stride // c - 1})"
        )
    return int(c)


def pattern_from_positions(xp, kind, i, j, stride, *, c=None, causal=True, summary_block=0):
    """Boolean pattern for broadcastable integer query positions ``i`` and key positions ``j``.

    Args:
      xp: ``numpy`` or ``jax.numpy``.
      kind: one of ``KINDS``.
      i, j: integer arrays (e.g. ``i[:, None]``, ``j[None, :]``).
      stride: l.
      c: summary cells per block (fixed kinds; already validated).
      causal: restrict to ``j <= i``; otherwise the bidirectional variants (module doc).
      summary_block: which c-sized sub-block of each block holds the summary cells; an
        int or an integer array broadcastable against ``i`` and ``j`` (per-head patterns).

    Returns:
      bool array of the broadcast shape.
    """
    l = stride
    if kind == "strided":
        parts = ("local", "strided_only")
    elif kind == "fixed":
        parts = ("block", "summary")
    else:
        parts = (kind,)
    out = None
    for part in parts:
        if part == "local":  # §4.2 A1: the previous l positions (and i itself)
            m = (j >= i - l) & (j <= i + (0 if causal else l))
        elif part == "strided_only":  # §4.2 A2: every l-th position back
            m = (i - j) % l == 0
        elif part == "block":  # §4.3 A1: the same block of l
            m = (j // l) == (i // l)
        else:  # "summary", §4.3 A2: the last c cells (sub-block k) of every block
            r = j % l
            lo = l - (summary_block + 1) * c
            m = (r >= lo) & (r < lo + c)
        out = m if out is None else out | m
    if causal:
        out = out & (j <= i)
    shape = np.broadcast_shapes(np.shape(i), np.shape(j), np.shape(out))
    return xp.broadcast_to(out, shape)  # a bidirectional summary does not depend on i


def pattern(kind, seq_len, stride, *, c=None, causal=True, summary_block=0) -> np.ndarray:
    """The Sparse Transformer connectivity matrix (Child et al. 2019, Figure 3).

    Args:
      kind: ``"strided"`` or ``"fixed"`` (A1 ∪ A2), or one half: ``"local"`` (strided A1),
        ``"strided_only"`` (strided A2), ``"block"`` (fixed A1), ``"summary"`` (fixed A2).
      seq_len: T.
      stride: l (≈ sqrt(T) in the paper).
      c: summary cells per block for the fixed kinds (default l // 4; see the module doc
        for the c-cells convention); must be None for the strided kinds.
      causal: the paper's decoder patterns (``j <= i``); False gives the bidirectional ones.
      summary_block: the c-sized sub-block, counted back from the end of each block, that
        holds the summary cells (distinct sub-blocks per head).

    Returns:
      bool ``[seq_len, seq_len]``; entry (i, j) is True when query i may attend to key j.
    """
    c = check_pattern_args(kind, stride, c, summary_block=summary_block)
    if isinstance(seq_len, bool) or not isinstance(seq_len, (int, np.integer)) or seq_len < 1:
        raise ValueError(f"seq_len must be an integer >= 1; got {seq_len!r}")
    pos = np.arange(seq_len)
    return pattern_from_positions(
        np,
        kind,
        pos[:, None],
        pos[None, :],
        int(stride),
        c=c,
        causal=causal,
        summary_block=summary_block,
    )


def head_layout(
    kind: str, num_heads: int, stride: int, c, *, head_mode: str, distinct_summaries: bool
):
    """Which pattern every head uses: a list of ``(part kinds, summary_block)`` per head.

    ``head_mode="merged"``: every head attends to A1 ∪ A2 (§4.3 "merged head").
    ``head_mode="split"``: heads ``[0, H/2)`` attend to A1 and ``[H/2, H)`` to A2 (§4.3
    "multi-head"). With ``distinct_summaries`` (fixed only), head h takes summary sub-block
    ``h mod (l // c)``.
    """
    a1, a2 = HALVES[kind]
    layout = []
    for hd in range(num_heads):
        k = hd % (stride // c) if distinct_summaries else 0
        if head_mode == "merged":
            layout.append(((a1, a2), k))
        else:
            layout.append(((a1,), k) if hd < num_heads // 2 else ((a2,), k))
    return layout


def head_patterns(
    kind,
    seq_len,
    stride,
    num_heads,
    *,
    c=None,
    causal=True,
    head_mode="merged",
    distinct_summaries=False,
) -> np.ndarray:
    """Per-head patterns ``bool [H, T, T]`` of a mechanism configuration (numpy)."""
    c = check_pattern_args(kind, stride, c)
    out = np.zeros((num_heads, seq_len, seq_len), bool)
    layout = head_layout(
        kind, num_heads, stride, c, head_mode=head_mode, distinct_summaries=distinct_summaries
    )
    for hd, (parts, k) in enumerate(layout):
        for part in parts:
            part_c = c if part == "summary" else None
            out[hd] |= pattern(part, seq_len, stride, c=part_c, causal=causal, summary_block=k)
    return out


def check_seed(name: str, value) -> int:
    """A non-negative integer seed (``seed``, ``layer``), else a ``ValueError`` naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"flex option {name} must be an integer >= 0; got {value!r}")
    return int(value)


def bigbird_block_mask(
    nq,
    nk,
    *,
    window=1,
    num_global=1,
    num_random=1,
    seed=0,
    layer=0,
    num_heads=None,
    causal=False,
):
    """BigBird's block layout (Zaheer et al. 2020, §2, Fig. 1, App. D), laid out as
    google-research/bigbird's ``bigbird_block_rand_mask_with_head`` does:

    * a band of ``window`` blocks each side (``|i - j| <= window``; BigBird's 3 sliding
      blocks are ``window=1``);
    * ``num_global`` global blocks (rows see everything, columns are seen by every row):
      the first ``ceil(g / 2)`` and the last ``floor(g / 2)`` blocks, so BigBird-ITC's two
      global blocks are the first and the last (``num_global=2``); ``num_global=1`` is the
      first block only;
    * for every other query block, exactly ``num_random`` random key blocks drawn without
      replacement from the blocks **outside** its band and the globals (and, with
      ``causal``, before it); fewer only where fewer such blocks exist (short sequences,
      the first rows of a causal layout).

    **Per head and per layer.** The random blocks are drawn independently for every head
    (the original's ``bigbird_block_rand_mask_with_head``) from a numpy generator seeded by
    ``(seed, layer)``: the original seeds layer ``i`` with ``seed=i`` (its ``encoder.py``),
    seqjax folds the layer index into the configured ``seed`` (a model passes its layer
    index as the ``layer`` option, ``seqjax.models.layers.attention_sublayer``). The same
    arguments give the same layout every call. With ``causal`` the layout is cut to
    ``j <= i`` (BigBird itself is bidirectional; its causal use is seqjax's).

    Args:
      nq, nk: query and key blocks.
      window, num_global, num_random: the structure above (integers >= 0).
      seed, layer: integers >= 0, folded together into the generator's seed.
      num_heads: H, or None for one layout (the first head's of the same draw).
      causal: cut to ``j <= i``.

    Returns:
      bool ``[H, nq, nk]`` (``[nq, nk]`` when ``num_heads`` is None).
    """
    rng = np.random.default_rng([check_seed("seed", seed), check_seed("layer", layer)])
    qb, kb = np.arange(nq)[:, None], np.arange(nk)[None, :]
    first, last = -(-num_global // 2), num_global // 2
    global_q = (np.arange(nq) < first) | (np.arange(nq) >= nq - last)
    global_k = (np.arange(nk) < first) | (np.arange(nk) >= nk - last)
    band = np.abs(qb - kb) <= window
    fixed = band | global_q[:, None] | global_k[None, :]
    heads = 1 if num_heads is None else int(num_heads)
    layout_HQK = np.broadcast_to(fixed, (heads, nq, nk)).copy()
    for hd in range(heads):
        for i in range(nq):
            if global_q[i] or not num_random:
                continue
            outside = ~band[i] & ~global_k
            if causal:
                outside &= np.arange(nk) <= i
            candidates = np.nonzero(outside)[0]
            if candidates.size:
                pick = rng.choice(candidates, min(num_random, candidates.size), replace=False)
                layout_HQK[hd, i, pick] = True
    if causal:
        layout_HQK &= (kb <= qb)[None]
    return layout_HQK[0] if num_heads is None else layout_HQK
