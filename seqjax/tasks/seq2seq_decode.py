"""Beam-search translation with an ``EncoderDecoder`` and BLEU/chrF over a whole split.

The model-specific half of decoding (``seqjax.decoding`` is the model-agnostic half): the
source is encoded once, tiled to the K beams, and the decoder advances one token per step
with its caches (``EncoderDecoder.step``: self-attention KV cache, cross-attention keys and
values projected once per source; linear attention and Performer keep their O(1) recurrent
state instead of a KV cache, windowed and sparse patterns their ring buffers and summary
stores, LSH its sorted-chunk cache where exact: ``uses_cache``). A decoder whose
self-attention has no such cache (flex bigbird or a user mask) decodes by recomputation:
a token buffer in the search
state, the full teacher-forced decoder run on it, the logits of the current position read
(exact for causal attention: later buffer slots are never seen).

Legend: B batch, S source length, T target length, K beams, N = B * K, V vocabulary.
"""

from __future__ import annotations

import functools
import sys

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from seqjax import decoding
from seqjax.models.layers import decodes_with_cache


def uses_cache(model_cfg) -> bool:
    """Whether every decoder self-attention layer decodes with a cache (``layers.cache_kind``:
    KV cache, recurrent state, pattern ring buffers, LSH) that reproduces the full forward
    (``seqjax.decoding.lsh_cache.model_exact``)."""
    from seqjax.decoding import lsh_cache

    view = model_cfg.decoder_config()
    return (
        all(decodes_with_cache(name, options) for name, options in model_cfg.decoder_attention)
        and lsh_cache.model_exact(view.layer_attention, view.num_layers, view.max_len)[0]
    )


@functools.lru_cache(maxsize=16)
def make_translate_fn(
    model_cfg, *, beam_size: int, alpha: float, max_len: int, eos_id: int, force_recompute=False
):
    """A jitted ``(params, source_BS) -> (tokens_BT, scores_B)``: the best hypothesis of a
    K-beam search with the GNMT length penalty (Wu et al. 2016 eq. 14), ``T = max_len``.
    Built once per configuration (the jit cache then holds one program per batch shape).
    ``force_recompute``: recompute the decoder over the prefix even where a KV cache
    exists (the cache-vs-recomputation benchmark; equal outputs)."""
    from seqjax.models import registry

    decoding.check_beam(beam_size, alpha)
    model = registry.for_model_config(model_cfg).module(model_cfg, task="seq2seq")
    k, t = int(beam_size), int(max_len)
    # A model whose decoder state is its cache (an RNN) says so (``always_cached``).
    own = getattr(model, "always_cached", False)
    cached = (own or uses_cache(model_cfg)) and not force_recompute
    start_id = int(getattr(model_cfg, "decoder_start_id", 0))  # a checkpoint's, else pad 0

    def translate(params, source_BS):
        b, s = source_BS.shape
        encoded_BSE = model.apply({"params": params}, source_BS, method="encode")
        encoded_NSE = decoding.expand_to_beams(encoded_BSE, k)
        source_NS = decoding.expand_to_beams(source_BS, k)
        if cached:
            cache = model.init_cache(b * k, s)

            def step_fn(tokens_N1, cache):
                return model.step(params, cache, encoded_NSE, source_NS, tokens_N1)

        else:
            cache = {"buf_NT": jnp.zeros((b * k, t), jnp.int32), "i": jnp.int32(0)}

            def step_fn(tokens_N1, cache):
                i = cache["i"]
                buf_NT = jax.lax.dynamic_update_slice_in_dim(cache["buf_NT"], tokens_N1, i, 1)
                logits_NTV = model.apply(
                    {"params": params}, encoded_NSE, source_NS, buf_NT, method="decode_logits"
                )
                logits_NV = jax.lax.dynamic_index_in_dim(logits_NTV, i, 1, keepdims=False)
                return logits_NV, {"buf_NT": buf_NT, "i": i + 1}

        seqs_BKT, scores_BK = decoding.beam_search(
            step_fn, cache, batch_size=b, beam_size=k, max_len=t, eos_id=eos_id, alpha=alpha,
            start_id=start_id,
        )  # fmt: skip
        return seqs_BKT[:, 0], scores_BK[:, 0]

    return jax.jit(translate)


def encode_sources(run, sources) -> np.ndarray:
    """int32 ``[len(sources), S]``: each source's ids + EOS, 0-padded to
    ``data.max_source_len``.

    Raises:
      seqjax.tasks.inputs.InputError: a source longer than the model takes.
    """
    from seqjax.tasks import inputs

    limit = int(run.config.data.max_source_len)
    out = np.zeros((len(sources), limit), np.int32)
    for i, text in enumerate(sources):
        ids = np.append(np.asarray(run.info.encode(text), np.int32), run.info.eos_id)
        if len(ids) > limit:
            raise inputs.InputError(
                f"source {i + 1} has {len(ids)} tokens (EOS included), more than this "
                f"model's data.max_source_len={limit}; shorten it or split it"
            )
        out[i, : len(ids)] = ids
    return out


