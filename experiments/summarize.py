"""Builds ``experiments/README.md``'s summary table from the committed results files.

Every study writes ``experiments/<study>/results/*.json`` through ``seqjax.bench``; a
results file may carry a ``"summary"`` list of rows
``{"study", "paper_figure", "paper", "ours", "ratio", "note"}`` (ratio = ours / paper where
that means something). This script gathers them, adds the machine, date and commit
recorded in the file, and rewrites the table between the markers in the README:

    python experiments/summarize.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from seqjax import bench  # noqa: E402

BEGIN, END = "<!-- summary:begin -->", "<!-- summary:end -->"
COLUMNS = ["study", "paper_figure", "paper", "ours", "ratio", "machine", "date", "commit", "file"]
HEADERS = [
    "study",
    "paper figure",
    "paper",
    "ours",
    "ours / paper",
    "machine",
    "date",
    "commit",
    "results",
]


def gather(root: Path = HERE) -> list[dict]:
    rows = []
    for path in sorted(root.glob("*/results/*.json")):
        try:
            payload = json.loads(path.read_text())
        except json.JSONDecodeError:
            continue
        env = payload.get("environment", {})
        for row in payload.get("summary", []):
            machine = env.get("backend", "?")
            if env.get("backend") == "cpu":
                machine = f"cpu ({env.get('cpu_count')} cores)"
            elif env.get("devices"):
                machine = env["devices"][0]
            rows.append(
                {
                    **row,
                    "machine": machine,
                    "date": str(env.get("date", ""))[:10],
                    "commit": env.get("commit", "?"),
                    "file": f"[{path.name}]({path.relative_to(root).as_posix()})",
                }
            )
    return rows


def render(rows: list[dict]) -> str:
    if not rows:
        return "_No results with a summary yet: run the studies' scripts._"
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
