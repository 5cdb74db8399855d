"""Gathers the runs of a sweep into one table (markdown + CSV) and a plot of one metric.

    python launch/collect.py --workdir workdirs/sweep --metric validation/bits_per_char

Reads ``WORKDIR/sweep.json`` (written by ``launch/sweep.py``) or, without it, every
subfolder holding a ``metrics.jsonl``.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from seqjax import bench  # noqa: E402
from seqjax.train.metrics import read_metrics  # noqa: E402


def collect(workdir: str, metric: str) -> tuple[list[dict], dict]:
    base = Path(workdir)
    sweep_file = base / "sweep.json"
    if sweep_file.exists():
        runs = json.loads(sweep_file.read_text())
    else:
        runs = [
            {"name": p.parent.name, "workdir": str(p.parent), "overrides": {}}
            for p in sorted(base.glob("*/metrics.jsonl"))
        ]
    if not runs:
        raise FileNotFoundError(f"no runs under {workdir}: no sweep.json and no */metrics.jsonl")
    rows, curves = [], {}
    for run in runs:
        lines = (
            read_metrics(run["workdir"]) if Path(run["workdir"], "metrics.jsonl").exists() else []
        )
        points = [(m["step"], m[metric]) for m in lines if metric in m]
        row = {"run": run["name"], **{k.split(".")[-1]: v for k, v in run["overrides"].items()}}
        row["steps"] = max((m["step"] for m in lines), default=None)
        row[f"last {metric}"] = points[-1][1] if points else None
        row[f"best {metric}"] = min(v for _, v in points) if points else None
        rows.append(row)
        curves[run["name"]] = ([s for s, _ in points], [v for _, v in points])
    return rows, curves


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument(
        "--metric", default="validation/bits_per_char", help="a key of metrics.jsonl"
    )
    parser.add_argument("--out", default=None, help="output folder (default: WORKDIR)")
    args = parser.parse_args(argv)
    rows, curves = collect(args.workdir, args.metric)
    out = Path(args.out or args.workdir)
    out.mkdir(parents=True, exist_ok=True)
    columns = list(dict.fromkeys(k for r in rows for k in r))
    md = bench.markdown_table(rows, columns)
    (out / "summary.md").write_text(md + "\n")
    with open(out / "summary.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    bench.plot_lines(
        out / "summary.png",
        curves,
        xlabel="step",
        ylabel=args.metric,
        title=f"{args.metric} by run",
        logx=False,
        logy=False,
    )
    print(md)
    print(f"\nwrote {out / 'summary.md'}, {out / 'summary.csv'}, {out / 'summary.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
