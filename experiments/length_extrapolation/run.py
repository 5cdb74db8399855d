"""Length extrapolation of positional schemes (the ALiBi paper's Fig. 1, at CPU scale).

Press et al. 2022 (§2, Fig. 1) train language models at length L and evaluate them on
longer inputs: sinusoidal and learned positions break down beyond L, rotary degrades,
ALiBi (and T5's bias) keep improving or stay flat. Here each scheme
(``sinusoidal``, ``learned``, ``rope``, ``alibi``, ``t5_bias`` and Transformer-XL's
``relative`` attention without memory) trains the same small ``TransformerLM`` on the
same batches of tiny shakespeare characters (``seqjax.data``, ``vocab=chars``) at length
L, then evaluates the validation split in non-overlapping windows of L, 2L, 4L and 8L
tokens (every token of a window scored, as the paper's non-overlapping evaluation).

A learned table has 8L rows, of which only the first L are trained (as the paper's
learned-embedding baseline extrapolates with untrained rows). Models are in float32,
attention ``dense`` reference; the load average is recorded before and after each run.

Usage:
    python experiments/length_extrapolation/run.py --scale smoke   # seconds (tests run this)
    python experiments/length_extrapolation/run.py --scale cpu     # minutes on a free CPU

Writes ``results/length_extrapolation_<scale>.{json,md,png}`` beside this file.

Legend: L training length, B batch, N steps, E width.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

import seqjax.data as sd
from seqjax import environment
from seqjax.data import store
from seqjax.models.transformer import TransformerConfig, TransformerLM

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SCHEMES = ("sinusoidal", "learned", "rope", "alibi", "t5_bias", "relative")
FACTORS = (1, 2, 4, 8)
EVAL_TOKENS_PER_CALL = 2048
SCALES = {
    # L, batch, steps, layers, heads, width, validation tokens evaluated per length
    "smoke": dict(L=16, batch=4, steps=3, layers=1, heads=2, width=32, eval_tokens=512),
    "cpu": dict(L=32, batch=16, steps=300, layers=2, heads=4, width=64, eval_tokens=8192),
}


def model_config(scheme: str, vocab_size: int, s: dict) -> TransformerConfig:
    relative = scheme == "relative"
    return TransformerConfig(
        vocab_size=vocab_size,
        num_layers=s["layers"],
        num_heads=s["heads"],
        d_model=s["width"],
        max_len=s["L"] * FACTORS[-1],
        attention=(("relative", ()),)
        if relative
        else (("dense", (("implementation", "reference"),)),),
        positional="none" if relative else scheme,
    )


def corpus(args) -> tuple[np.ndarray, np.ndarray, int]:
    """Train and validation ids of tiny shakespeare (characters) and the vocabulary size."""
    cfg = sd.default_config()
    cfg.name, cfg.vocab, cfg.path = "text_file", "chars", args.data
    cfg.data_dir, cfg.download = args.tfds_dir, False
    info = sd.info(cfg)
    key = store.dataset_key(cfg)
    train = np.asarray(store.tokens(key, "train", "chars"), np.int32)
    valid = np.asarray(store.tokens(key, "validation", "chars"), np.int32)
    return train, valid, info.vocab_size


def train_and_evaluate(scheme: str, train, valid, vocab_size: int, s: dict, seed: int) -> dict:
    cfg = model_config(scheme, vocab_size, s)
    model = TransformerLM(cfg)
    L, B = s["L"], s["batch"]
    params = model.init(jax.random.PRNGKey(seed), jnp.zeros((1, L), jnp.int32))["params"]
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3, weight_decay=0.01))
    state = opt.init(params)

    def loss_fn(p, x_BT, y_BT):
        logits = model.apply({"params": p}, x_BT)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y_BT).mean()

    @jax.jit
    def step(p, st, x_BT, y_BT):
        loss, g = jax.value_and_grad(loss_fn)(p, x_BT, y_BT)
        updates, st = opt.update(g, st, p)
        return optax.apply_updates(p, updates), st, loss

    rng = np.random.default_rng(seed)  # the same batches for every scheme
    load0, t0 = environment.loadavg(), time.perf_counter()
    loss = float("nan")
    for _ in range(s["steps"]):
        starts = rng.integers(0, len(train) - L - 1, B)
        win = np.stack([train[i : i + L + 1] for i in starts])
        params, state, loss = step(params, state, win[:, :-1], win[:, 1:])
    train_s = time.perf_counter() - t0

    @jax.jit
    def nll_rows(p, x_BT, y_BT):
        logits = model.apply({"params": p}, x_BT)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y_BT).sum(-1)

    result = {"scheme": scheme, "final_train_loss": float(loss), "train_s": train_s}
    for f in FACTORS:
        n = f * L
        windows = min(len(valid) - 1, s["eval_tokens"]) // n
        x = valid[: windows * n].reshape(windows, n)
        y = valid[1 : windows * n + 1].reshape(windows, n)
        rows = max(1, EVAL_TOKENS_PER_CALL // n)  # windows per call: one shape per length
        total = 0.0
        for i in range(0, windows, rows):
            xb, yb = x[i : i + rows], y[i : i + rows]
            keep = len(xb)
            if keep < rows:  # pad the last call to the same shape, then drop the padding rows
                xb = np.concatenate([xb, np.zeros((rows - keep, n), np.int32)])
                yb = np.concatenate([yb, np.zeros((rows - keep, n), np.int32)])
            total += float(nll_rows(params, xb, yb)[:keep].sum())
        nll = total / (windows * n)
        result[f"ppl_{f}L"] = math.exp(nll)
        result[f"bpc_{f}L"] = nll / math.log(2)
    result.update(loadavg_before=load0, loadavg_after=environment.loadavg())
    return result


def write(rows, s, scale, out: Path, env) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"length_extrapolation_{scale}"
    payload = {"scale": scale, "settings": s, "rows": rows, "environment": env}
    stem.with_suffix(".json").write_text(json.dumps(payload, indent=2))
    L = s["L"]
    head = "| scheme | " + " | ".join(f"ppl @ {f * L}" for f in FACTORS) + " | load before/after |"
    lines = [head, "|" + "---|" * (len(FACTORS) + 2)]
    for r in rows:
        cells = " | ".join(f"{r[f'ppl_{f}L']:.3f}" for f in FACTORS)
        lines.append(f"| {r['scheme']} | {cells} | {r['loadavg_before']} / {r['loadavg_after']} |")
    md = [
        f"# Length extrapolation ({scale}): trained at L={L}, character perplexity on the",
        "tiny shakespeare validation split in non-overlapping windows of L..8L.",
        "",
        f"Settings: {json.dumps(s)}.",
        "",
        *lines,
        "",
        f"Command: python experiments/length_extrapolation/run.py --scale {scale}",
    ]
    stem.with_suffix(".md").write_text("\n".join(md) + "\n")
    plot(payload, stem.with_suffix(".png"))
    return payload


def plot(payload: dict, path: Path) -> None:
    """Perplexity against evaluation length per scheme (the ALiBi paper's Fig. 1, small):
    the title names the corpus, training length, steps and model size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s, rows = payload["settings"], payload["rows"]
    L = s["L"]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for r in rows:
        ax.plot([f * L for f in FACTORS], [r[f"ppl_{f}L"] for f in FACTORS], "o-",
                label=r["scheme"])  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_xlabel("evaluation length (tokens, log scale)")
    ax.set_ylabel("validation perplexity (characters)")
    ax.axvline(L, color="gray", lw=0.8, ls=":")
    ax.text(L, ax.get_ylim()[1], " training length", color="gray", fontsize=7, va="top")
    ax.set_title(
        f"Length extrapolation, {payload['scale']} scale: tiny shakespeare characters, trained "
        f"at L={L}\nfor {s['steps']} steps ({s['layers']} layers x {s['width']}), "
        "perplexity at L..8L (one seed; ALiBi paper Fig. 1, small)",
        fontsize=9,
    )
    ax.legend(fontsize=8)
    fig.tight_layout()  # no load mark: a perplexity does not depend on the machine's load
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", default="cpu")
    p.add_argument("--schemes", default=",".join(SCHEMES))
    p.add_argument("--out", default=str(HERE / "results"))
    p.add_argument("--data", default=str(REPO.parent / "shared/data/tinyshakespeare/input.txt"))
    p.add_argument("--tfds-dir", default=None)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.scale not in SCALES:
        raise ValueError(f"--scale={args.scale!r}; valid: {', '.join(SCALES)}")
    schemes = [x.strip() for x in args.schemes.split(",") if x.strip()]
    bad = [x for x in schemes if x not in SCHEMES]
    if bad or not schemes:
        raise ValueError(f"--schemes has {bad or schemes}; valid: {', '.join(SCHEMES)}")
    if not os.path.isfile(args.data):
        raise ValueError(f"--data={args.data!r} is not a file (tiny shakespeare's input.txt)")
    args.tfds_dir = args.tfds_dir or tempfile.mkdtemp(prefix="seqjax_lenx_")
    s = SCALES[args.scale]
    train, valid, vocab_size = corpus(args)
    rows = [train_and_evaluate(x, train, valid, vocab_size, s, args.seed) for x in schemes]
    return write(rows, s, args.scale, Path(args.out), environment.capture())


if __name__ == "__main__":
    main()
