"""Builds ``experiments/README.md``'s summary table from the committed results files.

Every study writes ``experiments/<study>/results/*.json`` through ``seqjax.bench``; a
results file may carry a ``"summary"`` list of rows
``{"study", "paper_figure", "paper", "ours", "ratio", "note"}`` (ratio = ours / paper where
that means something). A results file written before its script produced that list gets it
from the script's own ``summary_rows(payload)`` (``DERIVED`` below), so the rows are defined
once. This script gathers them, adds how they were measured (a row or file marked
``"noisy"``, or ``"load": {"noisy": ...}`` from ``seqjax.bench.LoadProbe``, shows as
**noisy**), the machine, date and commit recorded in the file, and rewrites the table
between the markers in the README:

    python experiments/summarize.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from seqjax import bench  # noqa: E402
from seqjax.configs import common as config_files  # noqa: E402

BEGIN, END = "<!-- summary:begin -->", "<!-- summary:end -->"
COLUMNS = [
    "study", "paper_figure", "paper", "ours", "ratio", "measured", "machine", "date", "commit",
    "file", "note",
]  # fmt: skip
HEADERS = [
    "study",
    "paper figure",
    "paper",
    "ours",
    "ours / paper",
    "measured",
    "machine",
    "date",
    "commit",
    "results",
    "note",
]


# results file (relative to experiments/) -> the script whose summary_rows(payload) applies.
DERIVED = {
    "sparse_transformer/results/cpu.json": "sparse_transformer/run.py",
    "linformer/results/linformer_cpu.json": "linformer/run.py",
    "reformer/results/growth.json": "reformer/growth.py",
    "char_lm_quality/results/peers_cpu.json": "char_lm_quality/peers.py",
}


# results file -> the script whose summary_note(row) comments rows written before it
# existed (a ratio that needs a sentence, such as a paper value at chance).
NOTED = {"reformer/results/duplication.json": "reformer/duplication.py"}


def _module(root: Path, script: str):
    name = "study_" + script.replace("/", "_").removesuffix(".py")
    # registered: dataclasses look their module up
    return config_files.load_file(root / script, name, register=True)


def _summary(path: Path, payload: dict, root: Path) -> list[dict]:
    relative = path.relative_to(root).as_posix()
    if "summary" in payload:
        rows = [dict(r) for r in payload["summary"]]
    elif relative in DERIVED:
        rows = _module(root, DERIVED[relative]).summary_rows(payload)
    else:
        return []
    if relative in NOTED:
        noted = _module(root, NOTED[relative])
        for row in rows:
            row.setdefault("note", noted.summary_note(row))
    return rows


def _git_date_commit(path: Path) -> tuple[str, str]:
    """Date and short hash of the last commit that touched ``path`` (older files)."""
    try:
        out = subprocess.run(
            ["git", "log", "-1", "--format=%cs %h", "--", str(path)],
            capture_output=True,
            text=True,
            cwd=path.parent,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return "", "?"
    return (out[0], out[1]) if len(out) == 2 else ("", "?")


def _machine(payload: dict, path: Path) -> tuple[str, str, str]:
    """(machine, date, commit) from ``environment`` (seqjax.bench) or an older layout (then
    date and commit are those of the last git commit of the file)."""
    if not isinstance(payload, dict):  # a bare list of rows (no environment block)
        payload = {}
    env = payload.get("environment") or payload.get("machine") or payload.get("meta") or {}
    if not isinstance(env, dict):
        env = {}
    machine = env.get("backend", "?")
    if env.get("backend") == "cpu" or "cpu" in str(env.get("machine", "")):
        machine = f"cpu ({env.get('cpu_count', 2)} cores)"
    elif env.get("devices"):
        machine = env["devices"][0]
    date, commit = str(env.get("date", ""))[:10], env.get("commit")
    if not date or not commit:
        git_date, git_commit = _git_date_commit(path)
        date, commit = date or git_date, commit or f"{git_commit} (file)"
    return machine, date, commit


def conditions(row: dict, payload: dict) -> str:
    """How a row was measured: "**noisy**" when the row or its file says other processes
    loaded the machine (``seqjax.bench.LoadProbe``: ``noisy``; the row's own flag first),
    "quiet" when it was recorded and low, "not a timing" for a row with ``"noisy": None``
    (accuracy, loss), "not recorded" for files written before the harness recorded it."""
    if "noisy" in row and row["noisy"] is None:  # a quality figure: load does not matter
        return "not a timing"
    if "noisy" in row:  # the row's own record wins over its file's
        return "**noisy**" if row["noisy"] else "quiet"
    flags = [payload.get("noisy"), (payload.get("load") or {}).get("noisy")]
    if any(flag is True for flag in flags):
        return "**noisy**"
    if any(flag is False for flag in flags):
        return "quiet"
    return "not recorded"


def gather(root: Path = HERE) -> list[dict]:
    rows = []
    for path in sorted(root.glob("*/results/*.json")):
        try:
            payload = json.loads(path.read_text())
        except json.JSONDecodeError:
            continue
        machine, date, commit = _machine(payload, path)
        for row in _summary(path, payload, root):
            rows.append(
                {
                    **row,
                    "measured": conditions(row, payload),
                    "machine": machine,
                    # a row measured after the rest of its file keeps its own date/commit
                    "date": row.get("date") or date,
                    "commit": row.get("commit") or commit,
                    "file": f"[{path.name}]({path.relative_to(root).as_posix()})",
                }
            )
    return rows


def render(rows: list[dict]) -> str:
    if not rows:
        return "_No results with a summary yet: run the studies' scripts._"
    rows = [{**r, "note": r.get("note") or ""} for r in rows]  # blank, not a dash
    return bench.markdown_table(rows, COLUMNS, HEADERS)


def main() -> int:
    readme = HERE / "README.md"
    text = readme.read_text() if readme.exists() else f"# Experiments\n\n{BEGIN}\n{END}\n"
    if BEGIN not in text or END not in text:
        text += f"\n{BEGIN}\n{END}\n"
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    table = render(gather())
    readme.write_text(f"{head}{BEGIN}\n{table}\n{END}{tail}")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
