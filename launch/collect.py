"""Gathers the runs of a sweep into tables (markdown + CSV) and plots of one metric.

    python launch/collect.py --workdir workdirs/sweep --metric validation/bits_per_char
    python launch/collect.py --workdir workdirs/sweep --metric test/accuracy  # higher is best
    python launch/collect.py ... --metric my/score --direction max

Reads ``WORKDIR/sweep.json`` (written by ``launch/sweep.py``) or, without it, every
subfolder holding a ``metrics.jsonl``. "best" follows the metric's direction: accuracies are
maximized; losses, bits per character/byte and perplexities minimized; any other metric
needs ``--direction``. An unknown metric is refused with the list of the recorded ones.
Runs that differ only in their seed (``config.seed``) form one point: the tables and the
plot give the mean ± standard deviation over seeds.

Every value is reported with the step it comes from: "last" is the metric's last recorded
value (at ``last step``, which is not the run's final step when the metric was evaluated
earlier: ``steps trained`` says how far the run went), "best" the best one (``best step``).

Writes ``summary.md``/``summary.csv`` (one row per run), ``points.md``/``points.csv`` (one row
per swept point, over seeds), ``summary.png`` (the metric against the step, one curve per
run; the training loss beside it when the metric has few points) and ``final.png`` (the
last value against the swept field; fields swept together share the x axis, other fields
give one series each; error bars = std over seeds). Plot titles name the sweep.
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
_STATS = ("seeds", "mean", "std", "last step")


class CollectError(ValueError):
    """A problem with collect's input that one sentence explains (exit status 2)."""


def direction(metric: str, given: str | None = None) -> str:
    """'min' or 'max' for ``metric`` (``given`` wins; else from the metric's name)."""
    if given is not None:
        if given not in ("min", "max"):
            raise CollectError(f"--direction={given!r}; valid: min, max")
        return given
    name = metric.rsplit("/", 1)[-1].lower()
    if name in _MAXIMIZED or name.endswith("accuracy"):
        return "max"
    if name in _MINIMIZED or name.endswith("loss"):
        return "min"
    raise CollectError(
        f"cannot tell whether {metric!r} is better high or low; pass --direction min or max"
    )


def _is_seed(key: str) -> bool:
    return key.split(".")[-1] == "seed"


def _runs(workdir: str) -> list[dict]:
    base = paths.workdir_path(workdir)
    if not base.exists():
        raise CollectError(f"--workdir {workdir} does not exist (give the sweep's base folder)")
    sweep_file = base / "sweep.json"
    if sweep_file.exists():
        return json.loads(sweep_file.read_text())
    runs = [
        {"name": p.parent.name, "workdir": str(p.parent), "overrides": {}}
        for p in sorted(base.glob("*/metrics.jsonl"))
    ]
    if not runs:
        raise CollectError(
            f"--workdir {workdir} holds no sweep.json and no */metrics.jsonl: not a sweep folder"
        )
    return runs


def sweep_name(workdir: str) -> str:
    """``<folder> (<config>)`` for plot titles: the sweep's folder and, from sweep.json,
    its config file."""
    base = paths.workdir_path(workdir)
    name = base.name or str(base)
    try:
        runs = json.loads((base / "sweep.json").read_text())
        config = next(a for a in runs[0]["command"] if a.startswith("--config="))
        return f"{name} ({config.split('=', 1)[1]})"
    except (OSError, ValueError, KeyError, IndexError, StopIteration):
        return name


def _series(lines: list[dict], metric: str) -> list[tuple[int, float]]:
    """``(step, value)`` of ``metric``, sorted by step; a later line wins per step (a
    resumed run appends)."""
    by_step = {m["step"]: m[metric] for m in lines if metric in m and m[metric] is not None}
    return sorted(by_step.items())


def available_metrics(run_lines: list[list[dict]]) -> list[str]:
    return sorted({k for lines in run_lines for m in lines for k in m if k != "step"})


