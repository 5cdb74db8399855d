"""Text generation from a trained language model (the library behind ``seqjax.sample``).

A model whose every layer has a decoding cache (``layers.cache_kind``) decodes with it by
default (``decoding="auto"``), one token per step inside a ``lax.scan``: dense / causal
attention with the KV cache, linear attention and Performer with their O(1) recurrent
state, sliding windows, LRA local blocks and the Sparse Transformer patterns with ring
buffers and summary stores (``seqjax.decoding.pattern_cache``), LSH with its sorted-chunk
cache where that equals the full forward (``seqjax.decoding.lsh_cache.model_exact``).
Otherwise, or with ``decoding="recompute"``, the prefix is recomputed for each new token,
conditioned on exactly the prefix: the positions after it are masked out as keys
(``prefix_logits``), never filled with invented tokens. This matters for causal LSH, whose
outputs depend on later *queries* (``seqjax.attention.lsh``): with the mask, the logits at
step t are those of the t-token prefix alone, whatever follows t. ``decoding="cache"``
uses the caches even where LSH's differs from that (each position then conditioned on its
own prefix only). ``decoding_mode`` says which mode a model gets and why
(``python -m seqjax.sample`` logs it).

Transformer-XL checkpoints decode with the memory as the cache (Dai et al. 2019, §3.2):
the prompt goes through in segments of the training ``seq_len``, then one token per step,
each step attending to the last ``mem_len`` hidden states of every layer (the evaluation
lengths, ``config.eval``), so the sample length is not bounded by ``max_len``.

Legend: L model max_len, P prompt length, N generated tokens, V vocabulary, T segment
length, M memory length.
"""

from __future__ import annotations

import contextlib
import contextvars

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from seqjax.decoding import lsh_cache
from seqjax.decoding.samplers import check_sampling, sample_logits
from seqjax.models import TransformerLM
from seqjax.models.attention_layer import cache_kind
from seqjax.models.transformer_xl import TransformerXL

DECODING_MODES = ("auto", "cache", "recompute")
_FORCED = contextvars.ContextVar("seqjax_decoding", default=None)


@contextlib.contextmanager
def forced_decoding(mode: str):
    """Within the block, ``generate`` calls that leave ``decoding`` at its default use
    ``mode`` (``python -m seqjax.sample --decoding``, through the task's ``sample``)."""
    _check_mode(mode)
    token = _FORCED.set(mode)
    try:
        yield
    finally:
        _FORCED.reset(token)


def _check_mode(mode) -> None:
    if mode not in DECODING_MODES:
        raise ValueError(f"decoding={mode!r} is not one of {DECODING_MODES}")


def decoding_mode(model_cfg, decoding: str = "auto") -> tuple[str, str]:
    """``("cache" | "recompute", why)``: how ``generate`` decodes this LM.

    ``"auto"``: the caches when every layer has one (``layers.cache_kind``) and, for LSH,
    they equal recomputing the prefix (``lsh_cache.model_exact``); ``"cache"``: the caches
    wherever every layer has one; ``"recompute"``: always recompute the prefix.
    """
    _check_mode(decoding)
    if decoding == "recompute":
        return "recompute", "decoding='recompute' was asked for"
    if not hasattr(model_cfg, "layer_attention"):  # another model family (its own module)
        return "recompute", f"{type(model_cfg).__name__} declares no decoding cache"
    if not model_cfg.causal:
        return "recompute", "the model is bidirectional (model.causal=False)"
    kinds = {}
    for i in range(model_cfg.num_layers):
        name, options = model_cfg.layer_attention(i)
        kind = cache_kind(name, options)
        if kind is None:
            return "recompute", f"layer {i}'s attention {name!r} has no decoding cache"
        kinds.setdefault(name, kind)
    if decoding == "auto":
        exact, why = lsh_cache.model_exact(
            model_cfg.layer_attention, model_cfg.num_layers, model_cfg.max_len
        )
        if not exact:
            return "recompute", why
    return "cache", ", ".join(f"{n}: {k}" for n, k in kinds.items())


def _pick(logits_V, rng, temperature: float, top_k: int = 0, top_p: float = 1.0):
    return sample_logits(logits_V[None], rng, temperature=temperature, top_k=top_k, top_p=top_p)[0]