def translate_strings(run, params, fn, sources, *, batch_size: int = 32) -> list[str]:
    """Detokenised best hypotheses for ``sources`` on one device (the CLIs)."""
    source_NS = encode_sources(run, list(sources))
    out = []
    for start in range(0, len(source_NS), batch_size):
        chunk = source_NS[start : start + batch_size]
        pad = batch_size - len(chunk) if len(source_NS) > batch_size else 0
        chunk = np.concatenate([chunk, np.zeros((pad, chunk.shape[1]), np.int32)])
        tokens_BT, _ = fn(params, jnp.asarray(chunk))
        out += [run.info.decode(row) for row in np.asarray(tokens_BT)[: len(chunk) - pad]]
    return out


def _local_rows(x) -> np.ndarray:
    """This process's rows of a batch-sharded global array (shards in row order)."""
    seen, parts = set(), []
    for shard in sorted(x.addressable_shards, key=lambda s: s.index[0].start or 0):
        start = shard.index[0].start or 0
        if start not in seen:
            seen.add(start)
            parts.append(np.asarray(shard.data))
    return np.concatenate(parts)


def split_scores(run, params, fn, split: str, *, max_batches: int = 0) -> dict:
    """BLEU/chrF of beam search over ``split`` (``split_translations``)."""
    from seqjax.tasks import text_metrics

    _, hypotheses, references = split_translations(run, params, fn, split, max_batches=max_batches)
    return text_metrics.corpus_scores(hypotheses, references)


def split_translations(run, params, fn, split: str, *, max_batches: int = 0) -> tuple:
    """``(sources, hypotheses, references)`` of beam search over ``split`` (or its first
    ``max_batches`` batches), strings in the split's order (every process decodes its rows of
    each global batch; the hypotheses are gathered across processes once, at the end). A
    source longer than ``data.max_source_len`` is decoded from its first ids (the data's
    evaluation rows) but returned whole.

    Sources and references are the split's raw strings where the data set has them
    (``seqjax.data.references``: translation), else the decoded rows (copy/reverse).
    """
    import copy

    from jax.experimental import multihost_utils

    from seqjax import data as data_lib
    from seqjax.models import sharding_rules

    config = run.config
    data_cfg = copy.deepcopy(config.data)
    if config.train.eval_batch_size:
        data_cfg.batch_size = config.train.eval_batch_size
    it = data_lib.make(data_cfg, split=split, process_index=jax.process_index(),
                       process_count=jax.process_count(), train=False)  # fmt: skip
    total = it.num_steps if not max_batches else min(max_batches, it.num_steps)
    hyps, targets, srcs, real = [], [], [], []
    bar = tqdm(total=total, desc=f"decode {split}", leave=False, dynamic_ncols=True,
               disable=jax.process_index() != 0 or not sys.stderr.isatty())  # fmt: skip
    try:
        with jax.transfer_guard("allow"), sharding_rules.rules_and_mesh(run.mesh):
            for i, local in enumerate(it):
                if i >= total:
                    break
                batch = sharding_rules.global_batch({"inputs": local["inputs"]}, run.mesh)
                tokens_BT, _ = fn(params, batch["inputs"])
                hyps.append(_local_rows(tokens_BT))
                targets.append(local["targets"])
                srcs.append(local["inputs"])
                real.append(local["weights"].sum(-1) > 0)
                bar.update(1)
    finally:
        bar.close()
        it.close()
    local = tuple(np.stack(x) for x in (hyps, targets, srcs, real))
    if jax.process_count() > 1:  # [nb, b, ...] per process -> [P, nb, b, ...] -> global order
        local = tuple(np.swapaxes(g, 0, 1) for g in multihost_utils.process_allgather(local))
    hyp_rows, tgt_rows, src_rows = (x.reshape(-1, x.shape[-1]) for x in local[:3])
    keep = local[3].reshape(-1)
    hypotheses = [run.info.decode(r) for r, k in zip(hyp_rows, keep) if k]
    try:
        references = data_lib.references(data_cfg, split)[: len(hypotheses)]
        sources = data_lib.references(data_cfg, split, side="source")[: len(hypotheses)]
    except ValueError:  # no raw strings (synthetic data): the rows themselves
        references = [run.info.decode(r) for r, k in zip(tgt_rows, keep) if k]
        sources = [run.info.decode(r) for r, k in zip(src_rows, keep) if k]
    return sources, hypotheses, references