def collect(workdir: str, metric: str, direction_: str | None = None) -> tuple[list[dict], dict]:
    """One row per run (overrides, steps trained, last and best value with their steps)
    and the curves ``{run: (steps, values)}``.

    Raises ``CollectError`` for a missing workdir or a metric no run recorded (listing the
    recorded ones), before the direction is asked for.
    """
    runs = _runs(workdir)
    run_lines = [read_metrics(run["workdir"]) for run in runs]
    known = available_metrics(run_lines)
    if metric not in known:
        listed = ", ".join(known) if known else "none (no run wrote metrics.jsonl yet)"
        raise CollectError(f"--metric {metric!r} is not recorded by any run; recorded: {listed}")
    pick = max if direction(metric, direction_) == "max" else min
    rows, curves = [], {}
    for run, lines in zip(runs, run_lines):
        points = _series(lines, metric)
        row = {"run": run["name"], **{k.split(".")[-1]: v for k, v in run["overrides"].items()}}
        row["steps trained"] = max((m["step"] for m in lines), default=None)
        last = points[-1] if points else (None, None)
        best = pick(points, key=lambda p: p[1]) if points else (None, None)
        row[f"last {metric}"], row["last step"] = last[1], last[0]
        row[f"best {metric}"], row["best step"] = best[1], best[0]
        row["_overrides"] = dict(run["overrides"])
        rows.append(row)
        curves[run["name"]] = ([s for s, _ in points], [v for _, v in points])
    return rows, curves


def aggregate(rows: list[dict], metric: str) -> list[dict]:
    """One row per swept point (overrides without the seed): n, mean and std (ddof=1) of the
    last value over the point's seeds, and the step(s) those values come from."""
    groups: dict[str, dict] = {}
    for row in rows:
        point = {k: v for k, v in row["_overrides"].items() if not _is_seed(k)}
        key = json.dumps(point, sort_keys=True, default=str)
        group = groups.setdefault(key, {"point": point, "values": [], "steps": set()})
        if row[f"last {metric}"] is not None:
            group["values"].append(float(row[f"last {metric}"]))
            group["steps"].add(row["last step"])
    out = []
    for group in groups.values():
        vals = group["values"]
        n = len(vals)
        mean = sum(vals) / n if n else None
        std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1)) if n > 1 else 0.0
        short = {k.split(".")[-1]: v for k, v in group["point"].items()}
        steps = "/".join(str(s) for s in sorted(group["steps"])) or None
        out.append(
            {**short, "seeds": n, "mean": mean, "std": std if n else None, "last step": steps}
        )
    return out


def steps_label(steps) -> str:
    """``step 30`` or ``steps 30-60`` for a collection of steps."""
    steps = sorted({int(s) for s in steps if s is not None})
    if not steps:
        return "no step"
    return f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]}"


