"""Linformer Fig. 3 (a)/(c) and the transfer study at CPU scale (Wang et al. 2020, §5).

    python experiments/linformer_mlm/run.py --out experiments/linformer_mlm/results \\
        --pretrain_steps 300 --finetune_steps 200
    python experiments/linformer_mlm/run.py --out /tmp/lm_smoke --smoke   # the test's size
    python experiments/linformer_mlm/run.py --out /tmp/lm_sw --vocab sentencepiece \\
        --vocab_size 8000 --finetune_lr 1e-4   # subword reviews (configs/mlm.py:subword)

* Fig. 3 (a): masked-LM validation perplexity against steps, dense and Linformer k in
  ``--ks``; (c): the four sharing modes at ``--sharing_k``; same steps, same data (the IMDB
  reviews' bytes, ``configs/mlm.py``), n = ``--n``.
* Transfer (Table 2's IMDB column): IMDB accuracy (the final checkpoint on the whole test
  split, which LRA uses as validation, or its first ``--finetune_eval_batches`` batches: the
  builder orders reviews by a hash of their file name, so any prefix mixes both classes) of
  the encoder fine-tuned from each pre-training run vs the same encoder from scratch, same
  fine-tuning steps, dense and Linformer, in the same invocation.
* ``--vocab sentencepiece``: every job (pre-training, fine-tuning, from scratch) runs
  ``configs/mlm.py``'s ``subword`` variant with the same ``--vocab_size``, so all of them
  read the one SentencePiece model of the train reviews (same ids; ``init_from`` loads the
  embedding) and pre-training masks whole words; perplexities are then per subword token.
  ``--finetune_lr`` sets the fine-tuning (and from-scratch) peak learning rate.

Every job is ``seqjax.main`` in its own subprocess with ``configs/mlm.py``; the script
collects ``metrics.jsonl``, writes ``results.json``, ``fig3.md``/``transfer.md`` tables and
``fig3.png``, and records the command and ``os.getloadavg()`` before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARING = ("none", "headwise", "kv", "layerwise")


def _job(workdir: Path, variant: str, steps: int, args, extra: dict, final_batches=None) -> dict:
    """Runs one ``seqjax.main`` job (resumes if already done); returns its eval records."""
    if args.vocab == "sentencepiece":  # every job: the same subword vocabulary
        variant += ",subword"
        extra = {**extra, "data.vocab_size": args.vocab_size}
    if "finetune" in variant and args.finetune_lr is not None:
        extra = {**extra, "optimizer.learning_rate": args.finetune_lr}
    cmd = [sys.executable, "-m", "seqjax.main", f"--config={REPO}/configs/mlm.py:{variant}",
           f"--workdir={workdir}", f"--config.train.num_steps={steps}",
           f"--config.train.eval_every={args.eval_every}",
           f"--config.train.checkpoint_every={steps}", "--config.mesh.data=1",
           f"--config.data.max_len={args.n}", f"--config.model.max_len={args.n}",
           f"--config.data.batch_size={args.batch_size}",
           f"--config.train.eval_max_batches={args.eval_batches}",
           f"--config.optimizer.warmup_steps={max(1, steps // 10)}",
           "--config.train.final_eval=False"]  # fmt: skip
    cmd += [f"--config.{k}={v}" for k, v in extra.items()]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)}\n{proc.stderr[-3000:]}")
    records = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if any(k.startswith("validation/") for k in r)]
    # the loop validates before the last step only: evaluate the final checkpoint the same way
    batches = args.eval_batches if final_batches is None else final_batches
    last = [sys.executable, "-m", "seqjax.evaluate", f"--workdir={workdir}", "--split=validation",
            f"--max_batches={batches}"]  # fmt: skip
    proc = subprocess.run(last, cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(last)}\n{proc.stderr[-3000:]}")
    final = json.loads(proc.stdout.strip().splitlines()[-1])
    numbers = {k: v for k, v in final.items() if isinstance(v, int | float) and k != "step"}
    evals.append({"step": final["step"], **{f"validation/{k}": v for k, v in numbers.items()}})
    return {"command": " ".join(cmd), "eval": evals}


def _lin(k: int, sharing: str, n: int) -> dict:
    return {"model.attention": "linformer", "data.packing": False,
            "model.attention_options.linformer.k": min(k, n),
            "model.attention_options.linformer.max_len": n,
            "model.attention_options.linformer.sharing": sharing}  # fmt: skip


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--smoke", action="store_true", help="a few steps of two runs (the test)")
    p.add_argument("--n", type=int, default=256)
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--ks", default="64,128,256")
    p.add_argument("--sharing_k", type=int, default=128)
    p.add_argument("--pretrain_steps", type=int, default=300)
    p.add_argument("--finetune_steps", type=int, default=200)
    p.add_argument("--eval_every", type=int, default=50)
    p.add_argument("--eval_batches", type=int, default=10)
    p.add_argument("--finetune_eval_batches", type=int, default=0,
                   help="batches of the final IMDB evaluation (0 = all 25k reviews; the split "
                   "is in hashed order, so a prefix is a fair sample)")  # fmt: skip
    p.add_argument("--positional", default=None,
                   help="model.positional of every run (default: the config's, sinusoidal); "
                   "'rope' is what makes this CPU-sized model learn (README)")  # fmt: skip
    p.add_argument("--vocab", choices=("bytes", "sentencepiece"), default="bytes",
                   help="the reviews' tokens in every job (sentencepiece: configs/mlm.py's "
                   "subword variant)")  # fmt: skip
    p.add_argument("--vocab_size", type=int, default=8000,
                   help="--vocab sentencepiece: pieces of the shared model")  # fmt: skip
    p.add_argument("--finetune_lr", type=float, default=None,
                   help="peak learning rate of the fine-tuning and from-scratch jobs "
                   "(default: the config's)")  # fmt: skip
    args = p.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    ks = [int(k) for k in args.ks.split(",")]
    # dense unpacked too: every pre-training run sees the same rows (Linformer cannot pack)
    runs = {"dense": {"data.packing": False}} | {f"k{k}": _lin(k, "headwise", args.n) for k in ks}
    for s in SHARING:  # headwise at sharing_k is already the Fig. 3 (a) run when k is in ks
        if not (s == "headwise" and args.sharing_k in ks):
            runs[f"k{args.sharing_k}_{s}"] = _lin(args.sharing_k, s, args.n)
    lin = f"k{args.sharing_k}" if args.sharing_k in ks else f"k{args.sharing_k}_headwise"
    transfer = ["dense", lin]
    if args.smoke:
        runs = {"dense": {"data.packing": False}, f"k{ks[0]}": _lin(ks[0], "headwise", args.n)}
        transfer = list(runs)
    if args.positional:
        runs = {
            name: {**extra, "model.positional": args.positional} for name, extra in runs.items()
        }
    load = {"before": os.getloadavg()}
    t0 = time.time()
    result = {"argv": sys.argv, "args": vars(args), "pretrain": {}, "transfer": {}}
    for name, extra in runs.items():
        result["pretrain"][name] = _job(out / f"pre_{name}", "smoke", args.pretrain_steps,
                                        args, extra)  # fmt: skip
    for name in transfer:
        extra = {k: v for k, v in runs[name].items() if k != "data.packing"}
        fb = args.finetune_eval_batches
        pre = _job(out / f"ft_{name}", "finetune,smoke", args.finetune_steps, args,
                   {**extra, "init_from": out / f"pre_{name}"}, fb)  # fmt: skip
        scratch = _job(out / f"scratch_{name}", "finetune,smoke", args.finetune_steps, args,
                       extra, fb)  # fmt: skip
        result["transfer"][name] = {"pretrained": pre, "scratch": scratch}
    load["after"] = os.getloadavg()
    result.update(load=load, seconds=time.time() - t0)
    (out / "results.json").write_text(json.dumps(result, indent=1, default=str))
    _tables(result, out)
    return result


def _final(records: list, key: str):
    vals = [r[key] for r in records if key in r]
    return vals[-1] if vals else None


def _tables(result: dict, out: Path) -> None:
    lines = [
        "| run | step | validation masked-LM perplexity | masked accuracy |",
        "|---|---|---|---|",
    ]
    for name, r in result["pretrain"].items():
        for rec in r["eval"]:
            lines.append(f"| {name} | {rec['step']} | {rec.get('validation/perplexity', 0):.3f} "
                         f"| {rec.get('validation/accuracy', 0):.3f} |")  # fmt: skip
    (out / "fig3.md").write_text("\n".join(lines) + f"\n\nload: {result['load']}\n")
    rows = ["| encoder | accuracy from MLM pre-training | from scratch | gap |",
            "|---|---|---|---|"]  # fmt: skip
    for name, r in result["transfer"].items():
        a = _final(r["pretrained"]["eval"], "validation/accuracy")
        b = _final(r["scratch"]["eval"], "validation/accuracy")
        gap = f"{a - b:+.3f}" if a is not None and b is not None else "n/a"
        rows.append(f"| {name} | {a} | {b} | {gap} |")
    (out / "transfer.md").write_text("\n".join(rows) + f"\n\nload: {result['load']}\n")
    plot(result, out / "fig3.png")


def plot(payload: dict, path) -> None:
    """Linformer Fig. 3 (a)/(c) at this scale: validation masked-LM perplexity (log scale)
    against pre-training steps, one line per run (``experiments/replot.py`` redraws it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    a = payload.get("args", {})
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, r in payload["pretrain"].items():
        pts = [(x["step"], x["validation/perplexity"]) for x in r["eval"]
               if "validation/perplexity" in x]  # fmt: skip
        if pts:
            ax.plot(*zip(*pts), label=name, marker="o", linestyle="-" if name == "dense" else "--")
    ax.set_yscale("log")
    ax.set_xlabel("pre-training step")
    subwords = a.get("vocab") == "sentencepiece"
    unit = f"subword tokens, V={a.get('vocab_size')}" if subwords else "bytes"
    ax.set_ylabel(f"validation masked-LM perplexity ({unit}, log)")
    ax.set_title(
        f"Linformer Fig. 3 at CPU scale: IMDB {'subwords' if subwords else 'bytes'}, "
        f"n={a.get('n', '?')}, batch "
        f"{a.get('batch_size', '?')}, positions {a.get('positional') or 'sinusoidal'}",
        fontsize=9,
    )
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


if __name__ == "__main__":
    main()
