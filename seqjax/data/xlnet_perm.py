"""XLNet's permutation sampler as a numpy data transform (Yang et al. 2019, §2.3 "partial
prediction" and appendix A.2; the semantics of zihangdai/xlnet ``data_utils.py``).

One example of length T is cut into two halves at ``reuse_len`` (the first is what the
next segment reuses as memory, so it must never see the second; the second sees all of the
first). In each half:

* targets: spans of whole words sampled by ``sample_mask`` (``n``-grams, ``n`` drawn with
  probability ``1/n``, about ``mask_beta`` predicted tokens per ``mask_alpha``), topped up at
  random to the goal count (``num_predict`` split between the halves);
* a factorization order: a random permutation of every ``perm_size`` consecutive positions
  (the same permutation for each chunk of the half), giving each position a rank;
* non-targets get rank -1 (visible to every position of the half, they see no target);
  functional tokens (``<sep>``, ``<cls>``) keep their rank and are never targets;
* ``perm_mask[i, j] = True`` (i may not see j) when j is a target or functional token
  whose rank is not below i's (a target does not see itself; a non-target sees only the
  non-targets; a functional token sees itself).

Returned per example: the original tokens for the content stream (``input_k``: they are not
overwritten by ``<mask>``), ``input_q`` (1.0 at targets: the query stream's positions),
``perm_mask [T, T]`` (and the same as ranks: ``perm_mask[i, j] == q_rank[i] <= k_rank[j]``,
the second half's ranks offset by T so that the first half never sees it),
``target_mapping [P, T]`` (one-hot rows in position order, zero rows
padding to ``num_predict``), ``target [P]`` and ``target_weight [P]``. Every random draw comes
from the ``numpy.random.Generator`` passed in, in the reference's order.

One deliberate difference: the reference's word-end scan tests the span's first piece
(``seg[beg]``) instead of the current one, so its spans are ``n`` pieces long whatever the
word boundaries; ``sample_mask`` tests the current piece (whole words). With every piece a
word start (``is_start_piece=None``) both are the same.

Legend: T example length, L a half's length, P ``num_predict``.
"""

from __future__ import annotations

import numpy as np


def sample_mask(
    seg_L, rng, *, goal_num_predict=None, max_gram=5, mask_alpha=6, mask_beta=1,
    is_start_piece=None, reverse=False,
):  # fmt: skip
    """Span-based target selection over one half: bool ``[L]`` (True = predict).

    ``is_start_piece(token) -> bool`` says whether a token starts a word (None: all do)."""
    seg_L = np.asarray(seg_L)
    n_tok = len(seg_L)
    if reverse:
        seg_L = seg_L[::-1]
    starts = np.ones(n_tok, bool)
    if is_start_piece is not None:
        starts = np.array([bool(is_start_piece(int(x))) for x in seg_L], bool)
    lengths = np.arange(1, max_gram + 1)
    probs = 1.0 / lengths
    probs = probs / probs.sum()
    chosen = np.zeros(n_tok, bool)
    count, pos = 0, 0
    while pos < n_tok and (goal_num_predict is None or count < goal_num_predict):
        n = int(rng.choice(lengths, p=probs))
        if goal_num_predict is not None:
            n = min(n, goal_num_predict - count)
        context = n * mask_alpha // mask_beta
        left = int(rng.choice(context))
        # the span starts at the first word start at or after pos + left ...
        later = np.flatnonzero(starts[pos + left :])
        if later.size == 0:
            break
        beg = pos + left + int(later[0])
        # ... and ends before the (n+1)-th word start after it
        nxt = np.flatnonzero(starts[beg + 1 :])
        if nxt.size < n:
            break
        end = beg + 1 + int(nxt[n - 1])
        chosen[beg:end] = True
        count += end - beg
        pos = end + context - left
    while goal_num_predict is not None and count < goal_num_predict:
        i = int(rng.integers(n_tok))
        if not chosen[i]:
            chosen[i] = True
            count += 1
    return chosen[::-1].copy() if reverse else chosen


