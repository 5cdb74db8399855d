"""Beam search with the GNMT length penalty, batched and jittable (one ``lax.while_loop``).

Each example keeps K live hypotheses (prefixes without EOS) and up to K finished ones.
A step feeds the last token of every live beam to ``step_fn`` (``interface``), scores the
K * V one-token extensions by total log-probability (float32 ``log_softmax``) and takes the
2K best. Among the K best of those, an extension that ends in EOS, or that reaches
``max_len``, is finished: its score is the length-penalised log-probability

    s(Y) = log P(Y | X) / lp(Y),    lp(Y) = ((5 + |Y|) / 6) ** alpha

(Wu et al. 2016, eq. 14 without the coverage term; Vaswani et al. 2017, §6.1, decode with
K = 4 and alpha = 0.6), with ``|Y|`` the number of generated tokens, EOS included. The
finished set is the K best by score seen so far. The K best extensions that do not end in
EOS are the new live beams (the cache rows are reordered to follow them); a finished
hypothesis never grows again.

An example is done when no live beam can beat its worst kept finished hypothesis: log
P only falls as a hypothesis grows and lp is largest at ``max_len``, so ``max(live log P)
/ lp(max_len)`` bounds every score still to come (with alpha = 0 this is the live log P
itself). The loop ends when every example is done, or at ``max_len``, where every live
beam in the top K is finished as it stands (a truncated hypothesis, scored with
``|Y| = max_len``). A done example's finished set is frozen, so an example decoded in a
batch gives what it gives alone.

With K = 1 and alpha = 0 this is greedy decoding (same tokens, same score): only the
best extension may finish, and a finished greedy hypothesis beats every live one.

Legend: B batch, K beams, N = B * K rows, V vocabulary, T max_len, C = 2K candidates.
"""

from __future__ import annotations

import math
import numbers

import jax
import jax.numpy as jnp

from seqjax.decoding import interface
from seqjax.decoding.interface import expand_to_beams, length_penalty

__all__ = ["beam_search", "check_beam", "expand_to_beams", "length_penalty"]


def check_beam(beam_size, alpha) -> None:
    """Raises ``ValueError`` unless ``beam_size`` is an integer >= 1 and ``alpha`` a finite
    number >= 0 (checked in Python, before anything compiles)."""
    if isinstance(beam_size, bool) or not isinstance(beam_size, numbers.Integral) or beam_size < 1:
        raise ValueError(
            f"beam_size (--beam_size) = {beam_size!r} must be an integer >= 1 "
            "(1 = greedy-like search; Vaswani et al. 2017 use 4)"
        )
    if (
        isinstance(alpha, bool)
        or not isinstance(alpha, numbers.Real)
        or not math.isfinite(alpha)
        or alpha < 0
    ):
        raise ValueError(
            f"alpha (--alpha, the GNMT length penalty exponent) = {alpha!r} must be a finite "
            "number >= 0 (0 = no length normalisation; Vaswani et al. 2017 use 0.6)"
        )


