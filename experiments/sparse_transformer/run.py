"""Sparse Transformer vs dense attention: forward+backward time and memory of one layer.

Child et al. 2019, Table 2: at 12,288 context with stride 128, the fixed pattern ran 2.4x
and the strided 3.7x faster per iteration than dense. This script times one attention
layer (batch 1, 8 heads x 64, causal, float32) for T = 1K..16K with stride ≈ sqrt(T) (128
at 12,288), for ``dense`` (``reference`` and ``chunked``) and ``sparse_strided`` /
``sparse_fixed`` (``masked`` and ``blocksparse``; fixed with c = l / 4, the paper's c = 32
at l = 128). All implementations of one T are timed side by side, interleaved rep by rep.
Memory is XLA's prediction (``compiled.memory_analysis()``: arguments + outputs + temps);
configurations predicted above ``--max_gb`` are recorded as "does not fit" and not run.

    python experiments/sparse_transformer/run.py                # cpu scale (~20 min)
    python experiments/sparse_transformer/run.py --scale smoke  # seconds

Writes ``results/<scale>.json``, ``results/<scale>.md`` and ``results/<scale>.png``.

Legend: B batch, T sequence length, H heads, D head dim, l stride.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from seqjax import attention, environment

HERE = Path(__file__).resolve().parent
SCALES = {
    # scale: (sequence lengths, timed reps, heads, head dim)
    "smoke": ((256,), 1, 2, 16),
    "cpu": ((1024, 2048, 4096, 8192, 12288, 16384), 2, 8, 64),
    "gpu": ((1024, 2048, 4096, 8192, 12288, 16384, 32768), 10, 8, 64),
}
METHODS = (
    ("dense", "reference"),
    ("dense", "chunked"),
    ("sparse_strided", "masked"),
    ("sparse_strided", "blocksparse"),
    ("sparse_fixed", "masked"),
    ("sparse_fixed", "blocksparse"),
)


def stride_for(t: int) -> int:
    """128 at the paper's 12,288; otherwise the power of two nearest sqrt(T)."""
    return 128 if t == 12288 else int(2 ** round(np.log2(np.sqrt(t))))


