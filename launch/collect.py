"""Gathers the runs of a sweep into tables (markdown + CSV) and plots of one metric.

    python launch/collect.py --workdir workdirs/sweep --metric validation/bits_per_char
    python launch/collect.py --workdir workdirs/sweep --metric test/accuracy  # higher is best
    python launch/collect.py ... --metric my/score --direction max

Reads ``WORKDIR/sweep.json`` (written by ``launch/sweep.py``) or, without it, every
subfolder holding a ``metrics.jsonl``. "best" follows the metric's direction: accuracies are
maximized; losses, bits per character/byte and perplexities minimized; any other metric
needs ``--direction``. Runs that differ only in their seed (``config.seed``) form one point:
the tables and the plot give the mean ± standard deviation of the final value over seeds.

Writes ``summary.md``/``summary.csv`` (one row per run), ``points.md``/``points.csv`` (one row
per swept point, over seeds), ``summary.png`` (the metric against the step, one line per
run) and ``final.png`` (the final metric against the swept value, error bars = std over
seeds).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from seqjax import bench  # noqa: E402
from seqjax.train import paths  # noqa: E402
from seqjax.train.metrics import read_metrics  # noqa: E402

_MAXIMIZED = ("accuracy", "acc", "f1", "auc", "examples_per_s", "tokens_per_s", "steps_per_s")
_MINIMIZED = ("loss", "bits_per_char", "bits_per_byte", "perplexity", "error", "nll")


def direction(metric: str, given: str | None = None) -> str:
    """'min' or 'max' for ``metric`` (``given`` wins; else from the metric's name)."""
    if given is not None:
        if given not in ("min", "max"):
            raise ValueError(f"--direction={given!r}; valid: min, max")
        return given
    name = metric.rsplit("/", 1)[-1].lower()
    if name in _MAXIMIZED or name.endswith("accuracy"):
        return "max"
    if name in _MINIMIZED or name.endswith("loss"):
        return "min"
    raise ValueError(
        f"cannot tell whether {metric!r} is better high or low; pass --direction min or max"
    )


def _is_seed(key: str) -> bool:
    return key.split(".")[-1] == "seed"


def _runs(workdir: str) -> list[dict]:
    base = paths.workdir_path(workdir)
    sweep_file = base / "sweep.json"
    if sweep_file.exists():
        return json.loads(sweep_file.read_text())
    return [
        {"name": p.parent.name, "workdir": str(p.parent), "overrides": {}}
        for p in sorted(base.glob("*/metrics.jsonl"))
    ]


def collect(workdir: str, metric: str, direction_: str | None = None) -> tuple[list[dict], dict]:
    """One row per run (overrides, steps, last and best value) and the curves."""
    best_of = max if direction(metric, direction_) == "max" else min
    runs = _runs(workdir)
    if not runs:
        raise FileNotFoundError(f"no runs under {workdir}: no sweep.json and no */metrics.jsonl")
    rows, curves = [], {}
    for run in runs:
        lines = read_metrics(run["workdir"])
        points = [(m["step"], m[metric]) for m in lines if metric in m]
        row = {"run": run["name"], **{k.split(".")[-1]: v for k, v in run["overrides"].items()}}
        row["steps"] = max((m["step"] for m in lines), default=None)
        row[f"last {metric}"] = points[-1][1] if points else None
        row[f"best {metric}"] = best_of(v for _, v in points) if points else None
        row["_overrides"] = dict(run["overrides"])
        rows.append(row)
        curves[run["name"]] = ([s for s, _ in points], [v for _, v in points])
    return rows, curves


def aggregate(rows: list[dict], metric: str) -> list[dict]:
    """One row per swept point (overrides without the seed): n, mean and std (ddof=1) of the
    final value over the point's seeds."""
    groups: dict[str, dict] = {}
    for row in rows:
        point = {k: v for k, v in row["_overrides"].items() if not _is_seed(k)}
        key = json.dumps(point, sort_keys=True, default=str)
        group = groups.setdefault(key, {"point": point, "values": []})
        if row[f"last {metric}"] is not None:
            group["values"].append(float(row[f"last {metric}"]))
    out = []
    for group in groups.values():
        vals = group["values"]
        n = len(vals)
        mean = sum(vals) / n if n else None
        std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1)) if n > 1 else 0.0
        short = {k.split(".")[-1]: v for k, v in group["point"].items()}
        out.append({**short, "seeds": n, "mean": mean, "std": std if n else None})
    return out


def plot_final(path, points: list[dict], metric: str) -> None:
    """Final metric (mean ± std over seeds) against the first swept field; one line per
    combination of the other fields."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fields = [k for k in points[0] if k not in ("seeds", "mean", "std")] if points else []
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    x_field = fields[0] if fields else None
    numeric = x_field is not None and all(
        isinstance(p[x_field], int | float) and not isinstance(p[x_field], bool) for p in points
    )
    labels = sorted({str(p[x_field]) for p in points}) if x_field and not numeric else []
    lines: dict[str, list] = {}
    for p in points:
        if p["mean"] is None:
            continue
        rest = ", ".join(f"{k}={p[k]}" for k in fields[1:]) or metric
        x = p[x_field] if numeric else (labels.index(str(p[x_field])) if x_field else 0)
        lines.setdefault(rest, []).append((x, p["mean"], p["std"]))
    for label, pts in lines.items():
        pts.sort()
        xs, ys, es = zip(*pts)
        ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=label)
    if labels:
        ax.set_xticks(range(len(labels)), labels)
    ax.set_xlabel(x_field or "run")
    ax.set_ylabel(f"final {metric} (mean ± std over seeds)")
    ax.set_title(f"final {metric} by swept value")
    if len(lines) > 1:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _write_table(out: Path, name: str, rows: list[dict]) -> str:
    columns = list(dict.fromkeys(k for r in rows for k in r if not k.startswith("_")))
    md = bench.markdown_table(rows, columns)
    (out / f"{name}.md").write_text(md + "\n")
    with open(out / f"{name}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return md


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument(
        "--metric", default="validation/bits_per_char", help="a key of metrics.jsonl"
    )
    parser.add_argument(
        "--direction",
        choices=("min", "max"),
        default=None,
        help="which end is best (default: from the metric's name)",
    )
    parser.add_argument("--out", default=None, help="output folder (default: WORKDIR if local)")
    args = parser.parse_args(argv)
    try:
        rows, curves = collect(args.workdir, args.metric, args.direction)
    except ValueError as e:
        parser.error(str(e))
    default_out = (
        args.workdir
        if not paths.is_remote(args.workdir)
        else "collect_" + args.workdir.rstrip("/").rsplit("/", 1)[-1]
    )
    out = Path(str(paths.workdir_path(args.out or default_out)))
    out.mkdir(parents=True, exist_ok=True)
    md = _write_table(out, "summary", rows)
    points = aggregate(rows, args.metric)
    points_md = _write_table(out, "points", points)
    bench.plot_lines(
        out / "summary.png",
        curves,
        xlabel="step",
        ylabel=args.metric,
        title=f"{args.metric} by run",
        logx=False,
        logy=False,
    )
    plot_final(out / "final.png", points, args.metric)
    print(md)
    print(f"\nfinal {args.metric} by point (mean ± std over seeds):\n{points_md}")
    print(f"\nwrote {out}/summary.{{md,csv,png}}, points.{{md,csv}}, final.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