def beam_search(
    step_fn,
    cache,
    *,
    batch_size: int,
    beam_size: int,
    max_len: int,
    eos_id: int,
    alpha: float = 0.6,
    start_id: int = 0,
):
    """K-beam search for B examples; see the module docstring for the algorithm.

    Args:
      step_fn: ``(tokens_N1, cache) -> (logits_NV, cache)`` (``seqjax.decoding.interface``).
      cache: the initial decoding state, every leaf of rank >= 1 with N = B * K leading
        rows (row ``b * K + k`` is beam k of example b; ``expand_to_beams`` tiles a
        per-example state).
      batch_size: B.
      beam_size: K >= 1.
      max_len: T, the most tokens generated per hypothesis (EOS included).
      eos_id: the end-of-sequence token.
      alpha: GNMT length-penalty exponent >= 0 (a Python number, static).
      start_id: the first token fed to ``step_fn`` (not part of the output).

    Returns:
      ``(sequences_BKT, scores_BK)``: int32 ``[B, K, T]`` hypotheses, best first, without
      the start token, each ending at its EOS (or at T) and padded with 0 after it; float32
      ``[B, K]`` scores ``log P(Y) / lp(Y)`` (the length-penalised log-probability of the
      hypothesis including its EOS), descending. A slot that no hypothesis filled (K larger
      than the number of distinct hypotheses) has score ``-inf`` and zeros.
    """
    check_beam(beam_size, alpha)
    interface.check_decode(batch_size=batch_size, max_len=max_len, eos_id=eos_id,
                           start_id=start_id)  # fmt: skip
    b, k, t = int(batch_size), int(beam_size), int(max_len)
    n = b * k
    cache = jax.tree.map(jnp.asarray, cache)
    vocab = interface.probe_step(step_fn, cache, n, eos_id=eos_id, start_id=start_id)
    c = min(2 * k, k * vocab)  # V >= 2: at least K of the 2K candidates do not end in EOS
    lp_max = length_penalty(t, alpha)
    positions_T = jnp.arange(t)
    neg_inf = jnp.float32(-jnp.inf)

    # Beam 0 holds the start; the others are dead (-inf), so step 0 expands one prefix.
    live_logp_BK = jnp.full((b, k), neg_inf).at[:, 0].set(0.0)
    carry = dict(
        i=jnp.int32(0),
        live_seqs_BKT=jnp.zeros((b, k, t), jnp.int32),
        live_logp_BK=live_logp_BK,
        last_N=jnp.full((n,), start_id, jnp.int32),
        cache=cache,
        fin_seqs_BKT=jnp.zeros((b, k, t), jnp.int32),
        fin_scores_BK=jnp.full((b, k), neg_inf),
        done_B=jnp.zeros((b,), bool),
    )

    def cond(s):
        return (s["i"] < t) & ~jnp.all(s["done_B"])

    def body(s):
        i = s["i"]
        logits_NV, cache = step_fn(s["last_N"][:, None], s["cache"])
        logp_BKV = jax.nn.log_softmax(logits_NV.astype(jnp.float32), axis=-1).reshape(b, k, vocab)
        total_BKV = s["live_logp_BK"][:, :, None] + logp_BKV
        cand_logp_BC, flat_BC = jax.lax.top_k(total_BKV.reshape(b, k * vocab), c)
        parent_BC, token_BC = flat_BC // vocab, (flat_BC % vocab).astype(jnp.int32)
        parent_seqs_BCT = jnp.take_along_axis(s["live_seqs_BKT"], parent_BC[:, :, None], axis=1)
        at_i_11T = (positions_T == i)[None, None, :]
        cand_seqs_BCT = jnp.where(at_i_11T, token_BC[:, :, None], parent_seqs_BCT)

        # Finish the EOS (or, at max_len, every) extension among the K best candidates.
        is_eos_BC = token_BC == eos_id
        in_beam_1C = (jnp.arange(c) < k)[None, :]
        finishes_BC = in_beam_1C & (is_eos_BC | (i == t - 1)) & (cand_logp_BC > neg_inf)
        new_scores_BC = jnp.where(finishes_BC, cand_logp_BC / length_penalty(i + 1, alpha), neg_inf)
        pool_scores = jnp.concatenate([s["fin_scores_BK"], new_scores_BC], axis=1)
        pool_seqs = jnp.concatenate([s["fin_seqs_BKT"], cand_seqs_BCT], axis=1)
        fin_scores_BK, keep_BK = jax.lax.top_k(pool_scores, k)  # ties: the older first
        fin_seqs_BKT = jnp.take_along_axis(pool_seqs, keep_BK[:, :, None], axis=1)
        fin_seqs_BKT = jnp.where((fin_scores_BK > neg_inf)[:, :, None], fin_seqs_BKT, 0)
        frozen_B11 = s["done_B"][:, None, None]
        fin_seqs_BKT = jnp.where(frozen_B11, s["fin_seqs_BKT"], fin_seqs_BKT)
        fin_scores_BK = jnp.where(frozen_B11[:, :, 0], s["fin_scores_BK"], fin_scores_BK)

        # The K best extensions without EOS go on; the cache rows follow their parents.
        live_cand_BC = jnp.where(is_eos_BC, neg_inf, cand_logp_BC)
        live_logp_BK, pick_BK = jax.lax.top_k(live_cand_BC, k)
        live_seqs_BKT = jnp.take_along_axis(cand_seqs_BCT, pick_BK[:, :, None], axis=1)
        live_parent_BK = jnp.take_along_axis(parent_BC, pick_BK, axis=1)
        rows_N = (jnp.arange(b)[:, None] * k + live_parent_BK).reshape(n)
        last_N = jnp.take_along_axis(token_BC, pick_BK, axis=1).reshape(n)

        # Done: no live beam can beat the worst kept finished hypothesis.
        bound_B = jnp.max(live_logp_BK, axis=1) / lp_max
        done_B = s["done_B"] | (fin_scores_BK[:, -1] >= bound_B)
        return dict(
            i=i + 1,
            live_seqs_BKT=live_seqs_BKT,
            live_logp_BK=live_logp_BK,
            last_N=last_N,
            cache=interface.gather_rows(cache, rows_N),
            fin_seqs_BKT=fin_seqs_BKT,
            fin_scores_BK=fin_scores_BK,
            done_B=done_B,
        )

    out = jax.lax.while_loop(cond, body, carry)
    return out["fin_seqs_BKT"], out["fin_scores_BK"]
