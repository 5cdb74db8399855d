"""The duplication task (Kitaev et al. 2020, Table 2): train with full or LSH attention,
evaluate with full and LSH-1/2/4/8.

Sequences are ``0 w 0 w`` with ``w`` a string of random symbols ``1..V-1``; a 1-layer causal
LM learns to copy, and accuracy is measured on the second copy of ``w`` (the only
predictable part, also the only part in the loss). "full" is shared-QK full attention
with the self mask — ``lsh`` with one bucket and one chunk covering the sequence — so every
trained model can be evaluated with every attention (same parameters: Q, V, output).
Training draws fresh LSH rotations every step (the ``"lsh"`` RNG stream); evaluation draws
them per batch, as in the paper.

A minimal optax loop lives in this file (the shared trainer in ``seqjax/train`` was being
written when this experiment was), and data are generated here with numpy.

    python experiments/reformer/duplication.py                 # cpu: length 64
    python experiments/reformer/duplication.py --scale smoke   # seconds
    python experiments/reformer/duplication.py --scale paper   # length 1024 (accelerator)

Goal (issue 7): the model trained with LSH-4 scores >= 99% evaluated with LSH-4 and LSH-8.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import linen as nn

from seqjax import bench
from seqjax.models import transformer as tr
from seqjax.train import defaults, optim

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import plotting  # noqa: E402  (experiments/plotting.py)

SCALES = {
    "smoke": dict(
        seq_len=32, vocab=16, chunk_len=8, d_model=32, heads=2, steps=20, batch=8, lr=1e-3,
        train=["lsh2"], evals=["full", "lsh2"], eval_batches=1,
    ),
    "cpu": dict(
        seq_len=64, vocab=32, chunk_len=8, d_model=128, heads=4, steps=800, batch=32, lr=2e-3,
        train=["lsh4", "full", "lsh2", "lsh1"], eval_batches=8,
    ),
    "paper": dict(
        seq_len=1024, vocab=128, chunk_len=64, d_model=256, heads=4, steps=20000, batch=16, lr=0.32,
        optimizer="adafactor",
        train=["full", "lsh1", "lsh2", "lsh4"], eval_batches=16,
    ),
}  # fmt: skip
EVALS = ["full", "lsh8", "lsh4", "lsh2", "lsh1"]
PAPER = {  # Table 2 of Kitaev et al. 2020 (length 1024), % on the second copy.
    "full": dict(full=100, lsh8=94.8, lsh4=92.5, lsh2=76.9, lsh1=52.5),
    "lsh4": dict(full=0.8, lsh8=100, lsh4=99.9, lsh2=99.4, lsh1=91.9),
    "lsh2": dict(full=0.8, lsh8=100, lsh4=99.9, lsh2=98.1, lsh1=86.8),
    "lsh1": dict(full=0.8, lsh8=99.9, lsh4=99.6, lsh2=94.8, lsh1=77.9),
}


def batch(rng: np.random.Generator, b: int, t: int, vocab: int) -> np.ndarray:
    """``[b, t]`` int32 rows ``0 w 0 w`` with ``w`` uniform over ``1..vocab-1``."""
    w = rng.integers(1, vocab, size=(b, t // 2 - 1))
    zero = np.zeros((b, 1), w.dtype)
    return np.concatenate([zero, w, zero, w], axis=1).astype(np.int32)


def attention_options(kind: str, sc: dict) -> dict:
    """``lsh`` options for "full" (one bucket, one chunk) or "lshN" (N hash rounds)."""
    if kind == "full":
        return dict(n_hashes=1, n_buckets=1, chunk_len=sc["seq_len"])
    return dict(n_hashes=int(kind[3:]), chunk_len=sc["chunk_len"])


def model_for(kind: str, sc: dict) -> tr.TransformerLM:
    cfg = tr.TransformerConfig(
        vocab_size=sc["vocab"],
        num_layers=1,
        num_heads=sc["heads"],
        d_model=sc["d_model"],
        max_len=sc["seq_len"],
        attention=tr.attention_cycle("lsh", {"lsh": attention_options(kind, sc)}),
        positional="learned",
        causal=True,
    )
    return tr.TransformerLM(cfg)


def unit_positions(params: dict, seed: int) -> dict:
    """Re-draws the learned position table at unit scale, like the token inputs.

    The encoder scales token embeddings to unit-size entries (``sqrt(E)``) but initializes
    ``pos_embed`` with std 0.02, so at the start the positions are ~50x weaker than the
    tokens in the shared query/key. The copy needs a purely positional match (position
    ``i`` must find ``i - |w| - 1``: a 1-layer causal model cannot match on content, since
    the key position does not see the token before it), so with 0.02 positions the model
    stayed at chance for hundreds of steps.
    """
    enc = dict(params["encoder"])
    shape = enc["pos_embed"].shape
    enc["pos_embed"] = jax.random.normal(jax.random.PRNGKey(seed + 7), shape, jnp.float32)
    return {**params, "encoder": enc}


def second_copy_weights(t: int) -> np.ndarray:
    """``[t - 1]`` float: 1 where the next-token target is a symbol of the second ``w``."""
    target_pos = np.arange(1, t)
    return (target_pos > t // 2).astype(np.float32)


def optimizer_config(sc: dict) -> ml_collections.ConfigDict:
    """``config.optimizer`` of the run (``seqjax.train.optim``).

    "adafactor" (the ``paper`` scale): Adafactor as the Reformer's trax code trains (Shazeer
    & Stern 2018: factored second moments, decay 0.8, update clipping 1.0, relative step size,
    no momentum), on ``constant * linear_warmup * rsqrt_decay`` with warm-up 1,000 and the
    constant ``sc["lr"]`` (0.32: relative step 0.01 at the peak, T5's). "adam" (``cpu`` and
    ``smoke``, as their committed results were trained): global-norm clip 1.0 and Adam on
    warm-up + cosine to a tenth of ``sc["lr"]``.
    """
    o = defaults.optimizer()
    if sc.get("optimizer", "adam") == "adafactor":
        o.name, o.schedule = "adafactor", "rsqrt"
        o.learning_rate = sc["lr"]
        o.warmup_steps = min(1000, sc["steps"] // 5)
        o.weight_decay, o.grad_clip_norm = 0.0, 0.0
        return o
    o.name, o.schedule = "adam", "warmup_cosine"
    o.learning_rate = sc["lr"]
    o.warmup_steps = min(100, sc["steps"] // 5)
    o.min_lr_ratio = 0.1
    o.b1, o.b2, o.eps = 0.9, 0.999, 1e-8  # optax.adam's defaults
    o.weight_decay, o.grad_clip_norm = 0.0, 1.0
    return o


def train(kind: str, sc: dict, seed: int = 0, log_every: int = 100):
    """Trains a 1-layer model with attention ``kind``; returns its parameters."""
    model = model_for(kind, sc)
    t = sc["seq_len"]
    data = np.random.default_rng(seed)
    params = jax.jit(model.init)(jax.random.PRNGKey(seed), jnp.zeros((1, t), jnp.int32))
    params = unit_positions(nn.meta.unbox(params["params"]), seed)
    opt, _ = optim.make_optimizer(optimizer_config(sc), sc["steps"])
    opt_state = opt.init(params)
    weights = jnp.asarray(second_copy_weights(t))

    @jax.jit
    def step(params, opt_state, tokens, key):
        def loss_fn(p):
            logits = model.apply({"params": p}, tokens, rngs={"lsh": key})[:, :-1]
            nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), tokens[:, 1:, None], -1)
            return jnp.sum(nll[..., 0] * weights[None, :]) / (weights.sum() * tokens.shape[0])

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    key = jax.random.PRNGKey(seed + 1)
    start = time.perf_counter()
    for i in range(sc["steps"]):
        tokens = jnp.asarray(batch(data, sc["batch"], t, sc["vocab"]))
        params, opt_state, loss = step(params, opt_state, tokens, jax.random.fold_in(key, i))
        if (i + 1) % log_every == 0 or i + 1 == sc["steps"]:
            print(
                f"  [{kind}] step {i + 1}/{sc['steps']} loss {float(loss):.4f} "
                f"({time.perf_counter() - start:.0f} s)",
                flush=True,
            )
    return params


def evaluate(params, kind: str, sc: dict, seed: int = 1234) -> float:
    """Accuracy (%) on the second copy with attention ``kind`` and fresh rotations."""
    model = model_for(kind, sc)
    t = sc["seq_len"]
    weights = second_copy_weights(t)
    data = np.random.default_rng(seed)
    apply = jax.jit(lambda p, tok, key: model.apply({"params": p}, tok, rngs={"lsh": key}))
    correct = total = 0.0
    for i in range(sc["eval_batches"]):
        tokens = batch(data, sc["batch"], t, sc["vocab"])
        logits = apply(params, jnp.asarray(tokens), jax.random.PRNGKey(10_000 + i))
        hit = np.asarray(jnp.argmax(logits[:, :-1], -1)) == tokens[:, 1:]
        correct += float((hit * weights).sum())
        total += float(weights.sum() * tokens.shape[0])
    return 100.0 * correct / total


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="cpu")
    parser.add_argument("--steps", type=int, default=0, help="override the scale's steps")
    parser.add_argument("--train", default="", help="comma-separated rows, e.g. full,lsh4")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    parser.add_argument(
        "--optimizer", choices=("adam", "adafactor"), default=None,
        help="override the scale's optimizer (paper: adafactor; cpu, smoke: adam)",
    )  # fmt: skip
    parser.add_argument("--lr", type=float, default=0.0, help="override the scale's lr")
    args = parser.parse_args(argv)
    sc = dict(SCALES[args.scale])
    if args.optimizer:
        sc["optimizer"] = args.optimizer
        if not args.lr and args.optimizer != SCALES[args.scale].get("optimizer", "adam"):
            sc["lr"] = 0.32 if args.optimizer == "adafactor" else 1e-3
    if args.lr:
        sc["lr"] = args.lr
    if args.steps:
        sc["steps"] = args.steps
    if args.train:
        sc["train"] = args.train.split(",")
    rows, times = [], {}
    for kind in sc["train"]:
        print(f"train with {kind}", flush=True)
        t0 = time.perf_counter()
        params = train(kind, sc)
        times[kind] = time.perf_counter() - t0
        row = {"train": kind}
        for ev in sc.get("evals", EVALS):
            row[ev] = evaluate(params, ev, sc)
        print("  eval " + " ".join(f"{ev}={row[ev]:.1f}" for ev in sc.get("evals", EVALS)))
        rows.append(row)
        md = _write(args, sc, rows, times)  # after every row: a cut-short run keeps its rows

    print(md)
    return rows


def _write(args, sc, rows, times) -> str:
    """Writes JSON (with the paper-vs-ours ``summary``), markdown and PNG; returns the md."""
    paper_rows = [{"train": k, **v} for k, v in PAPER.items()]
    head = (
        f"# Duplication task (Reformer Table 2): length {sc['seq_len']}, vocabulary "
        f"{sc['vocab']}, chunk_len {sc['chunk_len']}, 1 layer d_model {sc['d_model']}, "
        f"{sc['steps']} steps of batch {sc['batch']}; optimizer: "
        f"{optim.describe(optimizer_config(sc), sc['steps'])}\n\nAccuracy (%) on the second copy; "
        "rows: attention used in training, columns: in evaluation.\n\n## seqjax\n\n"
    )
    md = head + bench.markdown_table(rows, ["train"] + EVALS)
    md += "\n\n## Paper (length 1024)\n\n" + bench.markdown_table(paper_rows, ["train"] + EVALS)
    lsh4 = next((r for r in rows if r["train"] == "lsh4"), None)
    if lsh4:
        ok = lsh4["lsh4"] >= 99.0 and lsh4["lsh8"] >= 99.0
        md += (
            f"\n\nGoal (trained LSH-4 >= 99% with LSH-4 and LSH-8): {'met' if ok else 'not met'} "
            f"({lsh4['lsh4']:.1f}, {lsh4['lsh8']:.1f})."
        )
    md += "\n\nTraining seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in times.items())
    name = "duplication" if args.scale != "smoke" else "duplication_smoke"
    if args.scale == "paper":
        name = "duplication_paper"
    out = Path(args.out)
    bench.write_results(
        out, name, {"scale": args.scale, "config": sc, "rows": rows, "summary": _summary(rows)}, md
    )
    plot(json.loads((out / f"{name}.json").read_text()), out / f"{name}.png")
    return md


def summary_note(row: dict) -> str | None:
    """The comment a summary row needs: the paper's LSH-trained models evaluated with full
    attention score 0.8% (chance for its 128 symbols), ours ~100%, so ours / paper is
    about 125: the one disagreement with Table 2, not a 125x improvement."""
    study = row.get("study", "")
    if study.startswith("duplication train=lsh") and study.endswith("eval=full"):
        return (
            "paper's 0.8% is chance (its LSH-trained model fails under full attention); ours "
            "does not: the one disagreement with Table 2, see reformer/README.md"
        )
    return None


def _summary(rows) -> list:
    """One row per measured (train, eval) cell: the paper's Table 2 value beside ours."""
    out = []
    for row in rows:
        for ev, paper in PAPER.get(row["train"], {}).items():
            if ev in row:
                ours = row[ev]
                item = dict(
                    study=f"duplication train={row['train']} eval={ev}",
                    paper_figure="Kitaev et al. 2020, Table 2",
                    paper=paper,
                    ours=round(ours, 2),
                    ratio=round(ours / paper, 3) if paper else None,
                )
                if summary_note(item):
                    item["note"] = summary_note(item)
                out.append(item)
    return out


