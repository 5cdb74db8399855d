"""BLEU against source-sentence length (Bahdanau et al. 2015, Figure 2) of trained workdirs.

Every workdir's newest checkpoint decodes the given splits with the pipeline's beam search
(``config.eval``: beam 4, alpha 0.6; ``seqjax.tasks.seq2seq_decode.split_translations``); the
splits' pairs are pooled and scored by ``seqjax.tasks.text_metrics.bleu_by_length`` (corpus
sacreBLEU per bucket of source length in words) with a 95% bootstrap interval per bucket
(sentences resampled within the bucket), plus overall BLEU/chrF.

    python experiments/bahdanau_fig2/evaluate.py --workdirs workdirs/bahdanau_fig2 \
        --models rnn_none,rnn_bahdanau,rnn_general,transformer --splits validation,test
    python experiments/bahdanau_fig2/evaluate.py --replot   # the plot and table from the JSON

Writes ``results/bleu_by_length.{json,md,png}`` beside this file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "results"
EDGES = (0, 5, 10, 15, 20, 30)
LABELS = {
    "rnn_none": "RNN enc-dec, no attention (fixed vector)",
    "rnn_bahdanau": "RNN enc-dec + Bahdanau (additive) attention",
    "rnn_general": "RNN enc-dec + Luong (general) attention, input feeding",
    "transformer": "Transformer (2+2 layers, d=128)",
}
STYLE = {  # the paper's Figure 2 draws RNNencdec and RNNsearch; here one line per model
    "rnn_none": dict(color="tab:blue", marker="o", linestyle="--"),
    "rnn_bahdanau": dict(color="tab:red", marker="s", linestyle="-"),
    "rnn_general": dict(color="tab:green", marker="^", linestyle="-"),
    "transformer": dict(color="black", marker="D", linestyle=":"),
}


def _params(workdir: Path) -> int:
    for line in (workdir / "sharding.txt").read_text().splitlines():
        if line.startswith("parameters:"):
            return int(line.split(":")[1].replace(",", ""))
    return 0


def _bootstrap(hyps, refs, resamples: int, seed: int) -> tuple[float, float] | None:
    """The 2.5 / 97.5 percentiles of corpus BLEU over resampled sentence sets."""
    import numpy as np
    import sacrebleu

    if len(hyps) < 2:
        return None
    rng = np.random.default_rng(seed)
    bleu = sacrebleu.metrics.BLEU()
    stats = []
    for _ in range(resamples):
        idx = rng.integers(0, len(hyps), len(hyps))
        stats.append(bleu.corpus_score([hyps[i] for i in idx], [[refs[i] for i in idx]]).score)
    lo, hi = np.percentile(stats, [2.5, 97.5])
    return float(lo), float(hi)


def _restore(workdir: Path, eval_len: int):
    """``setup.restore_latest`` with source/target lengths of ``eval_len`` for decoding: the
    evaluation rows keep every pair, cut to ``eval_len`` ids, and beam search may write
    ``eval_len`` tokens. Neither model has a length-sized parameter (the RNN has no position
    table, the Transformer sinusoidal positions), so a model trained on pairs of <= 48 ids
    decodes the longer test sentences whole, as Bahdanau et al. test RNNsearch-30 (trained
    on <= 30 words) on sentences of up to 60 words."""
    from seqjax.train import setup

    load = setup.load_config

    def longer(path):
        config = load(path)
        config.data.max_source_len = config.data.max_target_len = eval_len
        config.model.max_len = max(int(config.model.max_len), eval_len)
        return config

    setup.load_config = longer
    try:
        return setup.restore_latest(str(workdir))
    finally:
        setup.load_config = load


def evaluate(workdir: Path, splits: list[str], resamples: int, eval_len: int) -> dict:
    from seqjax.tasks import seq2seq_decode, text_metrics
    from seqjax.train import setup

    t0, c0 = time.time(), time.process_time()
    trained_len = int(setup.load_config(str(workdir)).data.max_source_len)
    run, state, step = _restore(workdir, eval_len)
    fn = run.task.translate_fn(run)
    sources, hyps, refs = [], [], []
    for split in splits:
        s, h, r = seq2seq_decode.split_translations(run, state["params"], fn, split)
        sources += s
        hyps += h
        refs += r
    buckets = text_metrics.bleu_by_length(sources, hyps, refs, EDGES)
    limit = int(run.config.data.max_source_len)
    for b in buckets:
        members = [
            i for i, s in enumerate(sources)
            if len(s.split()) >= b["lo"] and (b["hi"] is None or len(s.split()) < b["hi"])
        ]  # fmt: skip
        b["truncated"] = sum(len(run.info.encode(sources[i])) + 1 > limit for i in members)
        b["ci95"] = _bootstrap([hyps[i] for i in members], [refs[i] for i in members],
                               resamples, seed=b["lo"])  # fmt: skip
    train_cpu = None
    if (workdir / "cpu_seconds.txt").exists():
        user, sys_, wall = map(float, (workdir / "cpu_seconds.txt").read_text().split())
        train_cpu = {"cpu_s": user + sys_, "wall_s": wall}
    result = json.loads((workdir / "result.json").read_text())
    return {
        "step": int(step),
        "params": _params(workdir),
        "overall": text_metrics.corpus_scores(hyps, refs),
        "buckets": buckets,
        "examples": len(hyps),
        "test_nll": result.get("test", {}).get("nll"),
        "beam_size": int(run.config.eval.beam_size),
        "alpha": float(run.config.eval.length_penalty),
        "max_source_len": limit,
        "trained_max_source_len": trained_len,
        "train": train_cpu,
        "eval_cpu_s": time.process_time() - c0,
        "eval_wall_s": time.time() - t0,
    }


def _bucket_name(b: dict) -> str:
    return f"{b['lo']}+" if b["hi"] is None else f"{b['lo']}-{b['hi'] - 1}"


def markdown(payload: dict) -> str:
    rows = payload["models"]
    first = next(iter(rows.values()))
    names = [_bucket_name(b) for b in first["buckets"]]
    counts = [str(b["count"]) for b in first["buckets"]]
    lines = [
        "# BLEU against source length (Bahdanau et al. 2015, Figure 2, in miniature)",
        "",
        f"software_l10n en-de, {' + '.join(payload['splits'])} pooled ({first['examples']} "
        f"pairs); {payload['steps']} steps x 32 pairs per model; beam {first['beam_size']}, "
        f"alpha {first['alpha']}; corpus sacreBLEU per bucket of source length in words "
        f"(`{first['overall']['bleu_signature']}`); [95% bootstrap interval].",
        "",
        "| model | params | train CPU s | " + " | ".join(f"{n} words" for n in names)
        + " | all | chrF |",
        "|---|---:|---:|" + "---:|" * (len(names) + 2),
        "| *pairs* | | | " + " | ".join(counts) + f" | {first['examples']} | |",
    ]  # fmt: skip
    for name, r in rows.items():
        cells = []
        for b in r["buckets"]:
            ci = b["ci95"]
            cells.append("—" if b["bleu"] is None else f"{b['bleu']:.1f}"
                         + (f" [{ci[0]:.1f}, {ci[1]:.1f}]" if ci else ""))  # fmt: skip
        cpu = f"{r['train']['cpu_s']:.0f}" if r["train"] else "?"
        lines.append(f"| {LABELS.get(name, name)} | {r['params']:,} | {cpu} | "
                     + " | ".join(cells)
                     + f" | {r['overall']['bleu']:.2f} | {r['overall']['chrf']:.1f} |")  # fmt: skip
    trunc = [str(b["truncated"]) for b in first["buckets"]]
    lines += [
        "",
        f"Models trained on pairs of <= {first.get('trained_max_source_len', '?')} BPE ids "
        f"(EOS included) decode with sources and outputs of up to {first['max_source_len']} "
        f"ids; sources longer than that are cut, per bucket: {', '.join(trunc)}.",
    ]
    return "\n".join(lines) + "\n"


def plot(payload: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.2, 4.4))
    rows = payload["models"]
    first = next(iter(rows.values()))
    xs = list(range(len(first["buckets"])))
    for name, r in rows.items():
        ys = [b["bleu"] if b["bleu"] is not None else float("nan") for b in r["buckets"]]
        ax.plot(xs, ys, label=f"{LABELS.get(name, name)} ({r['overall']['bleu']:.1f})",
                **STYLE.get(name, {}))  # fmt: skip
        lo = [b["ci95"][0] if b["ci95"] else float("nan") for b in r["buckets"]]
        hi = [b["ci95"][1] if b["ci95"] else float("nan") for b in r["buckets"]]
        ax.fill_between(xs, lo, hi, color=STYLE.get(name, {}).get("color"), alpha=0.08)
    ax.set_xticks(xs, [f"{_bucket_name(b)}\n(n={b['count']})" for b in first["buckets"]])
    ax.set_xlabel("Sentence length (source words)")
    ax.set_ylabel("BLEU score")
    ax.set_ylim(bottom=0)
    ax.set_title(
        f"BLEU vs source length, software_l10n en-de ({' + '.join(payload['splits'])}), "
        f"{payload['steps']} steps each\nbeam {first['beam_size']}; band: 95% bootstrap "
        "interval (legend: overall BLEU)",
        fontsize=9,
    )
    ax.legend(fontsize=8, loc="upper right", framealpha=0.9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _provenance() -> dict:
    """The date, the library versions and the commit the scores come from."""
    import subprocess

    import jax
    import sacrebleu

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE,
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "jax": jax.__version__,
            "sacrebleu": sacrebleu.__version__, "commit": commit}  # fmt: skip


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workdirs", default="workdirs/bahdanau_fig2")
    p.add_argument("--models", default="rnn_none,rnn_bahdanau,rnn_general,transformer")
    p.add_argument("--splits", default="validation,test")
    p.add_argument("--resamples", type=int, default=200, help="bootstrap resamples per bucket")
    p.add_argument("--replot", action="store_true", help="redraw from results/*.json")
    p.add_argument("--out", default=str(OUT), help="folder of the results files")
    p.add_argument("--eval_len", type=int, default=224, help="ids (EOS included) when decoding")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / "bleu_by_length"
    if args.replot:
        payload = json.loads(stem.with_suffix(".json").read_text())
    else:
        splits = args.splits.split(",")
        models = {}
        for name in args.models.split(","):
            print(f"[{time.strftime('%H:%M:%S')}] decoding {name} ...", flush=True)
            workdir = Path(args.workdirs) / name
            done = workdir / "bleu_by_length.json"  # a rerun reuses a finished model
            key = {"splits": splits, "resamples": args.resamples, "eval_len": args.eval_len}
            if done.exists() and json.loads(done.read_text())["key"] == key:
                models[name] = json.loads(done.read_text())["result"]
            else:
                models[name] = evaluate(workdir, splits, args.resamples, args.eval_len)
                done.write_text(json.dumps({"key": key, "result": models[name]}) + "\n")
            print(f"    overall BLEU {models[name]['overall']['bleu']:.2f}", flush=True)
        steps = {m["step"] for m in models.values()}
        payload = {"splits": splits, "steps": steps.pop() if len(steps) == 1 else sorted(steps),
                   "edges_words": list(EDGES), "models": models,
                   "cpu_count": os.cpu_count(), **_provenance()}  # fmt: skip
        stem.with_suffix(".json").write_text(json.dumps(payload, indent=2) + "\n")
    stem.with_suffix(".md").write_text(markdown(payload))
    plot(payload, stem.with_suffix(".png"))
    print(stem.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
