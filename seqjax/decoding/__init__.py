"""Decoding for every generating model: samplers, greedy / sampled search and beam search.

All searches share one model-agnostic interface, ``step_fn(tokens_N1, cache) ->
(logits_NV, cache)`` (``seqjax.decoding.interface``), are pure JAX (static shapes, one
``lax.while_loop``) and batched, so a caller jits them with its model:

    seqs_BKT, scores_BK = beam_search(step_fn, expand_to_beams(cache, 4), batch_size=B,
                                      beam_size=4, max_len=T, eos_id=EOS, alpha=0.6)
    seqs_BT, logprobs_B = sample_search(step_fn, cache, rng, batch_size=B, max_len=T,
                                        eos_id=EOS, temperature=0.8, top_p=0.9)

The layers' decoding caches beyond the KV cache live here too, used by
``MultiHeadAttention(decode=True)``: ``pattern_cache`` (ring buffers and summary stores of
the windowed and Sparse Transformer patterns) and ``lsh_cache`` (LSH's sorted chunks).
"""

from seqjax.decoding.beam import beam_search, check_beam
from seqjax.decoding.interface import expand_to_beams, length_penalty, sequence_lengths
from seqjax.decoding.samplers import check_sampling, sample_logits, top_k_filter, top_p_filter
from seqjax.decoding.search import greedy_search, sample_search

__all__ = [
    "beam_search",
    "check_beam",
    "check_sampling",
    "expand_to_beams",
    "greedy_search",
    "length_penalty",
    "sample_logits",
    "sample_search",
    "sequence_lengths",
    "top_k_filter",
    "top_p_filter",
]
