"""BART's noise ablation in miniature (Lewis et al. 2020, Table 1; ``README.md`` beside this
file): the same small encoder-decoder pre-trained with each noise for the same steps on
tiny Shakespeare (``data.objective='denoising'``, ``configs/bart.py:study``), then
fine-tuned on the same downstream generation task, next-line generation (the source is one
line of a speech, the target the line after it; held-out lines of the corpus's test split),
reported as the target's per-character NLL / perplexity beside the paper's XSum perplexity.

    PYTHONPATH=$PWD nice -n 10 python experiments/bart_noise_ablation/run.py

Per noise and seed: ``PRETRAIN`` AdamW steps of the denoising objective (batches from
``seqjax.data.make``; the model, loss and sums of the ``seq2seq`` task), the reconstruction
NLL on 8 validation batches of that noise, then ``FINETUNE`` steps on next-line pairs of the
train split and the NLL of every test-split pair. ``none``: no pre-training (fine-tuned
from the random init). Writes ``results.json``, ``results.md`` and ``results.png``.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

import seqjax.data as sd
from seqjax import tasks
from seqjax.configs import common
from seqjax.models.encoder_decoder import shift_right

HERE = pathlib.Path(__file__).parent
REPO = HERE.parents[1]
NOISES = ("masking", "deletion", "infilling", "permutation", "rotation", "infilling+permutation")
# Lewis et al. 2020, Table 1 (BART-base pre-training objectives; PAPERS.md section 9):
# SQuAD 1.1 F1 / MNLI accuracy / XSum perplexity.
PAPER = {
    "masking": (90.4, 84.1, 7.08), "deletion": (90.4, 84.1, 6.90),
    "infilling": (90.8, 84.0, 6.61), "permutation": (85.4, 81.5, 10.93),
    "rotation": (77.2, 75.3, 17.14), "infilling+permutation": (90.8, 83.8, 6.62),
}  # fmt: skip
PRETRAIN, FINETUNE, EVAL_BATCHES, B, PAIR_LEN = 250, 120, 8, 16, 64


def config(noise: str):
    c = common.load_file(REPO / "configs" / "bart.py", "bart_cfg").get_config(
        f"noise={noise},study"
    )
    c.data.path = str(REPO.parent / "shared" / "data" / "tinyshakespeare" / "input.txt")
    return c


def next_line_pairs(info, text: str, n: int):
    """``(sources [P, n], targets [P, n])``: ``[BOS] line \\n [EOS]`` -> the next line of the
    same speech (both lines non-empty, neither a speaker's name ending in ':')."""
    lines = text.split("\n")
    src, tgt = [], []
    for a, b in zip(lines, lines[1:]):
        if not a or not b or a.endswith(":") or b.endswith(":"):
            continue
        if len(a) + 3 > n or len(b) + 3 > n:
            continue
        for side, line in ((src, a), (tgt, b)):
            ids = np.concatenate([[info.bos_id], info.encode(line + "\n"), [info.eos_id]])
            side.append(np.pad(ids, (0, n - len(ids))).astype(np.int32))
    return np.stack(src), np.stack(tgt)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--pretrain", type=int, default=PRETRAIN)
    p.add_argument("--finetune", type=int, default=FINETUNE)
    p.add_argument("--out", default=str(HERE))
    p.add_argument("--noises", default=",".join(("none", *NOISES)), help="comma-separated")
    p.add_argument("--summarize", action="store_true", help="only rebuild from runs.jsonl")
    args = p.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.summarize:
        rows = [json.loads(x) for x in (out / "runs.jsonl").read_text().splitlines()]
        return write(out, rows, args, json.loads((out / "setup.json").read_text()))

    base = config("infilling")
    info = sd.info(base.data)
    task = tasks.get("seq2seq").configure(base)
    model = task.make_model(task.model_config(base, info))
    n = int(base.data.max_target_len)
    text = pathlib.Path(base.data.path).read_text()
    sizes = info.split_sizes  # text_file: train / validation / test characters, in order
    train_text = text[: sizes["train"]]
    test_text = text[sizes["train"] + sizes["validation"] :]
    ft_src, ft_tgt = next_line_pairs(info, train_text, PAIR_LEN)
    te_src, te_tgt = next_line_pairs(info, test_text, PAIR_LEN)
    print(f"next-line pairs: train {len(ft_src)}, test {len(te_src)}", flush=True)
    setup = {"pretrain_steps": args.pretrain, "finetune_steps": args.finetune, "batch": B,
             "document_ids": n, "pair_ids": PAIR_LEN, "seeds": args.seeds,
             "model": "2 + 2 post-LN layers, width 64, 4 heads, d_ff 256, learned positions, "
             "tied embeddings (configs/bart.py:study)",
             "next_line_pairs": {"train": len(ft_src), "test": len(te_src)},
             "corpus": "tiny shakespeare (chars)"}  # fmt: skip
    (out / "setup.json").write_text(json.dumps(setup, indent=1) + "\n")
    (out / "runs.jsonl").write_text("")

    def loss_fn(params, src, tgt, w):
        logits = model.apply({"params": params}, src, shift_right(tgt), deterministic=True)
        logp = jax.nn.log_softmax(logits.astype(jnp.float32))
        nll = -jnp.take_along_axis(logp, tgt[..., None], -1)[..., 0]
        return (nll * w).sum() / jnp.maximum(w.sum(), 1.0), (nll * w).sum(-1)

    def make_step(steps):
        sched = optax.warmup_cosine_decay_schedule(0.0, 1e-3, min(20, steps // 4), steps, 1e-4)
        tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(sched, weight_decay=0.01))

        @jax.jit
        def step(params, opt, src, tgt, w):
            (loss, _), g = jax.value_and_grad(loss_fn, has_aux=True)(params, src, tgt, w)
            upd, opt = tx.update(g, opt, params)
            return optax.apply_updates(params, upd), opt, loss

        return tx, step

    pre_tx, pre_step = make_step(args.pretrain)
    ft_tx, ft_step = make_step(args.finetune)
    eval_fn = jax.jit(loss_fn)

    def weights(tgt):  # every target id but [BOS] (given) and padding
        return ((tgt > 0) & (tgt != info.bos_id)).astype(np.float32)

    rows = []
    for noise in args.noises.split(","):
        for seed in range(args.seeds):
            t0 = time.process_time()
            src0, tgt0 = jnp.zeros((1, n), jnp.int32), jnp.zeros((1, n), jnp.int32)
            params = model.init(jax.random.PRNGKey(seed), src0, shift_right(tgt0))["params"]
            row = {"noise": noise, "seed": seed}
            if noise != "none":
                c = config(noise)
                c.data.seed = seed
                it = sd.make(c.data, split="train")
                opt = pre_tx.init(params)
                for _ in range(args.pretrain):
                    bt = next(it)
                    params, opt, _ = pre_step(params, opt, bt["inputs"], bt["targets"],
                                              weights(bt["targets"]))  # fmt: skip
                it.close()
                ev = sd.make(c.data, split="validation", train=False)
                num = den = 0.0
                for _, bt in zip(range(EVAL_BATCHES), ev):
                    w = weights(bt["targets"])
                    loss, _ = eval_fn(params, bt["inputs"], bt["targets"], w)
                    num, den = num + float(loss) * w.sum(), den + w.sum()
                ev.close()
                row["reconstruction_nll"] = float(num / den)
                row["pretrain_cpu_seconds"] = time.process_time() - t0
            opt = ft_tx.init(params)
            rng = np.random.default_rng(1000 + seed)  # the same pairs for every noise
            for _ in range(args.finetune):
                idx = rng.integers(0, len(ft_src), B)
                params, opt, _ = ft_step(params, opt, ft_src[idx], ft_tgt[idx],
                                         weights(ft_tgt[idx]))  # fmt: skip
            pair_nll, pair_tok = [], []
            for i in range(0, len(te_src), 256):
                w = weights(te_tgt[i : i + 256])
                _, per = eval_fn(params, te_src[i : i + 256], te_tgt[i : i + 256], w)
                pair_nll.append(np.asarray(per))
                pair_tok.append(w.sum(-1))
            pair_nll, pair_tok = np.concatenate(pair_nll), np.concatenate(pair_tok)
            row["next_line_nll"] = float(pair_nll.sum() / pair_tok.sum())
            # the ratio estimator's standard error over the test pairs
            resid = pair_nll - row["next_line_nll"] * pair_tok
            row["next_line_nll_pair_se"] = float(
                np.sqrt((resid**2).sum() / (len(resid) * (len(resid) - 1))) / pair_tok.mean()
            )
            row["cpu_seconds"] = time.process_time() - t0
            rows.append(row)
            print(json.dumps(row), flush=True)
            with open(out / "runs.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
    write(out, rows, args, setup)


def write(out, rows, args, setup):
    summary = summarize(rows)
    payload = {
        "setup": setup,
        "paper_table1": {k: dict(zip(("squad_f1", "mnli_acc", "xsum_ppl"), v))
                         for k, v in PAPER.items()},
        "runs": rows, "summary": summary,
    }  # fmt: skip
    (out / "results.json").write_text(json.dumps(payload, indent=1) + "\n")
    (out / "results.md").write_text(table(summary))
    plot(payload, out / "results.png")
    print(table(summary))


def summarize(rows):
    out = {}
    for noise in ("none", *NOISES):
        rs = [r for r in rows if r["noise"] == noise]
        if not rs:
            continue
        nll = np.array([r["next_line_nll"] for r in rs])
        se = nll.std(ddof=1) / math.sqrt(len(nll)) if len(nll) > 1 else float("nan")
        s = {"seeds": len(rs), "next_line_nll": float(nll.mean()), "next_line_nll_se": float(se),
             "next_line_ppl": float(math.exp(nll.mean())),
             "pair_se": float(np.mean([r["next_line_nll_pair_se"] for r in rs])),
             "cpu_seconds": float(sum(r["cpu_seconds"] for r in rs))}  # fmt: skip
        if noise != "none":
            rec = np.array([r["reconstruction_nll"] for r in rs])
            s["reconstruction_nll"] = float(rec.mean())
            s["reconstruction_nll_se"] = (float(rec.std(ddof=1) / math.sqrt(len(rec)))
                                          if len(rec) > 1 else float("nan"))  # fmt: skip
        out[noise] = s
    return out


def table(summary) -> str:
    lines = [
        "| noise | next-line NLL (nats/char) ± SE over seeds | SE over test pairs | next-line ppl "
        "| reconstruction NLL ± SE | paper SQuAD F1 | paper MNLI | paper XSum ppl |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def pm(value, se, digits):
        return f"{value:.{digits}f}" + ("" if math.isnan(se) else f" ± {se:.{digits}f}")

    for noise, s in summary.items():
        rec = (pm(s["reconstruction_nll"], s["reconstruction_nll_se"], 3)
               if "reconstruction_nll" in s else "—")  # fmt: skip
        paper = PAPER.get(noise, ("—", "—", "—"))
        lines.append(
            f"| {noise} | {pm(s['next_line_nll'], s['next_line_nll_se'], 4)} "
            f"| {s['pair_se']:.4f} | {s['next_line_ppl']:.3f} | {rec} | {paper[0]} | {paper[1]} "
            f"| {paper[2]} |"
        )
    return "\n".join(lines) + "\n"


def plot(payload, path):
    """The downstream NLL per noise and our perplexity against the paper's (``results.json``
    of ``main``; ``experiments/replot.py`` redraws it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary, setup = payload["summary"], payload["setup"]
    names = list(summary)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
    fig.suptitle(f"BART noises, CPU scale: 2 + 2 layers x 64, {setup['pretrain_steps']} "
                 f"pre-training + {setup['finetune_steps']} fine-tuning steps, "
                 f"{setup['seeds']} seed(s)\ndownstream: tiny Shakespeare next-line generation",
                 fontsize=11)  # fmt: skip
    ax = axes[0]
    y = [summary[k]["next_line_nll"] for k in names]
    e = [
        0.0 if math.isnan(summary[k]["next_line_nll_se"]) else summary[k]["next_line_nll_se"]
        for k in names
    ]
    colors = ["grey" if k == "none" else "C0" for k in names]
    ax.bar(range(len(names)), y, yerr=e if setup["seeds"] > 1 else None, color=colors, capsize=3)
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
    ax.set_ylim(min(y) - 0.05, max(y) + 0.05)
    ax.set_ylabel("next-line NLL after fine-tuning (nats/char)")
    bars = "± SE over seeds" if setup["seeds"] > 1 else "one seed: no error bars"
    ax.set_title(f"downstream (lower is better; {bars})", fontsize=10)
    ax = axes[1]
    done = [k for k in NOISES if k in summary]
    ours = [summary[k]["next_line_ppl"] for k in done]
    paper = [PAPER[k][2] for k in done]
    ax.scatter(paper, ours)
    for k, x, yv in zip(done, paper, ours):
        ax.annotate(k, (x, yv), fontsize=8)
    ax.set_xlabel("paper: XSum perplexity (BART-base, Table 1)")
    ax.set_ylabel("here: next-line perplexity")
    ax.set_title("ordering vs the paper (note the y range)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
