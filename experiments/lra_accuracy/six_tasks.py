"""LRA Table 1 as this checkout has it: all six tasks and the Avg column, built from the
committed ``results/lra_accuracy_<scale>*.json`` files (``python experiments/lra_accuracy/run.py``
with no arguments writes ``results/lra_table.{md,json}``; ``run.table`` is this ``table``).

Each cell is ours +- one binomial standard error beside the paper's Table 1 (Tay et al.
2020); a cell not 2 SE above chance says so, and every cell not run names its reason.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from seqjax import bench
from seqjax.configs import _lra as lra

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import plotting  # noqa: E402  (experiments/plotting.py)


def _file_recipe(path: Path, payload: dict, recipes) -> str:
    said = str(payload.get("recipe") or "")
    return next((r for r in recipes if said.startswith(r) or f"_{r}" in path.stem), "lra")


def collect(results: Path, scale: str = "cpu", *, recipes=("lra", "adamw")) -> dict:
    """``{(row, task): result row}`` from every ``lra_accuracy_<scale>*.json`` in ``results``;
    where several files have a cell, LRA's recipe wins, then the later file."""
    cells: dict = {}
    for path in sorted(results.glob(f"lra_accuracy_{scale}*.json")):
        payload = json.loads(path.read_text())
        recipe = _file_recipe(path, payload, recipes)
        for r in payload.get("rows", []):
            key = (r["mechanism"], r["task"])
            old = cells.get(key)
            if old is None or old["recipe"] != "lra" or recipe == "lra":
                n = int(r["test_examples"])
                se = r.get("test_se", plotting.binomial_se(r["test_accuracy"], n))
                cells[key] = {**r, "recipe": recipe, "test_se": se, "file": path.name}
    return cells


def _cell(r: dict | None, task: str) -> str:
    if r is None:
        return "not run"
    acc, se = r["test_accuracy"], r["test_se"]
    mark = "" if acc - 2 * se > lra.CHANCE[task] else " (chance)"
    recipe = "" if r.get("recipe", "lra") == "lra" else f" [{r['recipe']}]"
    stand_in = " (stand-in)" if "not AAN" in r.get("data", "") else ""
    return f"{acc:.1f} ± {se:.1f}{mark}{recipe}{stand_in}"


def table(results: Path, scale: str, *, tasks, unavailable, recipes=("lra", "adamw")) -> dict:
    """LRA Table 1 as this checkout has it: ours (± one binomial standard error; "(chance)"
    when not 2 SE above chance) beside the paper's, per task, and each row's Avg over the
    tasks it ran (with the paper's Avg over the same tasks, and its own five-task Avg).
    Writes ``results/lra_table.{json,md}``."""
    cells = collect(results, scale, recipes=recipes)
    task_why = {t: unavailable(t) for t in tasks}
    ok_rows, missing = lra.available_rows()
    row_why = {r.name: why for r, why in missing}
    out_rows, notes = [], []
    for row in lra.ROWS:
        line = {"row": row.paper_name, "mechanism": row.name}
        ours, theirs = [], []
        for task in tasks:
            r = cells.get((row.name, task))
            line[task] = _cell(r, task)
            line[f"{task}_paper"] = lra.paper(row.paper_name, task)
            if r is not None:
                ours.append(r["test_accuracy"])
                if lra.paper(row.paper_name, task) is not None:
                    theirs.append(lra.paper(row.paper_name, task))
        line["avg"] = f"{sum(ours) / len(ours):.1f} ({len(ours)}/6)" if ours else "not run"
        line["avg_paper_same_tasks"] = round(sum(theirs) / len(theirs), 2) if theirs else None
        line["avg_paper"] = lra.paper(row.paper_name, "avg")
        if row.name in row_why:
            notes.append(f"{row.paper_name} (`{row.name}`): {row_why[row.name]}.")
        out_rows.append(line)
    for task, why in task_why.items():
        if why:
            notes.append(f"{lra.TASK_TITLES[task]}: {why}.")
    used = sorted({(r["task"], r.get("data", ""), r["file"]) for r in cells.values()})
    head = (
        ["Table 1 row", "seqjax"]
        + [f"{lra.TASK_TITLES[t]} (chance {lra.CHANCE[t]:.0f})" for t in tasks]
        + ["Avg (ours, tasks run)", "paper Avg, same tasks", "paper Avg"]
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for line in out_rows:
        task_cells = []
        for t in tasks:
            paper = line[f"{t}_paper"]
            task_cells.append(f"{line[t]} / {'FAIL' if paper is None else f'{paper:.2f}'}")
        lines.append("| " + " | ".join(
            [line["row"], f"`{line['mechanism']}`", *task_cells, line["avg"],
             "—" if line["avg_paper_same_tasks"] is None else f"{line['avg_paper_same_tasks']:.2f}",
             f"{line['avg_paper']:.2f}"]) + " |")  # fmt: skip
    md = (
        f"# LRA Table 1, six tasks ({scale} scale): ours / paper (test accuracy %)\n\n"
        "Each cell: ours ± one binomial standard error (sqrt(p(1-p)/n) on the test set), "
        "'(chance)' when ours is not 2 SE above chance, then the paper's number (FAIL: no "
        "model above chance, Path-X). Avg: the mean over the tasks this row ran (count in "
        "brackets); compare it with the paper's mean over the same tasks, not with the paper's "
        "five-task Avg. '[adamw]': a cell from the first CPU recipe (no LRA-recipe result "
        "for it). '(stand-in)': Retrieval on the offline l10n_pairs task (en/de message "
        "pairs), not AAN: an easier task, not comparable to the paper's column or Avg.\n\n"
        + "\n".join(lines)
        + "\n\nFrom: "
        + "; ".join(f"{t} {d} ({f})" for t, d, f in used)
        + ".\n\nNot run:\n"
        + "".join(f"\n* {n}" for n in notes)
        + "\n* every other empty cell: no committed result at this scale (CPU time).\n"
    )
    payload = {"scale": scale, "rows": out_rows, "not_run": notes, "sources": used}
    bench.write_results(results, "lra_table", payload, md)
    print(md)
    return {**payload, "markdown": md}
