"""No module outside ``seqjax/tasks/`` (and ``seqjax/data/``, which names the task of its
data) tests a task's name: the loop, the steps, the evaluator, setup, the models and the
CLIs ask the task (``seqjax.tasks.Task``) instead."""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "seqjax"
ALLOWED = ("tasks", "data")
NAME = r"""["'](?:lm|classification)["']"""
PATTERNS = [
    re.compile(r"\btask\w*(?:\.name)?\s*(?:==|!=)"),  # task == ..., run.task != ...
    re.compile(r"(?:==|!=)\s*\w*\.?task\b"),
    re.compile(rf"(?:==|!=)\s*{NAME}"),
    re.compile(rf"{NAME}\s*(?:==|!=)"),
    re.compile(rf"\bin\s*[\(\[\{{]\s*{NAME}"),  # task in ("lm", ...)
]


def offending_lines() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] in ALLOWED:
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if any(p.search(code) for p in PATTERNS):
                found.append(f"seqjax/{rel}:{i}: {line.strip()}")
    return found


def test_no_module_outside_tasks_tests_a_task_name():
    assert offending_lines() == []


def test_the_check_would_find_one():
    samples = ['if run.task == "lm":', "x = 1 if info.task != 'classification' else 2",
               'unit = "tok" if "lm" == name else "ex"', 'if task in ("lm", "mlm"):']  # fmt: skip
    for line in samples:
        assert any(p.search(line) for p in PATTERNS), line
