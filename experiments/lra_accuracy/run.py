"""LRA accuracy: Tay et al. (2020) Table 1, the six tasks and the Avg column.

With no arguments, builds the six-task table (ours vs the paper, one standard error, chance
marked, an Avg column) from the committed results files (``table``; no training). With
``--scale``, trains the LRA classifiers with dense, sparse (fixed), Linformer and LSH attention
(and every other registered Table 1 row named in ``--mechanisms``: ``configs/_lra.py``)
through
``seqjax.train.loop.train_and_evaluate`` (in this process) and writes their test accuracy
next to the paper's Table 1. The base configs are ``configs/lra_listops.py`` and
``configs/lra_text.py`` (the LRA hyper-parameters); each variant only replaces
``config.model.attention`` and its ``attention_options``.

Scales:
  * ``full``: the configs' paper hyper-parameters (ListOps: 96k trees of length 500-2000,
    4 layers x 512 wide, 5k steps; Text: 4K bytes, 4 layers x 256, 20k steps, batch 32),
    evaluated on the whole test split. For accelerators.
  * ``cpu``: the same pipelines at CPU size (deviations in the README): ListOps on 4,000
    generated trees of length 50-500 (T = 512), Text at 256 bytes; 2 layers x 64 wide,
    300 steps of batch 16; the whole test split (ListOps 500 trees; IMDB 25k reviews, read
    as their first 256 bytes with batch 32 so the evaluation takes minutes; ``--tasks
    listops`` is the default at this scale).
  * ``smoke``: ListOps, 128/32/32 short trees (T = 256), dense only, 10 steps (seconds;
    tests run this).

Retrieval (``--tasks retrieval``, ``configs/lra_retrieval.py``): the two-tower model on LRA's
AAN pairs at ``full`` scale; at ``cpu``/``smoke`` scale on the offline **stand-in**
``l10n_pairs`` (English/German message pairs, true or mismatched: not AAN), 128 bytes a
document, 600 (cpu) / 10 (smoke) steps. Image, Pathfinder and Path-X run where this checkout
has their configs (``configs/lra_image.py``, ``lra_pathfinder.py``, ``lra_pathx.py``) and data
sets; otherwise the table shows them as not run, with the reason.

Usage:
    python experiments/lra_accuracy/run.py                              # the table only
    python experiments/lra_accuracy/run.py --scale smoke
    python experiments/lra_accuracy/run.py --scale cpu                  # cpu, ListOps
    python experiments/lra_accuracy/run.py --scale cpu --tasks retrieval \
        --mechanisms dense,linformer                                    # the stand-in
    python experiments/lra_accuracy/run.py --tasks listops,text         # cpu, both
    python experiments/lra_accuracy/run.py --scale full --tasks listops,text

Writes ``results/lra_accuracy_<scale>[_<recipe>][_<tasks>].{json,md,png}`` beside this file
(``_<tasks>`` when they are not the scale's default), and the table ``results/lra_table.
{json,md}``.

Legend: T sequence length (tokens / bytes per example), B batch.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import ml_collections

from seqjax import attention as attention_lib
from seqjax import bench
from seqjax.configs import _lra as lra
from seqjax.configs import common as config_files
from seqjax.train import defaults, loop, optim

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import plotting  # noqa: E402  (experiments/plotting.py)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import six_tasks  # noqa: E402  (the six-task table, beside this file)

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SCALES = ("smoke", "cpu", "full")
RECIPES = ("lra", "adamw")
TASKS = {
    "listops": "lra_listops.py",
    "text": "lra_text.py",
    "retrieval": "lra_retrieval.py",
    "image": "lra_image.py",
    "pathfinder": "lra_pathfinder.py",
    "pathx": "lra_pathx.py",
}
# What the CPU-scale runs train on where it is not the paper's data.
STAND_IN = {"retrieval": "stand-in: en/de message pairs, not AAN"}

# Tay et al. 2020 (LRA), Table 1: test accuracy %, ListOps and Text.
FIRST = ("dense", "sparse_fixed", "linformer", "lsh")  # the default --mechanisms
PAPER = {
    "dense": {"listops": 36.37, "text": 64.27, "paper_name": "Transformer"},
    "sparse_fixed": {"listops": 17.07, "text": 63.58, "paper_name": "Sparse Trans."},
    "linformer": {"listops": 35.70, "text": 53.94, "paper_name": "Linformer"},
    "lsh": {"listops": 37.27, "text": 56.10, "paper_name": "Reformer"},
}
# Every other Table 1 row seqjax can run (configs/_lra.py), all six tasks.
for _row in lra.ROWS:
    PAPER.setdefault(_row.name, {"paper_name": _row.paper_name})
    for _task in TASKS:
        PAPER[_row.name].setdefault(_task, lra.paper(_row.paper_name, _task))


def task_unavailable(task: str) -> str | None:
    """Why ``task`` cannot run in this checkout (no config file or data set), else None."""
    from seqjax.data import registry

    path = REPO / "configs" / TASKS[task]
    if not path.is_file():
        return f"no configs/{TASKS[task]} in this checkout (the task's data set is not here)"
    name = load_base(task, smoke=True).data.name
    return None if registry.find(name) else f"data set {name!r} is not in seqjax.data"


def options(mechanism: str, t: int, scale: str) -> dict:
    """Attention options of each variant at input length t (the rows beyond the first four:
    ``seqjax.configs.lra.ROWS``)."""
    if mechanism in lra.ROW_BY_NAME and mechanism not in ("dense", "sparse_fixed", "linformer",
                                                          "lsh"):  # fmt: skip
        return lra.ROW_BY_NAME[mechanism].options(t)
    if mechanism == "dense":
        return {"implementation": "auto"}
    if mechanism == "linformer":
        return {"k": 32 if scale == "smoke" else (128 if scale == "cpu" else 256), "max_len": t}
    if mechanism == "lsh":
        return {"n_hashes": 2, "chunk_len": 64}  # Reformer's 2 rounds; chunks of 64
    return {}  # sparse_fixed: stride = power of two nearest sqrt(T), c = stride / 4


def task_variant(task: str, scale: str) -> str | None:
    """The config variant of a task beyond ListOps/Text at ``scale``: ``full`` -> the
    default; ``cpu`` -> ``standin`` (Retrieval), else the config's ``cpu`` variant if it has
    one, else ``smoke``; ``smoke`` -> ``smoke``."""
    if scale == "full":
        return None
    if scale == "smoke":
        return "smoke"
    variants = getattr(config_files.load(REPO / "configs" / TASKS[task]), "VARIANTS", ())
    return next((v for v in ("standin", "cpu") if v in variants), "smoke")


def load_base(task: str, smoke: bool, variant: str | None = None) -> ml_collections.ConfigDict:
    variant = variant or ("smoke" if smoke else None)
    return config_files.load(REPO / "configs" / TASKS[task]).get_config(variant)


def set_recipe(c: ml_collections.ConfigDict, task: str, recipe: str, warmup: int) -> None:
    """The optimizer and pooling of ``recipe`` with ``warmup`` warm-up steps.

    "lra": the configs' (LRA's) Adam, weight decay 0.1 on all parameters, rsqrt schedule and
    CLS pooling, the constant scaled so the rate peaks where LRA's does (ListOps
    0.05 / sqrt(1000), Text 0.05 / sqrt(8000)) after the shorter warm-up. "adamw": the recipe
    of the committed ``*_adamw`` results (AdamW 1e-3 on warm-up + cosine, weight decay 0.01
    on matrices, clip 1.0, mean pooling).
    """
    o = c.optimizer
    if recipe == "lra":
        lra_warmup = 1000 if task == "listops" else 8000
        optim.set_lra_recipe(o, warmup_steps=warmup)
        o.learning_rate = 0.05 * (warmup / lra_warmup) ** 0.5
        c.model.pooling = "cls"
        return
    defaults_o = defaults.optimizer()
    for field in ("name", "schedule", "b1", "b2", "eps", "weight_decay", "weight_decay_mask",
                  "grad_clip_norm", "min_lr_ratio"):  # fmt: skip
        o[field] = defaults_o[field]
    o.learning_rate, o.warmup_steps = 1e-3, warmup
    c.model.pooling = "mean"


def set_length(c: ml_collections.ConfigDict, t: int) -> None:
    """Model inputs of ``t`` tokens: ``t - 1`` data tokens + CLS, or ``t`` (mean pooling)."""
    c.model.max_len = t
    c.data.max_len = t - 1 if c.model.pooling == "cls" else t


def job_config(task: str, mechanism: str, scale: str, tfds_dir: str | None, recipe: str = "lra"):
    if task not in ("listops", "text"):  # the config's own variants carry the CPU sizes
        c = load_base(task, smoke=scale != "full", variant=task_variant(task, scale))
        if scale == "smoke":
            c.train.num_steps = 10
        return _finish(c, mechanism, scale, tfds_dir, own_options=True)
    c = load_base(task, smoke=scale != "full")
    d, m, t = c.data, c.model, c.train
    if scale == "cpu":
        if task == "listops":
            d.listops_train_size, d.listops_validation_size, d.listops_test_size = 4000, 500, 500
        d.batch_size = 16
        set_recipe(c, task, recipe, warmup=30)
        set_length(c, int(m.max_len))
        if task == "text":  # the first 256 bytes of each review: the whole 25k-review test
            set_length(c, 256)  # split is evaluated in minutes instead of an hour
            d.batch_size = 32
        t.num_steps = 300
    if scale == "smoke":  # tiny generated splits of short trees (built in about a second)
        d.listops_train_size, d.listops_validation_size, d.listops_test_size = 128, 32, 32
        d.listops_max_length = 250
        set_recipe(c, task, recipe, warmup=int(c.optimizer.warmup_steps))
        set_length(c, 256)
        d.batch_size = 8
        t.num_steps = 10
    if scale == "full" and recipe != "lra":
        set_recipe(c, task, recipe, warmup=int(c.optimizer.warmup_steps))
        set_length(c, int(m.max_len))
    return _finish(c, mechanism, scale, tfds_dir)


def _finish(c, mechanism: str, scale: str, tfds_dir: str | None, own_options: bool = False):
    """The common end of every job: final test evaluation only, one device, the row's
    attention (a flex row: ``flex`` with its pattern). ``own_options``: a task config that
    sets options for the mechanism keeps them (e.g. LRA Image's sparse stride = one row)."""
    d, m, t = c.data, c.model, c.train
    t.eval_every = 0  # the final test evaluation only
    t.final_eval = True
    if scale != "smoke":  # the cpu rows load a task's smoke variant: test on the whole split
        t.test_max_batches = 0
    t.checkpoint_every = 0
    t.async_checkpointing = False
    c.mesh.data = 1
    if tfds_dir:
        d.data_dir = tfds_dir
    if int(c.optimizer.warmup_steps) > int(t.num_steps):
        c.optimizer.warmup_steps = int(t.num_steps)
    length = int(m.max_len)  # model inputs (with CLS)
    attention = lra.ROW_BY_NAME[mechanism].mechanism if mechanism in lra.ROW_BY_NAME else mechanism
    m.attention = attention
    if attention_lib.registry.capable(attention, "attention_dropout", False):
        m.attention_dropout_rate = 0.0  # no attention matrix to drop (as LRA's own rows)
    if own_options and mechanism == attention and attention in m.attention_options:
        return c  # the task config's own options for this mechanism
    m.attention_options[attention] = ml_collections.ConfigDict(options(mechanism, length, scale))
    return c


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scale", default=None, help=f"one of {SCALES}; none: only the table")
    p.add_argument("--out", default=str(HERE / "results"), help="results folder")
    p.add_argument("--tasks", default=None, help=f"comma-separated of {list(TASKS)}")
    p.add_argument("--mechanisms", default=None, help=f"comma-separated of {list(PAPER)}")
    p.add_argument("--tfds-dir", default=None, help="TFDS data_dir (default: seqjax's)")
    p.add_argument("--recipe", default="lra", help=f"optimizer and pooling: one of {RECIPES}")
    args = p.parse_args(argv)
    if args.scale is None:
        return table(Path(args.out))
    if args.scale not in SCALES:
        raise ValueError(f"--scale={args.scale!r} is not one of {SCALES}")
    if args.recipe not in RECIPES:
        raise ValueError(f"--recipe={args.recipe!r} is not one of {RECIPES}")
    tasks = (args.tasks or ("listops,text" if args.scale == "full" else "listops")).split(",")
    mechs = (args.mechanisms or ("dense" if args.scale == "smoke" else ",".join(FIRST))).split(",")
    for x, valid, flag in ((tasks, TASKS, "--tasks"), (mechs, PAPER, "--mechanisms")):
        for v in x:
            if v not in valid:
                raise ValueError(f"{flag} entry {v!r} is not one of {list(valid)}")
    args.default_tasks = args.tasks is None or tasks == ["listops"]
    args.task_list = tasks
    logging.getLogger().setLevel(logging.WARNING)
    rows, skipped = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for task in tasks:
            why = task_unavailable(task)
            if why:
                print(f"skipping {task}: {why}")
                skipped.append({"task": task, "mechanism": "*", "why": why})
                continue
            for mech in mechs:
                attention = lra.ROW_BY_NAME[mech].mechanism if mech in lra.ROW_BY_NAME else mech
                if attention not in attention_lib.names():
                    why = f"mechanism {attention!r} is not registered in this seqjax"
                    print(f"skipping {mech}: {why}")
                    skipped.append({"task": task, "mechanism": mech, "why": why})
                    continue
                cfg = job_config(task, mech, args.scale, args.tfds_dir, args.recipe)
                load0, t0 = os.getloadavg()[0], time.perf_counter()
                with contextlib.redirect_stderr(io.StringIO()):
                    res = loop.train_and_evaluate(cfg, str(Path(tmp) / f"{task}_{mech}"))
                acc, n = float(res["test"]["accuracy"]), int(res["test"]["count"])
                row = {
                    "task": task,
                    "mechanism": mech,
                    "paper_name": PAPER[mech]["paper_name"],
                    "data": cfg.data.name + (f" ({STAND_IN[task]})" if task in STAND_IN
                                             and cfg.data.name == "l10n_pairs" else ""),
                    "T": int(cfg.model.max_len),
                    "recipe": args.recipe,
                    "optimizer": optim.describe(cfg.optimizer, cfg.train.num_steps),
                    "pooling": cfg.model.pooling,
                    "steps": res["step"],
                    "test_accuracy": 100.0 * acc,
                    "test_se": plotting.binomial_se(100.0 * acc, n),
                    "chance": lra.CHANCE[task],
                    "test_examples": n,
                    "test_loss": float(res["test"]["loss"]),
                    "paper_accuracy": PAPER[mech][task],
                    "wall_s": time.perf_counter() - t0,
                    "loadavg_before": load0,
                }  # fmt: skip
                rows.append(row)
                print(
                    f"{task:8s} {mech:14s} acc {row['test_accuracy']:.2f}% "
                    f"± {row['test_se']:.2f} (paper {row['paper_accuracy']}) {row['wall_s']:.0f} s",
                    flush=True,
                )
                write(args, rows, skipped)
    payload = write(args, rows, skipped)
    print(payload["markdown"])
    return payload


def result_name(scale: str, recipe: str, tasks=None) -> str:
    """``lra_accuracy_<scale>`` (LRA's recipe) or ``lra_accuracy_<scale>_<recipe>``, then
    ``_<task>_<task>`` when ``tasks`` are given (runs of other than the default tasks)."""
    name = f"lra_accuracy_{scale}" + ("" if recipe == "lra" else f"_{recipe}")
    return name + ("_" + "_".join(tasks) if tasks else "")


def write(args, rows, skipped=()) -> dict:
    """Writes JSON (with the summary rows), markdown and PNG of ``rows`` (after every run,
    so a run stopped part-way keeps the rows it finished). Outside ``smoke`` scale the
    rows of other (task, mechanism) pairs already in the file are kept, so runs of a few
    mechanisms each add up to one file."""
    tasks = None if getattr(args, "default_tasks", True) else args.task_list
    name = result_name(args.scale, args.recipe, tasks)
    old_file = Path(args.out) / f"{name}.json"
    env = bench.environment()  # each row keeps the date and commit it was measured at
    rows = [{"date": env["date"][:10], "commit": env["commit"], **r} for r in rows]
    if args.scale != "smoke" and old_file.is_file():
        mine = {(r["task"], r["mechanism"]) for r in rows}
        old = json.loads(old_file.read_text())
        old_env = old.get("environment") or {}
        stamp = {"date": str(old_env.get("date", ""))[:10], "commit": old_env.get("commit")}
        kept = [{**stamp, **r} for r in old.get("rows", [])
                if (r["task"], r["mechanism"]) not in mine]  # fmt: skip
        rows = kept + list(rows)
    summary = [
        {
            "study": "lra_accuracy",
            "paper_figure": f"LRA Table 1, {r['task']} {r['paper_name']} "
            f"(ours {args.scale} scale, {args.recipe} recipe)",
            "paper": r["paper_accuracy"],
            "ours": round(r["test_accuracy"], 2),
            "ratio": None
            if "not AAN" in r.get("data", "") or r["paper_accuracy"] is None  # Path-X: FAIL
            else round(r["test_accuracy"] / r["paper_accuracy"], 2),
            "noisy": None,  # an accuracy: machine load does not change it
            "date": r.get("date"),
            "commit": r.get("commit"),
            **(
                {"note": "stand-in data (l10n_pairs), not AAN: not comparable to the paper"}
                if "not AAN" in r.get("data", "")
                else {}
            ),
        }
        for r in rows
        if args.scale != "smoke"
    ]
    payload = {
        "scale": args.scale,
        "paper": PAPER,
        "recipe": args.recipe,
        "rows": rows,
        "skipped": list(skipped),
        "summary": summary,
        "loadavg": os.getloadavg(),
    }
    cols = [
        "task",
        "mechanism",
        "paper_name",
        "T",
        "steps",
        "test_examples",
        "test_accuracy",
        "test_se",
        "chance",
        "paper_accuracy",
        "data",
        "wall_s",
        "loadavg_before",
    ]
    head = [
        "task",
        "seqjax mechanism",
        "paper row",
        "T",
        "steps",
        "test examples",
        "ours: test acc %",
        "± 1 SE",
        "chance %",
        "paper: test acc %",
        "data",
        "wall s",
        "load avg",
    ]
    md = (
        f"# LRA accuracy, Table 1 ({args.scale} scale, {args.recipe} recipe)\n\n"
        + "".join(
            f"Optimizer: {r['optimizer']}; pooling {r['pooling']}.\n\n"
            for r in [r for r in rows if "optimizer" in r][:1]
        )  # older rows lack it
        + bench.markdown_table(rows, cols, head)
        + "".join(f"\n\nNot run: {k['task']} {k['mechanism']}: {k['why']}." for k in skipped)
        + "\n\nPaper numbers: full-size models trained to convergence on TPUs; ours at the "
        "stated scale (see README for the deviations)."
    )
    bench.write_results(args.out, name, payload, md)
    if rows:
        plot(payload, Path(args.out) / f"{name}.png")
    return {**payload, "markdown": md}


CLASSES = {"listops": 10, "text": 2}  # chance = 100 / classes


def collect(results: Path, scale: str = "cpu") -> dict:
    """``{(row, task): result}`` of the committed results files (``six_tasks.collect``)."""
    return six_tasks.collect(results, scale, recipes=RECIPES)


def table(results: Path, scale: str = "cpu") -> dict:
    """The six-task table with Avg (``six_tasks.table``), written to ``results/lra_table``."""
    return six_tasks.table(results, scale, tasks=TASKS, unavailable=task_unavailable,
                           recipes=RECIPES)  # fmt: skip


def recipe_of(payload: dict) -> str:
    rows = payload.get("rows") or [{}]
    return str(payload.get("recipe") or rows[0].get("recipe") or "lra").split()[0]


def plot(payload: dict, path: Path) -> None:
    """Ours (error bars: ±1 binomial standard error over the test examples) beside the
    paper's Table 1 per task and mechanism, with each task's chance level; the title names
    the scale, recipe, lengths and steps (one run, no seeds)."""
    plt = plotting.pyplot()
    rows = payload["rows"]
    fig, ax = plt.subplots(figsize=(7.4, 4.6))
    xs = list(range(len(rows)))
    ours = [r["test_accuracy"] for r in rows]
    errs = [plotting.binomial_se(r["test_accuracy"], r.get("test_examples") or 0) for r in rows]
    ax.bar([x - 0.2 for x in xs], ours, 0.4, yerr=errs, capsize=3, label="ours (±1 s.e.)")
    paper = [float("nan") if r["paper_accuracy"] is None else r["paper_accuracy"] for r in rows]
    ax.bar([x + 0.2 for x in xs], paper, 0.4, label="paper")  # Path-X: FAIL, no bar
    for task in dict.fromkeys(r["task"] for r in rows):
        idx = [i for i, r in enumerate(rows) if r["task"] == task]
        chance = lra.CHANCE[task] if task in lra.CHANCE else 100.0 / CLASSES[task]
        ax.hlines(chance, idx[0] - 0.45, idx[-1] + 0.45, colors="gray", linestyles=":")
        box = dict(facecolor="white", edgecolor="none", alpha=0.8, pad=1)
        label = f"{task} chance {chance:g}%"
        ax.text(
            idx[-1] + 0.45, chance + 0.8, label, fontsize=7, color="dimgray", ha="right", bbox=box
        )
    ax.set_xticks(xs, [f"{r['task']}\n{r['mechanism']}" for r in rows], fontsize=7)
    ax.set_ylabel("test accuracy (%)")
    ax.set_ylim(0, 100)
    parts = []
    for task in dict.fromkeys(r["task"] for r in rows):
        r = next(r for r in rows if r["task"] == task)
        parts.append(
            f"{task} T={r['T']}, {r['steps']} steps, {r.get('test_examples')} test examples"
        )
    ax.set_title(
        f"LRA Table 1, ours at {payload.get('scale')} scale with the {recipe_of(payload)} "
        f"recipe vs the paper\n{'; '.join(parts)}",
        fontsize=9,
    )
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()  # no load mark: an accuracy does not depend on the machine's load
    plotting.save(fig, path)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