def _is_number(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def axis_fields(points: list[dict]) -> tuple[list[str], list[str]]:
    """``(x_fields, series_fields)``: the first swept field and every field swept together
    with it (its value a function of the first's, as in ``num_layers=2,d_model=128``) share
    the x axis; each remaining field combination is one series. Fields with the same value
    in every run are left out."""
    fields = [k for k in (points[0] if points else {}) if k not in _STATS]
    varying = [k for k in fields if len({str(p.get(k)) for p in points}) > 1]
    fields = varying or fields  # a field every run shares (a --set extra) is no axis
    if not fields:
        return [], []
    first, together, rest = fields[0], [fields[0]], []
    for field in fields[1:]:
        seen: dict[str, str] = {}
        same = all(seen.setdefault(str(p[first]), str(p[field])) == str(p[field]) for p in points)
        reverse: dict[str, str] = {}
        same = same and all(
            reverse.setdefault(str(p[field]), str(p[first])) == str(p[first]) for p in points
        )
        (together if same else rest).append(field)
    return together, rest


def plot_final(path, points: list[dict], metric: str, sweep: str = "") -> None:
    """Last value (mean ± std over seeds) against the swept field(s); one series per
    combination of the fields not swept together with the first."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x_fields, series_fields = axis_fields(points)
    shown = [p for p in points if p["mean"] is not None]

    def x_of(p):
        return p[x_fields[0]] if x_fields else "all runs"

    numeric = bool(x_fields) and all(_is_number(x_of(p)) for p in shown)
    order = sorted({x_of(p) for p in shown}, key=lambda v: (not _is_number(v), str(v)))
    if numeric:
        order.sort()
    ticks = {}
    for p in shown:  # tick label: every field on the x axis
        ticks[x_of(p)] = "\n".join(str(p[f]) for f in x_fields) if x_fields else "all runs"
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    lines: dict[str, list] = {}
    for p in shown:
        label = ", ".join(f"{k}={p[k]}" for k in series_fields) or metric
        x = x_of(p) if numeric else order.index(x_of(p))
        lines.setdefault(label, []).append((x, p["mean"], p["std"]))
    for label, pts in lines.items():
        pts.sort()
        xs, ys, es = zip(*pts)
        ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=label)
    if numeric:  # a tick at each swept value (no 2.25 layers)
        ax.set_xticks(order, [ticks[v] for v in order])
    else:
        ax.set_xticks(range(len(order)), [ticks[v] for v in order])
    ax.set_xlabel(" / ".join(x_fields) if x_fields else "run")
    steps = steps_label(s for p in shown for s in str(p["last step"]).split("/") if s != "None")
    seeds = max((p["seeds"] for p in shown), default=0)
    spread = f" (mean ± std, {seeds} seeds)" if seeds > 1 else ""
    ax.set_ylabel(f"{metric.rsplit('/', 1)[-1]}, last value{spread}")
    title = f"sweep {sweep}: {metric} at its last evaluation ({steps})"
    ax.set_title(title if len(title) < 70 else title.replace(": ", ":\n", 1), fontsize=10)
    ax.grid(True, alpha=0.3)
    if len(lines) > 1:
        ax.legend(fontsize=8, title=", ".join(series_fields), title_fontsize=8)
    if not lines:
        ax.text(0.5, 0.5, f"no run recorded {metric}", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_curves(
    path, curves: dict, metric: str, sweep: str = "", train=None, last_step=None
) -> None:
    """``metric`` against the step, one curve per run (markers at each evaluation); with
    ``train`` (``{run: (steps, losses)}``) a second panel shows the training loss. The
    step axis runs from 0 to ``last_step`` (the furthest run), so an evaluation at step 30
    of 60 is seen as such."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    panels = 2 if train else 1
    fig, axes = plt.subplots(1, panels, figsize=(6.4 * panels, 4.4), squeeze=False, sharex=True)
    if last_step:
        axes[0][0].set_xlim(0, last_step * 1.03)
    axes[0][0].xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax, data, name in zip(axes[0], (curves, train), (metric, "train/loss")):
        for run, (xs, ys) in data.items():
            ax.plot(xs, ys, marker="o", markersize=4, label=run)
        ax.set_xlabel("step")
        ax.set_ylabel(name)
        ax.grid(True, alpha=0.3)
        evals = max((len(xs) for xs, _ in data.values()), default=0)
        ax.set_title(f"{name} by step ({evals} point{'s' * (evals != 1)} per run)", fontsize=10)
        if len(data) > 1:
            ax.legend(fontsize=7)
    fig.suptitle(f"sweep {sweep}: {metric} per run", fontsize=11)
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


def _train_curves(rows: list[dict], workdir: str, curves: dict) -> dict | None:
    """The runs' ``train/loss`` curves, when the metric has at most 3 points per run."""
    if max((len(xs) for xs, _ in curves.values()), default=0) > 3:
        return None
    runs = {r["name"]: r for r in _runs(workdir)}
    train = {}
    for row in rows:
        pts = _series(read_metrics(runs[row["run"]]["workdir"]), "train/loss")
        if pts:
            train[row["run"]] = ([s for s, _ in pts], [v for _, v in pts])
    return train or None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, help="the sweep's base folder")
    parser.add_argument(
        "--metric",
        default="validation/bits_per_char",
        help="a key of metrics.jsonl (default: %(default)s)",
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
    except CollectError as e:
        print(f"error: [collect] {e}", file=sys.stderr)
        return 2
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
    name = sweep_name(args.workdir)
    train = None if args.metric == "train/loss" else _train_curves(rows, args.workdir, curves)
    last_step = max((r["steps trained"] or 0 for r in rows), default=0)
    plot_curves(out / "summary.png", curves, args.metric, name, train, last_step)
    plot_final(out / "final.png", points, args.metric, name)
    print(md)
    print(f"\n{args.metric}, last value by point (mean ± std over seeds):\n{points_md}")
    print(f"\nwrote {out}/summary.{{md,csv,png}}, points.{{md,csv}}, final.png", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