def generate(
    model_cfg,
    params,
    prompt_P: np.ndarray,
    length: int,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed=0,
    decoding: str | None = None,
    model=None,
) -> np.ndarray:
    """Samples ``length`` tokens after ``prompt_P``.

    Args:
      model_cfg: the LM's ``TransformerConfig``.
      params: its parameters.
      prompt_P: int token ids, at least one.
      length: number of tokens to generate; ``P + N <= L``.
      temperature: softmax temperature (0 = greedy).
      top_k: sample among the ``top_k`` most probable tokens (0 = all).
      top_p: nucleus sampling mass in (0, 1] (1 = all); see ``seqjax.decoding.samplers``.
      seed: sampling seed.
      decoding: ``DECODING_MODES`` (``decoding_mode``); None: ``"auto"`` unless a
        ``forced_decoding`` block says otherwise.
      model: the LM module (default ``TransformerLM(model_cfg)``; another family's module
        recomputes the prefix, called with ``mask_BT`` as ``prefix_logits`` does).

    Returns:
      int32 ``[N]`` generated ids.
    """
    check_sampling(temperature, top_k, top_p)
    decoding = decoding or _FORCED.get() or "auto"
    mode, why = decoding_mode(model_cfg, decoding)
    logging.info("decoding: %s (%s)", mode, why)
    prompt_P = np.asarray(prompt_P, np.int32).reshape(-1)
    p, n = len(prompt_P), int(length)
    max_len = getattr(model_cfg, "max_len", None) or p + n  # no max_len: any length
    if p < 1:
        raise ValueError("prompt must encode to at least one token")
    if p + n > max_len:
        raise ValueError(
            f"prompt ({p} tokens) + length ({n}) = {p + n} exceeds the model's max_len={max_len}; "
            f"use --length <= {max_len - p}"
        )
    if n == 0:
        return np.zeros((0,), np.int32)
    rng = jax.random.PRNGKey(seed)
    buf_L = jnp.zeros((max_len,), jnp.int32).at[:p].set(prompt_P)
    if mode == "cache":
        out = _generate_cached(model_cfg, params, buf_L, p, n, float(temperature), rng, top_k,
                               float(top_p))  # fmt: skip
    else:
        out = _generate_windowed(model_cfg, params, buf_L, p, n, float(temperature), rng, top_k,
                                 float(top_p), model=model)  # fmt: skip
    return np.asarray(out)


def uses_kv_cache(model_cfg) -> bool:
    """True when ``generate`` decodes with caches by default (``decoding_mode`` "auto":
    every layer, standard or reversible, has a cache that reproduces the full forward, or
    the mode of an enclosing ``forced_decoding`` block); otherwise it recomputes the prefix
    per token. (The image sampler asks this too.)"""
    return decoding_mode(model_cfg, _FORCED.get() or "auto")[0] == "cache"


def prefix_logits(model, params, buf_L, i):
    """Logits ``[V]`` of the token at position ``i`` given exactly ``buf_L[:i]``.

    ``buf_L`` is the ``[L]`` token buffer; positions ``>= i`` are masked out as keys
    (``TransformerLM``'s ``mask_BT``), so their contents never matter and the result
    equals the last logits of the ``i``-token prefix run alone, for every mechanism.
    ``i`` may be traced (one compiled program for every step).
    """
    keep_1L = (jnp.arange(buf_L.shape[0]) < i)[None]
    logits_LV = model.apply({"params": params}, buf_L[None], mask_BT=keep_1L)[0]
    return jax.lax.dynamic_index_in_dim(logits_LV, i - 1, axis=0, keepdims=False)


def _generate_cached(model_cfg, params, buf_L, p, n, temperature, rng, top_k=0, top_p=1.0):
    """KV-cache decoding: feeds the prompt then the samples one token per step."""
    model = TransformerLM(model_cfg, decode=True)
    shapes = jax.eval_shape(model.init, rng, jnp.zeros((1, model_cfg.max_len), jnp.int32))
    cache0 = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes["cache"])

    @jax.jit
    def run(params, buf_L, rng):
        def body(carry, i):
            cache, tok, rng = carry
            logits, mut = model.apply(
                {"params": params, "cache": cache}, tok[None, None], mutable=["cache"]
            )
            rng, sub = jax.random.split(rng)
            nxt = _pick(logits[0, -1], sub, temperature, top_k, top_p)
            nxt = jnp.where(i + 1 < p, buf_L[jnp.minimum(i + 1, buf_L.shape[0] - 1)], nxt)
            return (mut["cache"], nxt, rng), nxt

        _, toks = jax.lax.scan(body, (cache0, buf_L[0], rng), jnp.arange(p + n - 1))
        return toks[p - 1 :]

    return run(params, buf_L, rng)


def _generate_windowed(
    model_cfg, params, buf_L, p, n, temperature, rng, top_k=0, top_p=1.0, model=None
):
    """No cache: recompute the prefix for each new token (any mechanism), conditioned on
    exactly the prefix (``prefix_logits``)."""
    model = TransformerLM(model_cfg) if model is None else model

    @jax.jit
    def run(params, buf_L, rng):
        def body(i, carry):
            buf, rng = carry
            logits_V = prefix_logits(model, params, buf, i)
            rng, sub = jax.random.split(rng)
            return buf.at[i].set(_pick(logits_V, sub, temperature, top_k, top_p)), rng

        buf, _ = jax.lax.fori_loop(p, p + n, body, (buf_L, rng))
        return jax.lax.dynamic_slice_in_dim(buf, p, n)

    return run(params, buf_L, rng)