def options(name: str, impl: str, t: int) -> dict:
    opts = {"implementation": impl}
    if name.startswith("sparse"):
        opts["stride"] = stride_for(t)
    if name == "sparse_fixed":
        opts["c"] = max(1, stride_for(t) // 4)
    return opts


def build(name: str, impl: str, t: int, h: int, d: int):
    """Compiled fwd+bwd step ``(q, k, v, ct) -> (dq, dk, dv)`` and its predicted bytes."""
    fn = attention.get(name)
    opts = options(name, impl, t)

    def loss(q, k, v, ct):
        return jnp.sum(fn(q, k, v, causal=True, **opts) * ct)

    spec = jax.ShapeDtypeStruct((1, t, h, d), jnp.float32)
    compiled = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(spec, spec, spec, spec).compile()
    mem = compiled.memory_analysis()
    predicted = None
    if mem is not None:
        predicted = (
            mem.argument_size_in_bytes
            + mem.output_size_in_bytes
            + mem.temp_size_in_bytes
            - mem.alias_size_in_bytes
        )
    return compiled, predicted


def run_length(t: int, reps: int, h: int, d: int, max_bytes: float) -> list[dict]:
    rng = np.random.default_rng(t)
    args = [jnp.asarray(rng.standard_normal((1, t, h, d)), jnp.float32) for _ in range(4)]
    rows, runnable = [], {}
    for name, impl in METHODS:
        row = {"seq_len": t, "mechanism": name, "implementation": impl}
        row.update({k: v for k, v in options(name, impl, t).items() if k != "implementation"})
        t0 = time.perf_counter()
        compiled, predicted = build(name, impl, t, h, d)
        row["compile_s"] = time.perf_counter() - t0
        row["predicted_gb"] = None if predicted is None else predicted / 1e9
        if predicted is not None and predicted > max_bytes:
            row["status"] = "does not fit"
        else:
            row["status"] = "ok"
            if t <= 4096:  # warm-up (long runs are dominated by compute, not first-call costs)
                jax.block_until_ready(compiled(*args))
            runnable[(name, impl)] = compiled
            row["times_s"] = []
        rows.append(row)
        print(f"T={t} {name}/{impl}: {row['status']}, {row['predicted_gb']:.3f} GB", flush=True)
    for _ in range(reps):  # interleaved, so load changes hit every method alike
        for row in rows:
            key = (row["mechanism"], row["implementation"])
            if key in runnable:
                t0 = time.perf_counter()
                jax.block_until_ready(runnable[key](*args))
                row["times_s"].append(time.perf_counter() - t0)
    dense = [r["median_s"] for r in _medians(rows) if r["mechanism"] == "dense" and "median_s" in r]
    for row in rows:
        if "median_s" in row and dense:
            row["speedup_vs_best_dense"] = min(dense) / row["median_s"]
    return rows


def _medians(rows):
    for row in rows:
        if row.get("times_s"):
            row["median_s"] = float(np.median(row["times_s"]))
    return rows


def machine() -> dict:
    """``seqjax.environment.capture()`` with ``device`` (the kind of the first device)."""
    env = environment.capture()
    return env | {"device": env["device_kind"]}


# Child et al. 2019 (Sparse Transformer), Table 2: speed-up over dense attention at 12,288.
PAPER_SPEEDUP_12K = {"sparse_strided": 3.7, "sparse_fixed": 2.4}


def summary_rows(payload: dict) -> list[dict]:
    """Paper-vs-ours rows for ``experiments/summarize.py``: block-sparse speed-up over the
    best dense implementation at T = 12,288 (Child et al. 2019, Table 2)."""
    out = []
    for r in payload["rows"]:
        paper = PAPER_SPEEDUP_12K.get(r["mechanism"])
        if r["seq_len"] != 12288 or r["implementation"] != "blocksparse" or paper is None:
            continue
        if r.get("speedup_vs_best_dense") is None:
            continue
        out.append({
            "study": f"sparse_transformer {r['mechanism']} vs dense at 12,288 (fwd+bwd)",
            "paper_figure": "Child et al. 2019, Table 2 (time per iteration)",
            "paper": paper,
            "ours": round(r["speedup_vs_best_dense"], 2),
            "ratio": round(r["speedup_vs_best_dense"] / paper, 2),
        })  # fmt: skip
    return out


def write_outputs(rows, meta, out: Path, scale: str):
    out.mkdir(parents=True, exist_ok=True)
    payload = {"machine": meta, "rows": rows}
    payload["summary"] = summary_rows(payload)
    (out / f"{scale}.json").write_text(json.dumps(payload, indent=1))
    lines = [
        f"Forward+backward of one causal attention layer, B=1, H={meta['heads']}, "
        f"D={meta['head_dim']}, float32; {meta['device']} ({meta['backend']}), jax "
        f"{meta['versions']['jax']}, {meta['cpu_count']} cores, load average at start "
        f"{(meta['loadavg'] or [math.nan])[0]:.1f}. Speed-up = best dense median / median.",
        "",
        "| T | stride | mechanism | implementation | median s | speed-up vs best dense | "
        "predicted GB |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        med = f"{r['median_s']:.4f}" if "median_s" in r else r["status"]
        sp = f"{r['speedup_vs_best_dense']:.2f}x" if "speedup_vs_best_dense" in r else "-"
        gb = "-" if r["predicted_gb"] is None else f"{r['predicted_gb']:.3f}"
        stride = r.get("stride", "-")
        lines.append(
            f"| {r['seq_len']} | {stride} | {r['mechanism']} | {r['implementation']} | {med} | "
            f"{sp} | {gb} |"
        )
    (out / f"{scale}.md").write_text("\n".join(lines) + "\n")

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import timing_plots  # experiments/timing_plots.py

    timing_plots.sparse_transformer(payload, out / f"{scale}.png")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="cpu")
    parser.add_argument("--max_gb", type=float, default=6.0, help="skip predicted peaks above")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--lengths", default="", help="comma-separated T (default: the scale's)")
    args = parser.parse_args(argv)
    lengths, reps, h, d = SCALES[args.scale]
    if args.lengths:
        lengths = tuple(int(x) for x in args.lengths.split(","))
    meta = machine() | {"heads": h, "head_dim": d, "max_gb": args.max_gb, "scale": args.scale}
    rows = []
    for t in lengths:
        rows += run_length(t, reps, h, d, args.max_gb * 1e9)
    write_outputs(rows, meta, args.out, args.scale)
    print((args.out / f"{args.scale}.md").read_text())
    return rows


if __name__ == "__main__":
    main()