def half_ranks(inputs_L, is_masked_L, rng, *, perm_size, functional_ids):
    """One half's factorization order: ``(key_rank [L], query_rank [L], target [L],
    ordered [L])``: ``ordered`` marks targets and functional tokens (the positions with a
    rank), ``query_rank`` is the rank a position's query compares with (+1 for
    non-targets: a functional token sees itself, a target does not)."""
    n = len(inputs_L)
    if perm_size < 1 or n % perm_size:
        raise ValueError(f"perm_size={perm_size} must be >= 1 and divide the half length {n}")
    sigma = rng.permutation(perm_size)
    rank = (np.arange(n) // perm_size) * perm_size + sigma[np.arange(n) % perm_size]
    functional = np.isin(inputs_L, np.asarray(functional_ids))
    ordered = np.asarray(is_masked_L, bool) | functional
    target = ordered & ~functional
    key_rank = np.where(ordered, rank, -1)
    query_rank = key_rank + (~target)
    return key_rank, query_rank, target, ordered


def permutation_example(
    inputs_T, is_masked_T, rng, *, reuse_len, perm_size, num_predict=None,
    functional_ids=(3, 4), targets_T=None, dense_mask=True,
):  # fmt: skip
    """The two-stream training inputs of one example (see the module docstring).

    ``targets_T``: what each position predicts (default: its own token, XLNet's PLM).
    ``functional_ids``: ``<cls>``/``<sep>`` ids (3 and 4 in XLNet's vocabulary).
    With ``num_predict`` None, ``target``/``target_weight`` are ``[T]`` and there is no
    ``target_mapping``. ``dense_mask=False`` leaves out ``perm_mask`` (``q_rank``/``k_rank``
    say the same)."""
    inputs_T = np.asarray(inputs_T)
    t = len(inputs_T)
    if not 0 < reuse_len < t:
        raise ValueError(f"reuse_len={reuse_len} must be in (0, seq_len={t})")
    if perm_size > min(reuse_len, t - reuse_len):
        raise ValueError(
            f"perm_size={perm_size} must be <= reuse_len={reuse_len} and <= seq_len - "
            f"reuse_len={t - reuse_len} (a larger one leaks across the halves)"
        )
    halves = [slice(0, reuse_len), slice(reuse_len, t)]
    parts = [
        half_ranks(inputs_T[h], np.asarray(is_masked_T)[h], rng, perm_size=perm_size,
                   functional_ids=functional_ids)
        for h in halves
    ]  # fmt: skip
    key_rank, query_rank, target, ordered = (np.concatenate(x) for x in zip(*parts))
    half = (np.arange(t) >= reuse_len).astype(int)
    targets_T = inputs_T if targets_T is None else np.asarray(targets_T)
    out = {
        "input_k": inputs_T.copy(),
        "input_q": target.astype(np.float32),
        "rank": np.where(ordered, key_rank + half * t, -1),
        # the same mask as ranks: perm_mask[i, j] == (q_rank[i] <= k_rank[j]) (offset t per half)
        "q_rank": (query_rank + half * t).astype(np.int32),
        "k_rank": (np.where(ordered, key_rank, -1) + half * t).astype(np.int32),
    }
    if dense_mask:  # ``dense_mask=False``: the ranks only (no [T, T] array)
        within = (query_rank[:, None] <= key_rank[None, :]) & ordered[None, :]
        same = half[:, None] == half[None, :]
        out["perm_mask"] = np.where(same, within, half[:, None] < half[None, :])
    if num_predict is None:
        out["target"], out["target_weight"] = targets_T.copy(), target.astype(np.float32)
        return out
    where = np.flatnonzero(target)
    if len(where) > num_predict:
        raise ValueError(f"{len(where)} targets exceed num_predict={num_predict}")
    mapping = np.zeros((num_predict, t), np.float32)
    mapping[np.arange(len(where)), where] = 1.0
    out["target_mapping"] = mapping
    out["target"] = np.zeros(num_predict, targets_T.dtype)
    out["target"][: len(where)] = targets_T[where]
    out["target_weight"] = (np.arange(num_predict) < len(where)).astype(np.float32)
    return out


def batch(inputs_BT, rng, *, reuse_len, perm_size, num_predict, mask_alpha=6, mask_beta=1,
          max_gram=5, functional_ids=(3, 4), is_start_piece=None):  # fmt: skip
    """Samples targets (``sample_mask`` per half, ``num_predict`` split as the reference
    does: the second half gets ``num_predict // 2``) and builds ``permutation_example`` for
    every row; returns the stacked arrays."""
    rows = []
    n1 = num_predict // 2
    for row in np.asarray(inputs_BT):
        kw = dict(max_gram=max_gram, mask_alpha=mask_alpha, mask_beta=mask_beta,
                  is_start_piece=is_start_piece)  # fmt: skip
        m0 = sample_mask(row[:reuse_len], rng, goal_num_predict=num_predict - n1, **kw)
        m1 = sample_mask(row[reuse_len:], rng, goal_num_predict=n1, **kw)
        rows.append(
            permutation_example(
                row, np.concatenate([m0, m1]), rng, reuse_len=reuse_len, perm_size=perm_size,
                num_predict=num_predict, functional_ids=functional_ids,
            )
        )  # fmt: skip
    return {k: np.stack([r[k] for r in rows]) for k in rows[0]}