def generate_recurrent(
    model,
    params,
    prompt_P: np.ndarray,
    length: int,
    *,
    segment_len: int,
    temperature=1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed=0,
) -> np.ndarray:
    """Sampling from a recurrent model (``seqjax.models.memory``) with the memory as the cache.

    The first ``(P - 1) // T`` full segments of the prompt run as segments (one compiled
    program), the rest of the prompt and the ``N`` samples one token per step in a
    ``lax.scan``; every step sees the past through the memory. For Transformer-XL with
    ``M >= P + N`` (and ``same_length`` off) the logits equal a full recomputation.

    Args:
      model: the module, ``apply(variables, tokens_BT, memory) -> (logits, memory)``, with
        the lengths to sample with.
      params: its parameters.
      prompt_P: int token ids, at least one.
      length: N, tokens to generate.
      segment_len: T for the prompt's segments.
      temperature: softmax temperature (0 = greedy).
      top_k: sample among the ``top_k`` most probable tokens (0 = all).
      top_p: nucleus sampling mass in (0, 1] (1 = all).
      seed: sampling seed.

    Returns:
      int32 ``[N]`` generated ids.
    """
    check_sampling(temperature, top_k, top_p)
    prompt_P = np.asarray(prompt_P, np.int32).reshape(-1)
    p, n, t = len(prompt_P), int(length), int(segment_len)
    if p < 1:
        raise ValueError("prompt must encode to at least one token")
    if t < 1:
        raise ValueError(f"segment_len={t} must be >= 1")
    if n == 0:
        return np.zeros((0,), np.int32)
    memory = model.init_memory(1)
    n_seg = (p - 1) // t

    @jax.jit
    def segment(params, tokens_1T, memory):
        return model.apply({"params": params}, tokens_1T, memory)[1]

    for i in range(n_seg):
        memory = segment(params, jnp.asarray(prompt_P[None, i * t : (i + 1) * t]), memory)
    rest_R = jnp.asarray(prompt_P[n_seg * t :])
    r = len(rest_R)

    @jax.jit
    def run(params, memory, rest_R, rng):
        def body(carry, i):
            memory, tok, rng = carry
            logits, memory = model.apply({"params": params}, tok[None, None], memory)
            rng, sub = jax.random.split(rng)
            nxt = _pick(logits[0, -1], sub, temperature, top_k, top_p)
            nxt = jnp.where(i + 1 < r, rest_R[jnp.minimum(i + 1, r - 1)], nxt)
            return (memory, nxt, rng), nxt

        _, toks = jax.lax.scan(body, (memory, rest_R[0], rng), jnp.arange(r + n - 1))
        return toks[r - 1 :]

    return np.asarray(run(params, memory, rest_R, jax.random.PRNGKey(seed)))


def generate_xl(
    model_cfg, params, prompt_P, length: int, *, mem_len: int, segment_len: int, **kwargs
) -> np.ndarray:
    """``generate_recurrent`` of ``TransformerXL(model_cfg, mem_len)`` (M positions of
    memory: the context beyond the current token)."""
    if mem_len < 0:
        raise ValueError(f"mem_len={mem_len} must be >= 0")
    model = TransformerXL(model_cfg, mem_len=int(mem_len))
    return generate_recurrent(model, params, prompt_P, length, segment_len=segment_len, **kwargs)


def sample_text(
    run, params, prompt: str, length: int, *, temperature=1.0, top_k=0, top_p=1.0, seed=0
) -> str:
    """Prompt string -> generated continuation (decoded), for a built LM run (the LM task's
    ``sample``, ``seqjax.tasks.lm``).

    A recurrent model (``run.recurrence``) samples with ``generate_recurrent``, built with
    its evaluation lengths (``config.eval`` for Transformer-XL), the training ``seq_len`` as
    the prompt's segments.
    """
    if not run.task.generates:
        raise ValueError(f"sampling needs a task that generates; this run's task is {run.task}")
    ids = run.info.encode(prompt or "\n")
    rec = run.recurrence
    if rec is not None:
        model = rec.eval_model(run.model_cfg, rec.eval_lengths(run.config))
        out = generate_recurrent(
            model,
            params,
            ids,
            length,
            segment_len=int(run.config.data.seq_len),
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            seed=seed,
        )
    else:
        out = generate(
            run.model_cfg,
            params,
            ids,
            length,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            seed=seed,
            model=None if isinstance(run.model, TransformerLM) else run.model,
        )
    return run.info.decode(out)
