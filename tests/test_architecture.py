"""The import graph of ``seqjax/`` runs one way: no circles, no import against the layer
order. The order is pinned here (``ORDER``); ``docs/architecture.md`` prints it and must
agree, so editing the document alone cannot loosen it. Imports by name with a literal
(``importlib.import_module("seqjax.train.loop")``, or the literal prefix of an f-string) are
followed like ``import`` statements."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# The layers, from the bottom up; names on one line are one layer (docs/architecture.md prints
# the same block). A new top-level module or package is placed here *and* in the document.
ORDER = """
environment bench op_profile compile_cache compile_targets
attention
decoding
models
convert
data
tasks
console
train
configs
main evaluate evaluate_icl sample translate export
"""


def parse_order(block: str) -> dict[str, int]:
    """``{top-level name: layer}`` of an order block (one layer a line)."""
    return {name: i for i, line in enumerate(block.strip().splitlines()) for name in line.split()}


def layer_order(doc: Path) -> dict[str, int]:
    """``{top-level name: layer}`` from the ```text block after the order comment."""
    text = doc.read_text()
    found = re.search(r"<!-- the order:.*?-->\s*```text\n(.*?)```", text, re.S)
    assert found, f"{doc} has no layer order block"
    return parse_order(found.group(1))


def modules(root: Path) -> dict[str, Path]:
    """``{dotted name: file}`` of every module of the package under ``root/seqjax``."""
    out = {}
    for path in (root / "seqjax").rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def import_graph(root: Path) -> dict[str, set[str]]:
    """``{module: modules of seqjax it imports}``, lazy (function-level) imports included."""
    mods = modules(root)

    def owner(name: str) -> str | None:  # the module that defines ``name``
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph = {m: set() for m in mods}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" for a in node.names] or [base]
            targets += _by_name(node)
            for target in targets:
                found = owner(target) if target.startswith("seqjax") else None
                if found and found != mod:
                    graph[mod].add(found)
    return graph


def _by_name(node) -> list[str]:
    """The module an ``importlib.import_module`` / ``import_module`` / ``__import__`` call
    names: its literal, or the literal prefix of an f-string (``f"seqjax.data.{x}"`` ->
    ``seqjax.data``); [] for other nodes and computed names."""
    if not isinstance(node, ast.Call) or not node.args:
        return []
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in ("import_module", "__import__"):
        return []
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [arg.value]
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        prefix = str(arg.values[0].value).rstrip(".")
        return [prefix] if prefix.startswith("seqjax") else []
    return []


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return out


def top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def against_order(graph, order) -> list[str]:
    return sorted(
        f"{a} (layer {top(a)}) imports {b} (layer {top(b)})"
        for a, targets in graph.items()
        for b in targets
        if top(a) in order and top(b) in order and order[top(b)] > order[top(a)]
    )


def check(root: Path) -> list[str]:
    """Every violation of ``root``'s tree, as sentences (empty: the house stands)."""
    order = parse_order(ORDER)
    graph = import_graph(root)
    problems = [
        f"seqjax.{name} is not placed in the layer order of docs/architecture.md"
        for name in sorted({top(m) for m in graph} - {""} - set(order))
    ]
    problems += against_order(graph, order)
    problems += [f"import circle: {' <-> '.join(c)}" for c in circles(graph)]
    return problems


def test_no_circles_and_no_import_against_the_order():
    problems = check(REPO)
    assert not problems, "\n".join(problems)


def test_the_checker_finds_a_circle_and_an_upward_import(tmp_path):
    """The checker itself: a tree with one lazy upward import and one circle fails twice."""
    pkg = tmp_path / "seqjax"
    for rel, text in {
        "__init__.py": "",
        "attention/__init__.py": "",
        "attention/a.py": "from seqjax.attention import b\n",
        "attention/b.py": "def f():\n    from seqjax.attention import a\n",
        "models/__init__.py": "",
        "models/m.py": "def g():\n    from seqjax.train import loop\n",
        "models/n.py": "import importlib\n\n\ndef h():\n"
        "    return importlib.import_module('seqjax.tasks.t')\n",
        "models/o.py": "def k(x):\n    return __import__(f'seqjax.data.{x}')\n",
        "train/__init__.py": "",
        "train/loop.py": "from seqjax.models import m\n",
        "tasks/__init__.py": "",
        "tasks/t.py": "",
        "data/__init__.py": "",
    }.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    problems = check(tmp_path)
    assert any("seqjax.models.m (layer models) imports seqjax.train.loop" in p for p in problems)
    assert any("seqjax.attention.a <-> seqjax.attention.b" in p for p in problems)
    assert any("circle" in p and "seqjax.models.m" in p for p in problems)
    assert any("seqjax.models.n (layer models) imports seqjax.tasks.t" in p for p in problems)
    assert any("seqjax.models.o (layer models) imports seqjax.data " in p for p in problems)


def test_the_document_prints_the_pinned_order():
    """docs/architecture.md's block is ``ORDER``: a layer moved or added in one place only
    fails here (edit both, deliberately)."""
    assert layer_order(REPO / "docs" / "architecture.md") == parse_order(ORDER)


@pytest.mark.parametrize("name", ["attention", "data", "tasks", "train"])
def test_every_layer_is_placed(name):
    assert name in parse_order(ORDER)
