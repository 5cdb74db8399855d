"""Greedy and sampled decoding through the ``step_fn`` interface of ``beam_search``.

One ``lax.while_loop`` generates a token per row and step with ``sample_logits``
(temperature 0 = greedy argmax; top-k and nucleus filters), stops a row at its EOS (padding
it with 0 afterwards) and stops the loop when every row has ended or at ``max_len``.

Legend: B batch (the N rows of ``step_fn``), V vocabulary, T max_len.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from seqjax.decoding import interface
from seqjax.decoding.samplers import check_sampling, sample_logits


def sample_search(
    step_fn,
    cache,
    rng,
    *,
    batch_size: int,
    max_len: int,
    eos_id: int,
    temperature=1.0,
    top_k: int = 0,
    top_p=1.0,
    start_id: int = 0,
):
    """Samples one sequence per row.

    Args:
      step_fn: ``(tokens_B1, cache) -> (logits_BV, cache)`` (``seqjax.decoding.interface``).
      cache: the initial decoding state, leaves of rank >= 1 with B leading rows.
      rng: PRNG key, split once per step (unused for greedy).
      batch_size: B.
      max_len: T, the most tokens generated per row (EOS included).
      eos_id: the end-of-sequence token.
      temperature, top_k, top_p: as in ``seqjax.decoding.samplers.sample_logits``.
      start_id: the first token fed to ``step_fn`` (not part of the output).

    Returns:
      ``(sequences_BT, logprobs_B)``: int32 ``[B, T]`` tokens without the start token,
      ending at EOS (or at T) and padded with 0 after it; float32 ``[B]`` total
      log-probability of each sequence (EOS included) under the model's own distribution
      (``log_softmax`` of the unscaled, unfiltered logits; no length penalty).
    """
    check_sampling(temperature, top_k, top_p)
    interface.check_decode(batch_size=batch_size, max_len=max_len, eos_id=eos_id,
                           start_id=start_id)  # fmt: skip
    b, t = int(batch_size), int(max_len)
    cache = jax.tree.map(jnp.asarray, cache)
    interface.probe_step(step_fn, cache, b, eos_id=eos_id, start_id=start_id)
    positions_T = jnp.arange(t)
    if rng is None:
        rng = jax.random.key(0)  # greedy needs none; the loop carries one all the same
    carry = dict(
        i=jnp.int32(0),
        seqs_BT=jnp.zeros((b, t), jnp.int32),
        logp_B=jnp.zeros((b,), jnp.float32),
        last_B=jnp.full((b,), start_id, jnp.int32),
        cache=cache,
        done_B=jnp.zeros((b,), bool),
        rng=rng,
    )

    def cond(s):
        return (s["i"] < t) & ~jnp.all(s["done_B"])

    def body(s):
        logits_BV, cache = step_fn(s["last_B"][:, None], s["cache"])
        rng, sub = jax.random.split(s["rng"])
        tok_B = sample_logits(logits_BV, sub, temperature=temperature, top_k=top_k, top_p=top_p)
        logp_BV = jax.nn.log_softmax(logits_BV.astype(jnp.float32), axis=-1)
        tok_logp_B = jnp.take_along_axis(logp_BV, tok_B[:, None], axis=1)[:, 0]
        done_B = s["done_B"]
        tok_B = jnp.where(done_B, 0, tok_B)
        at_i_1T = (positions_T == s["i"])[None, :]
        return dict(
            i=s["i"] + 1,
            seqs_BT=jnp.where(at_i_1T, tok_B[:, None], s["seqs_BT"]),
            logp_B=s["logp_B"] + jnp.where(done_B, 0.0, tok_logp_B),
            last_B=tok_B,
            cache=cache,
            done_B=done_B | (tok_B == eos_id),
            rng=rng,
        )

    out = jax.lax.while_loop(cond, body, carry)
    return out["seqs_BT"], out["logp_B"]


def greedy_search(step_fn, cache, *, batch_size: int, max_len: int, eos_id: int, start_id=0):
    """``sample_search`` with temperature 0: the argmax token at every step (ties toward
    the lower id). Returns ``(sequences_BT, logprobs_B)``."""
    return sample_search(step_fn, cache, None, batch_size=batch_size, max_len=max_len,
                         eos_id=eos_id, temperature=0.0, start_id=start_id)  # fmt: skip
