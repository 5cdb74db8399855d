"""Translation at CPU scale: BLEU/chrF of dense, reversible, LSH-encoder and sparse-encoder
encoder-decoders on software_l10n en-de, and decoding speed with caches vs recomputation.

Every variant is ``configs/translation.py:<variant>`` trained for the same steps on the
same data (``python -m seqjax.main`` in a subprocess, one workdir each, so a killed study
resumes), then scored on the whole test split with beam search (beam 4, alpha 0.6; Vaswani
et al. 2017 §6.1) by sacreBLEU. Decoding speed: the dense model's beam search over test
sources with the decoder's KV cache (cross-attention keys/values once per source) against
the same search recomputing the decoder over the prefix at every step, both timed
interleaved in one process (median of rounds), with the machine's load recorded.

Scales: ``smoke`` (the tests: 2 variants, a few steps), ``cpu`` (the study).

Usage:
    python experiments/translation/run.py                       # cpu, all variants
    python experiments/translation/run.py --scale smoke
    python experiments/translation/run.py --steps 2000 --variants cpu,reversible

Writes ``results/translation_<scale>.{json,md,png}`` beside this file.

Legend: B batch, S/T source/target length, K beams.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CONFIG = REPO / "configs" / "translation.py"
VARIANTS = ("cpu", "reversible", "lsh_encoder", "sparse_encoder")
LABELS = {
    "cpu": "dense encoder + decoder (post-LN)",
    "reversible": "reversible, pre-LN (Reformer enc-dec)",
    "lsh_encoder": "LSH encoder (Reformer), dense decoder",
    "sparse_encoder": "strided sparse encoder, dense decoder",
}
# Vaswani et al. 2017 Table 2 (newstest2014 BLEU); WMT14 scale, needs accelerators.
PAPER = [
    ("Transformer base (Vaswani et al. 2017, Table 2)", "WMT14 En-De newstest2014", 27.3),
    ("Transformer big (Vaswani et al. 2017, Table 2)", "WMT14 En-De newstest2014", 28.4),
]
SCALES = {
    "smoke": {"steps": 20, "variants": ("cpu", "reversible"), "rounds": 1, "decode_n": 8},
    "cpu": {"steps": 2000, "variants": VARIANTS, "rounds": 3, "decode_n": 64},
}


def _load() -> float:
    return os.getloadavg()[0]


def _train(variant: str, steps: int, workdir: Path, smoke: bool, extra: list[str]) -> dict:
    """Trains (or resumes) one variant; returns its result.json and the command."""
    cmd = [sys.executable, "-m", "seqjax.main", f"--config={CONFIG}:{variant}",
           f"--workdir={workdir}", f"--config.train.num_steps={steps}",
           "--config.train.eval_every=0", "--config.optimizer.warmup_steps="
           f"{min(400, max(steps // 4, 1))}", *extra]  # fmt: skip
    if smoke:  # the smoke variant's sizes on any variant
        cmd += [f"--config.{k}={v}" for k, v in SMOKE_SIZES.items()]
    done = workdir / "study_run.json"  # a finished variant is reused when the study reruns
    if done.exists():
        record = json.loads(done.read_text())
        if record["result"].get("step") == steps:
            return record
    t0, load0 = time.time(), _load()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{variant} failed:\n{proc.stderr[-3000:]}")
    record = {
        "result": json.loads((workdir / "result.json").read_text()),
        "command": "python " + " ".join(cmd[1:]).replace(str(REPO) + "/", ""),
        "wall_s": time.time() - t0,
        "load_before": load0,
        "load_after": _load(),
    }
    done.write_text(json.dumps(record, indent=2) + "\n")
    return record


SMOKE_SIZES = {
    "data.max_source_len": 24,
    "data.max_target_len": 24,
    "model.max_len": 24,
    "model.d_model": 32,
    "model.d_ff": 64,
    "model.num_layers": 1,
    "model.decoder_layers": 1,
    "data.batch_size": 8,
    "train.eval_batch_size": 8,
}


def _decode_speed(workdir: Path, n: int, rounds: int) -> dict:
    """Target tokens/s of beam search with the KV cache vs recomputation (interleaved)."""
    import jax
    import numpy as np

    from seqjax import data as data_lib
    from seqjax.tasks import seq2seq_decode
    from seqjax.train import setup

    run, state, _ = setup.restore_latest(str(workdir))
    params = state["params"]
    # The first n test sources that fit the model (ids + EOS <= data.max_source_len).
    limit = int(run.config.data.max_source_len)
    fits = [s for s in data_lib.references(run.config.data, "test", side="source")
            if len(run.info.encode(s)) + 1 <= limit]  # fmt: skip
    source_BS = seq2seq_decode.encode_sources(run, fits[:n])
    d = run.config.data
    cfg = run.model_cfg
    kw = dict(beam_size=int(run.config.eval.beam_size), alpha=float(run.config.eval.length_penalty),
              max_len=int(d.max_target_len), eos_id=int(run.info.eos_id))  # fmt: skip
    cached = seq2seq_decode.make_translate_fn(cfg, **kw)
    # The same model and search, the decoder recomputed over the whole prefix every step.
    recompute = seq2seq_decode.make_translate_fn(cfg, **kw, force_recompute=True)
    fns = {"kv_cache": cached, "recompute": recompute}
    out = {k: [] for k in fns}
    tokens = {}
    for name, fn in fns.items():  # compile, and the outputs to compare
        toks, _ = fn(params, source_BS)
        tokens[name] = np.asarray(jax.block_until_ready(toks))
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            jax.block_until_ready(fn(params, source_BS))
            out[name].append(time.perf_counter() - t0)
    generated = int((tokens["kv_cache"] != 0).sum())
    res = {
        name: {"median_s": statistics.median(ts), "tokens_per_s": generated / statistics.median(ts)}
        for name, ts in out.items()
    }
    res["same_output"] = bool((tokens["kv_cache"] == tokens["recompute"]).all())
    res["sources"], res["generated_tokens"], res["load"] = n, generated, _load()
    res["speedup"] = res["recompute"]["median_s"] / res["kv_cache"]["median_s"]
    return res


def _markdown(rows: list[dict], speed: dict | None, scale: str, steps: int) -> str:
    lines = [
        f"# Translation, software_l10n en-de, {scale} scale ({steps} steps per model)",
        "",
        "Test split (whole), beam 4, alpha 0.6, sacreBLEU on detokenised output "
        f"(`{rows[0]['bleu_signature']}`)."
        if rows
        else "",
        "",
        "| model | params | test BLEU | test chrF | test NLL | train wall s | load (1 min) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['label']} (`{r['variant']}`) | {r['params']:,} | {r['bleu']:.2f} | "
            f"{r['chrf']:.2f} | {r['nll']:.3f} | {r['wall_s']:.0f} | "
            f"{r['load_before']:.1f} -> {r['load_after']:.1f} |"
        )
    lines += ["", "Paper (context, not a denominator: another data set and scale):", ""]
    lines += ["| model | data | BLEU |", "|---|---|---:|"]
    lines += [f"| {m} | {d} (needs an accelerator: configs/translation.py:"
              f"{'big' if 'big' in m else 'base'}) | {b} |" for m, d, b in PAPER]  # fmt: skip
    if speed:
        lines += [
            "",
            f"## Decoding speed (dense model, {speed['sources']} test sources, beam 4, "
            f"interleaved medians, load {speed['load']:.1f})",
            "",
            "| decoder | median s | target tokens/s |",
            "|---|---:|---:|",
        ]
        for name in ("kv_cache", "recompute"):
            s = speed[name]
            lines.append(f"| {name} | {s['median_s']:.3f} | {s['tokens_per_s']:,.0f} |")
        lines += ["", f"KV cache / recomputation speed-up: **{speed['speedup']:.2f}x**; "
                  f"identical outputs: {speed['same_output']}."]  # fmt: skip
    lines += ["", "Commands:", ""] + [f"    {r['command']}" for r in rows]
    return "\n".join(lines) + "\n"


def plot(payload: dict, path: Path) -> None:
    """BLEU and chrF per variant (``experiments/replot.py`` redraws it from the JSON)."""
    loaded = any(r["load_before"] > 1.5 for r in payload["rows"])
    _plot(payload["rows"], path, payload["scale"], payload["steps"], loaded)


def _plot(rows: list[dict], path: Path, scale: str, steps: int, loaded: bool) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    x = range(len(rows))
    w = 0.38
    ax.bar([i - w / 2 for i in x], [r["bleu"] for r in rows], w, label="BLEU")
    ax.bar([i + w / 2 for i in x], [r["chrf"] for r in rows], w, label="chrF")
    short = {"cpu": "dense", "reversible": "reversible", "lsh_encoder": "LSH encoder",
             "sparse_encoder": "sparse encoder"}  # fmt: skip
    ax.set_xticks(list(x), [short.get(r["variant"], r["variant"]) for r in rows])
    ax.set_ylabel("score (test split, sacreBLEU)")
    title = (f"Translation, software_l10n en-de test split: {scale} scale, {steps} steps each, "
             "beam 4, alpha 0.6")  # fmt: skip
    if loaded:
        title += "\n(trained while the machine was loaded: this changes times, not scores)"
    ax.set_title(title, fontsize=10)
    ax.legend(loc="upper right", framealpha=0.9)
    ax.set_ylim(0, max([r["chrf"] for r in rows] + [1]) * 1.25)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scale", choices=sorted(SCALES), default="cpu")
    p.add_argument("--steps", type=int, default=None, help="training steps per model")
    p.add_argument("--variants", default=None, help=f"comma-separated, of {','.join(VARIANTS)}")
    p.add_argument("--workdirs", default=str(REPO / "workdirs" / "translation"))
    p.add_argument("--out", default=str(HERE / "results"))
    args = p.parse_args(argv)
    scale = SCALES[args.scale]
    steps = args.steps or scale["steps"]
    variants = args.variants.split(",") if args.variants else scale["variants"]
    for v in variants:
        if v not in VARIANTS:
            p.error(f"--variants: {v!r} is not one of {', '.join(VARIANTS)}")
    root = Path(args.workdirs) / args.scale
    rows = []
    for v in variants:
        print(f"[{time.strftime('%H:%M:%S')}] training {v} ({steps} steps) ...", flush=True)
        t = _train(v, steps, root / v, args.scale == "smoke", [])
        test = t["result"]["test"]
        params = _count_params(root / v)
        rows.append({"variant": v, "label": LABELS[v], "params": params, **t,
                     "bleu": test["bleu"], "chrf": test["chrf"], "nll": test["nll"],
                     "bleu_signature": test["bleu_signature"]})  # fmt: skip
        print(f"    BLEU {test['bleu']:.2f} chrF {test['chrf']:.2f} ({t['wall_s']:.0f} s)")
    speed = None
    if "cpu" in variants:
        print(f"[{time.strftime('%H:%M:%S')}] decoding speed (cache vs recompute) ...", flush=True)
        speed = _decode_speed(root / "cpu", scale["decode_n"], scale["rounds"])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"translation_{args.scale}"
    for r in rows:
        r.pop("result", None)
    record = {"scale": args.scale, "steps": steps, "rows": rows, "decode_speed": speed,
              "paper": PAPER, "cpu_count": os.cpu_count()}  # fmt: skip
    stem.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")
    stem.with_suffix(".md").write_text(_markdown(rows, speed, args.scale, steps))
    loaded = any(r["load_before"] > 1.5 for r in rows)
    _plot(rows, stem.with_suffix(".png"), args.scale, steps, loaded)
    print(stem.with_suffix(".md").read_text())
    return 0


def _count_params(workdir: Path) -> int:
    text = (workdir / "sharding.txt").read_text()
    for line in text.splitlines():
        if line.startswith("parameters:"):
            return int(line.split(":")[1].replace(",", ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
