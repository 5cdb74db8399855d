"""Text generation from a trained language model.

    python -m seqjax.sample --workdir DIR --prompt "def " --length 200 --temperature 0.8

restores the newest complete checkpoint of a training workdir and prints the prompt
followed by ``length`` generated characters (tokens). Causal dense attention ("dense" /
"causal" on every layer) decodes with the model's KV cache, one token per step inside a
``lax.scan``; other mechanisms recompute the whole window for each new token.

Legend: L model max_len, P prompt length, N generated tokens, V vocabulary.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from seqjax.models import TransformerLM

CACHED_MECHANISMS = ("dense", "causal")


def _pick(logits_V, rng, temperature: float):
    if temperature <= 0.0:
        return jnp.argmax(logits_V, -1).astype(jnp.int32)
    return jax.random.categorical(rng, logits_V / temperature).astype(jnp.int32)


def generate(
    model_cfg, params, prompt_P: np.ndarray, length: int, *, temperature: float = 1.0, seed=0
) -> np.ndarray:
    """Samples ``length`` tokens after ``prompt_P``.

    Args:
      model_cfg: the LM's ``TransformerConfig``.
      params: its parameters.
      prompt_P: int token ids, at least one.
      length: number of tokens to generate; ``P + N <= L``.
      temperature: softmax temperature (0 = greedy).
      seed: sampling seed.

    Returns:
      int32 ``[N]`` generated ids.
    """
    prompt_P = np.asarray(prompt_P, np.int32).reshape(-1)
    p, n, max_len = len(prompt_P), int(length), model_cfg.max_len
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
    cached = all(name in CACHED_MECHANISMS for name, _ in model_cfg.attention)
    fn = _generate_cached if cached else _generate_windowed
    out = fn(model_cfg, params, buf_L, p, n, float(temperature), rng)
    return np.asarray(out)


def _generate_cached(model_cfg, params, buf_L, p, n, temperature, rng):
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
            nxt = _pick(logits[0, -1], sub, temperature)
            nxt = jnp.where(i + 1 < p, buf_L[jnp.minimum(i + 1, buf_L.shape[0] - 1)], nxt)
            return (mut["cache"], nxt, rng), nxt

        _, toks = jax.lax.scan(body, (cache0, buf_L[0], rng), jnp.arange(p + n - 1))
        return toks[p - 1 :]

    return run(params, buf_L, rng)


def _generate_windowed(model_cfg, params, buf_L, p, n, temperature, rng):
    """No cache: recompute the full causal window for each new token (any mechanism)."""
    model = TransformerLM(model_cfg)

    @jax.jit
    def run(params, buf_L, rng):
        def body(i, carry):
            buf, rng = carry
            logits = model.apply({"params": params}, buf[None])[0]
            rng, sub = jax.random.split(rng)
            return buf.at[i].set(_pick(logits[i - 1], sub, temperature)), rng

        buf, _ = jax.lax.fori_loop(p, p + n, body, (buf_L, rng))
        return jax.lax.dynamic_slice_in_dim(buf, p, n)

    return run(params, buf_L, rng)


def sample_text(run, params, prompt: str, length: int, *, temperature=1.0, seed=0) -> str:
    """Prompt string -> generated continuation (decoded), for a built LM run."""
    if run.task != "lm":
        raise ValueError(f"sampling needs a language model; this run's task is {run.task!r}")
    ids = run.info.encode(prompt or "\n")
    out = generate(run.model_cfg, params, ids, length, temperature=temperature, seed=seed)
    return run.info.decode(out)


def main(argv):
    del argv
    from seqjax.train import setup

    f = flags.FLAGS
    run, state, step = setup.restore_latest(f.workdir)
    text = sample_text(
        run, state["params"], f.prompt, f.length, temperature=f.temperature, seed=f.seed
    )
    print(f.prompt + text)


def cli():
    """``python -m seqjax.sample --workdir DIR --prompt ... --length N --temperature T``."""
    flags.DEFINE_string("workdir", None, "Training workdir with checkpoints.")
    flags.DEFINE_string("prompt", "\n", "Text to continue.")
    flags.DEFINE_integer("length", 200, "Number of characters/tokens to generate.")
    flags.DEFINE_float("temperature", 0.8, "Softmax temperature (0 = greedy).")
    flags.DEFINE_integer("seed", 0, "Sampling seed.")
    flags.mark_flag_as_required("workdir")
    app.run(main)


if __name__ == "__main__":
    cli()
