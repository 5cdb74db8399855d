"""Decoding speed: tokens/s with the decoding caches vs recomputing the prefix, 1K-8K context.

For a small decoder LM (2 layers, width 64, 4 heads, byte vocabulary) and each mechanism
with a cache (``seqjax.decoding``: ``causal`` with its KV cache, a ``flex`` sliding window
with its ring buffer, ``sparse_strided`` with its gathered store, ``lsh`` with its
sorted-chunk cache), this times generating a token at context C:

* **cache**: ``TransformerLM(decode=True)`` one token per step in a jitted ``lax.scan`` of
  ``--cache-steps`` steps starting at position C - steps (the state of a cache at that
  position; contents do not change the work);
* **recompute**: ``seqjax.tasks.sampling.prefix_logits`` (what ``seqjax.sample`` does
  without a cache): the full forward of the ``max_len = C`` buffer, positions after the
  prefix masked, for one token.

Tokens/s = tokens per call / median call time. All contenders of one context are timed
interleaved (``seqjax.bench.interleave``: A B C ... per round, medians), with the load
average (``os.getloadavg``) and the other processes' CPU recorded around them. LSH's
cache equals recomputation only where ``lsh_cache.model_exact`` says so; a 2-layer
all-LSH model with chunks shorter than C is not such a model, so its cache is timed
forced (``decoding="cache"``: the layer-exact cache; see the README).

    python experiments/decoding_speed/run.py                 # cpu scale (~5 min)
    python experiments/decoding_speed/run.py --scale smoke   # seconds (tests run this)

Writes ``results/decoding_speed_<scale>.{json,md,png}``.

Legend: C context (= max_len), V vocabulary.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # experiments/plotting.py

from seqjax import bench  # noqa: E402
from seqjax.models import TransformerConfig, TransformerLM, attention_cycle  # noqa: E402
from seqjax.tasks import sampling  # noqa: E402

HERE = Path(__file__).resolve().parent
V = 256
# name -> (attention cycle, options by mechanism)
MECHANISMS = {
    "dense": ("causal", {}),
    "sliding_window": ("flex", {"flex": dict(pattern="sliding_window", window=256)}),
    "sparse_strided": ("sparse_strided", {}),  # stride: the power of two nearest sqrt(C)
    "lsh": ("lsh", {"lsh": dict(chunk_len=64, n_hashes=2)}),
}
SCALES = {
    # scale: (contexts, cache steps per call, timed rounds, d_model, heads)
    "smoke": ((64,), 4, 1, 32, 2),
    "cpu": ((1024, 2048, 4096, 8192), 32, 3, 64, 4),
}


def model_config(name: str, context: int, d_model: int, heads: int) -> TransformerConfig:
    cycle, options = MECHANISMS[name]
    if name == "sliding_window":  # a window below the context (smoke contexts are short)
        w = min(256, context // 4)
        options = {"flex": dict(pattern="sliding_window", window=w, block_size=min(64, w))}
    if name == "lsh":
        options = {"lsh": dict(options["lsh"], chunk_len=min(64, context // 4))}
    return TransformerConfig(
        vocab_size=V, num_layers=2, d_model=d_model, num_heads=heads, max_len=context,
        attention=attention_cycle(cycle, options), positional="sinusoidal",
    )  # fmt: skip


def contenders(name: str, context: int, steps: int, d_model: int, heads: int):
    """``({"<name> cache": call, "<name> recompute": call}, tokens per call, info)``."""
    cfg = model_config(name, context, d_model, heads)
    model, dec = TransformerLM(cfg), TransformerLM(cfg, decode=True)
    tokens = jnp.asarray(np.random.default_rng(0).integers(1, V, (1, context)), jnp.int32)
    params = jax.jit(model.init)(jax.random.key(0), tokens)["params"]
    shapes = jax.eval_shape(dec.init, jax.random.key(0), tokens)["cache"]
    start = context - steps

    def at_position(path, s):  # an empty cache whose counters say "position start"
        keys = jax.tree_util.keystr(path)
        fill = start if ("cache_index" in keys or "position" in keys) else 0
        return jnp.full(s.shape, fill, s.dtype)

    cache0 = jax.tree_util.tree_map_with_path(at_position, shapes)

    @jax.jit
    def cached(params, cache, tok_S):
        def body(cache, tok):
            logits, mut = dec.apply(
                {"params": params, "cache": cache}, tok[None, None], mutable=["cache"]
            )
            return mut["cache"], jnp.argmax(logits[0, -1])

        return jax.lax.scan(body, cache, tok_S)[1]

    @jax.jit
    def recompute(params, buf_L):
        return jnp.argmax(sampling.prefix_logits(model, params, buf_L, context))

    tok_S, buf_L = tokens[0, start:], tokens[0]
    mode = sampling.decoding_mode(cfg)
    info = {
        "auto_mode": mode[0],
        "auto_reason": mode[1],
        "cache_leaves": {
            jax.tree_util.keystr(p): list(s.shape)
            for p, s in jax.tree_util.tree_leaves_with_path(shapes)
            if "block_0" in jax.tree_util.keystr(p) or "reversible" in jax.tree_util.keystr(p)
        },
    }
    calls = {
        f"{name} cache": lambda: cached(params, cache0, tok_S),
        f"{name} recompute": lambda: recompute(params, buf_L),
    }
    return calls, {f"{name} cache": steps, f"{name} recompute": 1}, info


def run(scale: str, names) -> dict:
    contexts, steps, rounds, d_model, heads = SCALES[scale]
    rows = []
    for context in contexts:
        calls, per_call, infos = {}, {}, {}
        for name in names:
            c, n, info = contenders(name, context, steps, d_model, heads)
            calls.update(c)
            per_call.update(n)
            infos[name] = info
        load_before = os.getloadavg()
        result = bench.interleave(calls, rounds=rounds, warmup=1)
        load_after = os.getloadavg()
        for name in names:
            t_cache = result["timing"][f"{name} cache"]["median_s"]
            t_rec = result["timing"][f"{name} recompute"]["median_s"]
            rows.append(
                {
                    "mechanism": name,
                    "context": context,
                    "cache_tokens_per_s": per_call[f"{name} cache"] / t_cache,
                    "recompute_tokens_per_s": per_call[f"{name} recompute"] / t_rec,
                    "speedup": (t_rec / per_call[f"{name} recompute"])
                    / (t_cache / per_call[f"{name} cache"]),
                    "cache_call_s": t_cache,
                    "recompute_call_s": t_rec,
                    "cache_tokens_per_call": per_call[f"{name} cache"],
                    "auto_mode": infos[name]["auto_mode"],
                    "auto_reason": infos[name]["auto_reason"],
                    "cache_leaves_layer0": infos[name]["cache_leaves"],
                    "loadavg_before": round(load_before[0], 2),
                    "loadavg_after": round(load_after[0], 2),
                    "load": result["load"],
                    "noisy": result["noisy"],
                }
            )
            print(
                f"C={context:5d} {name:15s} cache {rows[-1]['cache_tokens_per_s']:9.1f} tok/s"
                f"  recompute {rows[-1]['recompute_tokens_per_s']:8.2f} tok/s"
                f"  x{rows[-1]['speedup']:.1f}  (load {load_before[0]:.1f})",
                file=sys.stderr,
            )
    return {"scale": scale, "model": dict(layers=2, d_model=d_model, heads=heads, vocab=V),
            "cache_steps_per_call": steps, "rounds": rounds, "rows": rows}  # fmt: skip


def markdown(payload: dict) -> str:
    rows = payload["rows"]
    table = bench.markdown_table(
        rows,
        ["mechanism", "context", "cache_tokens_per_s", "recompute_tokens_per_s", "speedup",
         "auto_mode", "loadavg_before", "loadavg_after"],
        ["mechanism", "context C", "cache tok/s", "recompute tok/s", "cache / recompute",
         "seqjax.sample default", "load before", "load after"],
    )  # fmt: skip
    m = payload["model"]
    return (
        f"# Decoding speed: cache vs recomputation ({payload['scale']} scale)\n\n"
        f"Model: {m['layers']} layers, width {m['d_model']}, {m['heads']} heads, vocabulary "
        f"{m['vocab']}, batch 1, float32, max_len = C. Cache: {payload['cache_steps_per_call']} "
        "tokens per jitted call (a `lax.scan` of decode steps ending at position C); "
        "recompute: one token per call (the full masked forward of the C-token buffer). "
        f"All contenders of one C timed interleaved, {payload['rounds']} rounds, medians; "
        "load average (1 min) recorded before and after each C.\n\n" + table + "\n"
    )


def plot(payload: dict, path) -> None:
    import plotting

    plt = plotting.pyplot()
    fig, ax = plt.subplots(figsize=(6.6, 4.4))
    rows = payload["rows"]
    names = list(dict.fromkeys(r["mechanism"] for r in rows))
    for k, name in enumerate(names):
        mine = [r for r in rows if r["mechanism"] == name]
        xs = [r["context"] for r in mine]
        color = f"C{k}"
        ax.plot(xs, [r["cache_tokens_per_s"] for r in mine], "o-", color=color,
                label=f"{name} cache")  # fmt: skip
        ax.plot(xs, [r["recompute_tokens_per_s"] for r in mine], "s--", color=color,
                label=f"{name} recompute")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("context C (tokens)")
    ax.set_ylabel("decoding tokens / s")
    ax.set_title(f"Decoding with caches vs recomputation ({payload['scale']}, CPU)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    plotting.mark_timing(fig, payload)
    plotting.save(fig, path)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="cpu")
    parser.add_argument("--mechanisms", default=",".join(MECHANISMS))
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args(argv)
    if args.scale not in SCALES:
        raise ValueError(f"--scale={args.scale!r} is not one of {sorted(SCALES)}")
    names = [n.strip() for n in args.mechanisms.split(",") if n.strip()]
    bad = [n for n in names if n not in MECHANISMS]
    if bad or not names:
        raise ValueError(f"--mechanisms={args.mechanisms!r}: valid names are {list(MECHANISMS)}")
    payload = run(args.scale, names)
    stem = f"decoding_speed_{args.scale}"
    bench.write_results(args.out, stem, payload, markdown(payload))
    plot(payload, Path(args.out) / f"{stem}.png")
    return payload


if __name__ == "__main__":
    main()
