"""Full vs adaptive softmax at a word-level vocabulary (Grave et al. 2017; Baevski & Auli
2019), at CPU scale.

The same ``TransformerLM`` trains on the same batches of tiny shakespeare *words*
(``seqjax.data`` ``vocab="words"``: whitespace tokens + ``<eos>`` per line, built from the
training split) twice in this process: with a full softmax over the tied embedding, and
with adaptive input + adaptive softmax (``model.adaptive``: cutoffs, ``div_val``). Reported:
validation word perplexity (every token of non-overlapping windows, ``<eos>`` included),
steady-state training tokens/s (compilation and the first steps excluded; the two models
alternate in rounds so load changes hit both) and the parameters and float32 bytes of the
input + output layer.

Usage:
    python experiments/adaptive_softmax/run.py --scale smoke   # seconds (tests run this)
    python experiments/adaptive_softmax/run.py --scale cpu     # minutes

Writes ``results/adaptive_softmax_<scale>.{json,md}`` beside this file; ``smoke`` writes
into a new temporary folder instead (printed; ``--out`` chooses another), so checking the
script leaves the repository as it was.

Legend: T context, B batch, V vocabulary, E width.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import tensorflow_datasets as tfds

import seqjax.data as sd
from seqjax import environment
from seqjax.data import store
from seqjax.models.transformer import TransformerConfig, TransformerLM

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SCALES = {
    "smoke": dict(T=16, batch=4, steps=4, rounds=2, width=32, layers=1, eval_tokens=1024),
    "cpu": dict(T=64, batch=16, steps=300, rounds=5, width=128, layers=2, eval_tokens=20000),
}
CUTOFFS, DIV_VAL = (2000, 8000), 4


def variants(vocab_size: int, s: dict) -> dict[str, TransformerConfig]:
    common = dict(
        vocab_size=vocab_size, num_layers=s["layers"], num_heads=4, d_model=s["width"],
        max_len=s["T"], attention=(("dense", (("implementation", "reference"),)),),
    )  # fmt: skip
    cutoffs = tuple(c for c in CUTOFFS if c < vocab_size)
    return {
        "full softmax": TransformerConfig(**common),
        f"adaptive {cutoffs} div {DIV_VAL}": TransformerConfig(
            **common, adaptive=True, adaptive_cutoffs=cutoffs, adaptive_div_val=DIV_VAL
        ),
    }


def io_layer_params(params) -> int:
    """Parameters of the token embedding / adaptive tables and the output layer."""
    enc = params["encoder"]
    tree = enc["adaptive"] if "adaptive" in enc else enc["embed"]
    return int(sum(np.size(x) for x in jax.tree.leaves(tree)))


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", default="cpu")
    p.add_argument("--out", default=None, help="results folder (default: results/; smoke: a temp)")
    p.add_argument("--data", default=str(REPO.parent / "shared/data/tinyshakespeare/input.txt"))
    p.add_argument("--tfds-dir", default=None)
    args = p.parse_args(argv)
    if args.scale not in SCALES:
        raise ValueError(f"--scale={args.scale!r}; valid: {', '.join(SCALES)}")
    if not os.path.isfile(args.data):
        raise ValueError(f"--data={args.data!r} is not a file (tiny shakespeare's input.txt)")
    s = SCALES[args.scale]
    if args.out is None:  # smoke output is not a result: keep it out of the repository
        smoke = args.scale == "smoke"
        args.out = tempfile.mkdtemp(prefix="seqjax_adaptive_smoke_") if smoke else HERE / "results"
    tfds.disable_progress_bar()  # one line per stage in the log, not raw progress bars
    cfg = sd.default_config()
    cfg.name, cfg.vocab, cfg.path, cfg.download = "text_file", "words", args.data, False
    cfg.data_dir = args.tfds_dir or tempfile.mkdtemp(prefix="seqjax_adaptive_")
    info = sd.info(cfg)
    key = store.dataset_key(cfg)
    train = np.asarray(store.tokens(key, "train", words_kind(cfg)), np.int32)
    valid = np.asarray(store.tokens(key, "validation", words_kind(cfg)), np.int32)
    T, B = s["T"], s["batch"]
    runs = {}
    for name, mcfg in variants(info.vocab_size, s).items():
        model = TransformerLM(mcfg)
        params = nn.meta.unbox(model.init(jax.random.PRNGKey(0), jnp.zeros((1, T), jnp.int32)))
        params = params["params"]
        opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3))

        def loss_fn(p_, x, y, model=model):
            logits = model.apply({"params": p_}, x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        def step(p_, st, x, y, opt=opt, loss_fn=loss_fn):
            loss, g = jax.value_and_grad(loss_fn)(p_, x, y)
            upd, st = opt.update(g, st, p_)
            return optax.apply_updates(p_, upd), st, loss

        runs[name] = dict(
            model=model, params=params, state=opt.init(params), step=jax.jit(step),
            io_params=io_layer_params(params), seconds=0.0, tokens=0,
        )  # fmt: skip
    rng = np.random.default_rng(0)
    batches = []
    for _ in range(s["steps"]):
        starts = rng.integers(0, len(train) - T - 1, B)
        batches.append(np.stack([train[i : i + T + 1] for i in starts]))
    load0 = environment.loadavg()
    per_round = -(-s["steps"] // s["rounds"])
    for r in range(s["rounds"]):  # alternate the variants so load changes hit both
        for run in runs.values():
            for i, win in enumerate(batches[r * per_round : (r + 1) * per_round]):
                t0 = time.perf_counter()
                run["params"], run["state"], loss = run["step"](
                    run["params"], run["state"], win[:, :-1], win[:, 1:]
                )
                loss.block_until_ready()
                if r > 0 or i >= 2:  # compilation and warm-up excluded
                    run["seconds"] += time.perf_counter() - t0
                    run["tokens"] += B * T
                run["loss"] = float(loss)
    rows = []
    n = min(len(valid) - 1, s["eval_tokens"]) // T
    x, y = valid[: n * T].reshape(n, T), valid[1 : n * T + 1].reshape(n, T)
    for name, run in runs.items():
        model = run["model"]

        @jax.jit
        def nll(p_, xb, yb, model=model):
            logits = model.apply({"params": p_}, xb)
            return optax.softmax_cross_entropy_with_integer_labels(logits, yb).sum()

        total = sum(
            float(nll(run["params"], x[i : i + 16], y[i : i + 16]))
            for i in range(0, n - n % 16, 16)
        )
        count = (n - n % 16) * T
        rows.append(
            dict(
                variant=name,
                vocab_size=info.vocab_size,
                final_train_loss=run["loss"],
                val_word_perplexity=math.exp(total / max(count, 1)),
                val_tokens=count,
                tokens_per_s=run["tokens"] / max(run["seconds"], 1e-9),
                io_layer_params=run["io_params"],
                io_layer_mb=run["io_params"] * 4 / 2**20,
            )  # fmt: skip
        )
    payload = write(rows, s, args.scale, Path(args.out), load0)
    print(f"wrote {Path(args.out) / f'adaptive_softmax_{args.scale}'}.{{json,md}}")
    return payload


def words_kind(cfg):
    from seqjax.data import words

    return words.options_of(cfg)


def write(rows, s, scale, out: Path, load0) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"adaptive_softmax_{scale}"
    load1 = environment.loadavg()
    payload = dict(scale=scale, settings=s, rows=rows, loadavg_before=load0, loadavg_after=load1,
                   environment=environment.capture())  # fmt: skip
    stem.with_suffix(".json").write_text(json.dumps(payload, indent=2))
    lines = [
        "| variant | V | val word ppl | train tokens/s | input+output params | MB (fp32) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['variant']} | {r['vocab_size']} | {r['val_word_perplexity']:.1f} | "
            f"{r['tokens_per_s']:.0f} | {r['io_layer_params']:,} | {r['io_layer_mb']:.2f} |"
        )
    md = [
        f"# Full vs adaptive softmax ({scale}), tiny shakespeare words",
        "",
        f"Settings: {json.dumps(s)}; load average before {load0}, after {load1} "
        "(shared 2-core CPU: tokens/s are comparable only within this run).",
        "",
        *lines,
        "",
        f"Command: python experiments/adaptive_softmax/run.py --scale {scale}",
    ]
    stem.with_suffix(".md").write_text("\n".join(md) + "\n")
    return payload


if __name__ == "__main__":
    main()