def plot(payload: dict, path) -> None:
    """Grouped bars: accuracy per evaluation attention, one group per training attention,
    with the paper's Table 2 value of each cell as a black tick (length 1024; ours at the
    scale in the title). The disagreement (LSH-trained models evaluated with full
    attention: 0.8% in the paper, ours near 100%) is labelled on the plot."""
    plt = plotting.pyplot()
    rows, sc = payload["rows"], payload["config"]
    evals = [ev for ev in EVALS if any(ev in r for r in rows)]
    fig, ax = plt.subplots(figsize=(7.4, 4.6))
    width = 0.8 / len(evals)
    centers = np.arange(len(rows))
    for j, ev in enumerate(evals):
        xs = centers + (j - (len(evals) - 1) / 2) * width
        ax.bar(xs, [r.get(ev, 0.0) for r in rows], width * 0.95, label=f"eval {ev}")
        paper = [PAPER.get(r["train"], {}).get(ev) for r in rows]
        marks = [(x, p) for x, p in zip(xs, paper) if p is not None]
        if marks:
            ax.scatter(
                *zip(*marks), marker="_", s=120, color="black", linewidths=2.2, zorder=3,
                label="paper, length 1024" if j == 0 else None,
            )  # fmt: skip
        for x, p, r in zip(xs, paper, rows):
            if p is not None and r.get(ev) is not None and abs(r[ev] - p) > 50:
                ax.annotate(
                    f"paper {p:g}%", (x, p), xytext=(0, 14), textcoords="offset points",
                    ha="center", fontsize=7, color="firebrick",
                    arrowprops=dict(arrowstyle="->", color="firebrick", lw=0.8),
                )  # fmt: skip
    chance = 100.0 / (sc["vocab"] - 1)  # symbols 1..V-1, uniformly drawn
    ax.axhline(chance, color="gray", ls=":", lw=1, label=f"chance (1/{sc['vocab'] - 1})")
    ax.set_xticks(centers, [f"train {r['train']}" for r in rows])
    ax.set_ylabel("accuracy on the second copy (%)")
    ax.set_ylim(0, 112)
    ax.set_title(
        f"Duplication task (Kitaev et al. 2020, Table 2), {payload.get('scale')} scale: "
        f"length {sc['seq_len']}, {sc['steps']} steps\nbars: ours; black ticks: the paper "
        "(length 1024); red: where the two disagree",
        fontsize=9,
    )
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.1))
    plotting.mark_load(fig, payload)
    fig.tight_layout()
    plotting.save(fig, path)


if __name__ == "__main__":
    main()
