"""The README's LRA accuracy tables, built from the committed results files (no training).

    python experiments/lra_accuracy/tables.py           # print the tables
    python experiments/lra_accuracy/tables.py --write   # and rewrite them in README.md

Two tables: the ListOps rows of both optimizer recipes beside the paper's Table 1 (Tay et
al. 2020), from ``results/lra_accuracy_cpu.json`` (``--recipe lra``) and
``results/lra_accuracy_cpu_adamw.json`` (``--recipe adamw``); and every row of the adamw
file (ListOps and Text). The README carries them between ``<!-- <name>:begin -->`` and
``<!-- <name>:end -->`` markers (``recipe-table``, ``adamw-table``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
MECHANISMS = ("dense", "sparse_fixed", "linformer", "lsh")
DETAIL = {"linformer": "`linformer` (k 128)", "lsh": "`lsh` (2 rounds)"}


def _load(name: str, results: Path) -> dict:
    return json.loads((results / f"{name}.json").read_text())


def _fmt(x: float) -> str:
    return f"{x:.1f}"


def recipe_table(results: Path = HERE / "results") -> str:
    """ListOps accuracy per mechanism: the lra recipe, the adamw recipe, the paper."""
    files = (("`lra` recipe", "lra_accuracy_cpu"), ("`adamw` recipe", "lra_accuracy_cpu_adamw"))
    payloads = [(label, _load(name, results)) for label, name in files]
    steps = sorted({r["steps"] for _, p in payloads for r in p["rows"] if r["task"] == "listops"})
    lines = [
        f"| ListOps, {'/'.join(map(str, steps))} steps | " + " | ".join(MECHANISMS) + " |",
        "|---|" + "---|" * len(MECHANISMS),
    ]
    for label, payload in payloads:
        acc = {
            r["mechanism"]: r["test_accuracy"] for r in payload["rows"] if r["task"] == "listops"
        }
        cells = [_fmt(acc[m]) if m in acc else "—" for m in MECHANISMS]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    paper = payloads[0][1]["paper"]
    lines.append(
        "| paper (Table 1) | " + " | ".join(f"{paper[m]['listops']:.2f}" for m in MECHANISMS) + " |"
    )
    return "\n".join(lines)


def adamw_table(results: Path = HERE / "results") -> str:
    """Every row of the adamw-recipe file."""
    head = [
        "task", "seqjax mechanism", "paper row", "T", "steps", "test examples",
        "ours: test acc %", "paper: test acc %", "wall s",
    ]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in _load("lra_accuracy_cpu_adamw", results)["rows"]:
        cells = [
            {"listops": "ListOps", "text": "Text"}[r["task"]],
            DETAIL.get(r["mechanism"], f"`{r['mechanism']}`"),
            r["paper_name"],
            str(r["T"]),
            str(r["steps"]),
            f"{r['test_examples']:,}",
            _fmt(r["test_accuracy"]),
            f"{r['paper_accuracy']:.2f}",
            f"{r['wall_s']:.0f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def tables(results: Path = HERE / "results") -> dict[str, str]:
    """``{marker name: markdown table}``."""
    return {"recipe-table": recipe_table(results), "adamw-table": adamw_table(results)}


def rewrite_readme(readme: Path = HERE / "README.md") -> str:
    """Replaces each table between its markers in ``readme``; returns the new text."""
    text = readme.read_text()
    for name, table in tables().items():
        begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = f"{head}{begin}\n{table}\n{end}{tail}"
    readme.write_text(text)
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the README's tables")
    args = parser.parse_args(argv)
    if args.write:
        rewrite_readme()
    print("\n\n".join(tables().values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
