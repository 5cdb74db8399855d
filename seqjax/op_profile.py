"""Where a jitted function's time goes: a ``jax.profiler`` trace summed by name scope.

``profile_ops(fn, args, groups)`` compiles ``fn``, runs it ``calls`` times under
``jax.profiler`` (a Perfetto trace, read back from its JSON), and sums the time of every
XLA operation (on CPU: one thunk per fusion, dot or copy) into the first group whose
regular expression matches the operation's ``op_name`` metadata (the JAX name stack,
e.g. ``jit(f)/TransformerXL/block_0/attn/while/body/...``: Flax module paths and
``jax.named_scope`` names). Loop operations (``while``, ``conditional``, ``call``) are not
counted themselves; the operations of their bodies are. Operations that run concurrently
on several threads are each counted in full, so the groups add up to the "op time", which
can exceed the wall time; shares are of the op time.

This is a real profiler measurement (no model change, no ablation): what XLA compiled,
as it ran.
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import os
import re
import tempfile
import time
from collections.abc import Callable, Sequence

import jax

# One instruction of the optimized HLO: "%name = type opcode(operands), ..., metadata={...}"
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*.*?\s([a-z][\w\-]*)\((.*)$")
_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_CALLS = re.compile(r"(?:calls|body)=%?([\w.\-]+)")
_OPERAND = re.compile(r"%([\w.\-]+)")
_CONTAINERS = {"while", "conditional", "call"}
# What a dot fusion whose dot lost its metadata in XLA's rewrites is called (after the name
# scope of the computation it runs in).
UNNAMED_DOT = "dot (no metadata)"


def hlo_op_names(hlo_text: str) -> dict[str, tuple[str, str]]:
    """``{instruction name: (opcode, op_name)}`` for every instruction of an HLO module.

    Some fusions (e.g. XLA:CPU's library dot fusions) carry no ``op_name``: they get the
    one of an instruction of the computation they call; a dot that lost it gets the name
    scope shared by its own computation's instructions plus ``UNNAMED_DOT``; otherwise the
    nearest operand's name, else that shared scope.
    """
    comp = ""
    instrs: dict[str, dict] = {}
    by_comp: dict[str, list[str]] = collections.defaultdict(list)
    dot_comps: set[str] = set()
    for line in hlo_text.splitlines():
        m = _INSTR.match(line)
        if not m:
            head = _COMPUTATION.match(line)
            if head:
                comp = head.group(1)
            continue
        name, opcode, rest = m.groups()
        meta = _OP_NAME.search(line)
        calls = _CALLS.search(line)
        operands = rest.split("), ")[0] if ")" in rest else rest
        instrs[name] = dict(
            opcode=opcode,
            op_name=meta.group(1) if meta else "",
            calls=calls.group(1) if calls else None,
            operands=_OPERAND.findall(operands),
            comp=comp,
        )
        if meta:
            by_comp[comp].append(meta.group(1))
        if opcode == "dot":
            dot_comps.add(comp)

    def shared_scope(names: list[str]) -> str:
        if not names:
            return ""
        parts = [n.split("/") for n in names]
        common = []
        for level in zip(*parts):
            if len(set(level)) > 1:
                break
            common.append(level[0])
        return "/".join(common)

    def resolve(name: str, depth: int = 0) -> str:
        ins = instrs.get(name)
        if ins is None or depth > 4:
            return ""
        if ins["op_name"]:
            return ins["op_name"]
        if ins["calls"] and by_comp.get(ins["calls"]):
            return by_comp[ins["calls"]][-1]
        if ins["calls"] and ins["calls"] in dot_comps:
            return shared_scope(by_comp.get(ins["comp"], [])) + "/" + UNNAMED_DOT
        for operand in ins["operands"]:
            found = resolve(operand, depth + 1)
            if found:
                return found
        return ""

    return {
        name: (ins["opcode"], resolve(name) or shared_scope(by_comp.get(ins["comp"], [])))
        for name, ins in instrs.items()
    }


def _trace_events(log_dir: str) -> list[dict]:
    paths = sorted(glob.glob(os.path.join(log_dir, "**", "perfetto_trace.json.gz"), recursive=True))
    if not paths:
        raise RuntimeError(f"jax.profiler wrote no perfetto_trace.json.gz under {log_dir}")
    with gzip.open(paths[-1], "rt") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def profile_ops(
    fn: Callable,
    args: Sequence,
    groups: Sequence[tuple[str, str]],
    *,
    calls: int = 3,
    log_dir: str | None = None,
    top: int = 15,
) -> dict:
    """Profile ``fn(*args)`` (a ``jax.jit`` function) and group its op time.

    Args:
      fn, args: the jitted function and its arguments.
      groups: ``(label, regex)`` pairs, tried in order on each op's ``op_name``; ops that
        match none go to ``"other"``.
      calls: calls traced (after one untraced warm-up call); times are per call.
      log_dir: where the trace is kept (default: a temporary directory, removed).
      top: how many of the most expensive op names to list.

    Returns:
      ``{"wall_ms": per call, "op_ms": per call, "groups": {label: {"ms", "share"}},
      "top_ops": [(op_name, ms per call), ...]}``.
    """
    compiled = fn.lower(*args).compile()
    ops = hlo_op_names(compiled.as_text())
    jax.block_until_ready(compiled(*args))
    with tempfile.TemporaryDirectory(prefix="seqjax_profile_") as tmp:  # removed afterwards
        trace_dir = log_dir or tmp
        jax.profiler.start_trace(trace_dir, create_perfetto_trace=True)
        t0 = time.perf_counter()
        for _ in range(calls):
            jax.block_until_ready(compiled(*args))
        wall = (time.perf_counter() - t0) / calls
        jax.profiler.stop_trace()
        events = _trace_events(trace_dir)
    patterns = [(label, re.compile(rx)) for label, rx in groups]
    by_group: dict[str, float] = collections.defaultdict(float)
    by_op: dict[str, float] = collections.defaultdict(float)
    for event in events:
        if event.get("ph") != "X" or event.get("name") not in ops:
            continue
        opcode, op_name = ops[event["name"]]
        if opcode in _CONTAINERS:
            continue
        us = float(event.get("dur", 0.0))
        label = next((lab for lab, rx in patterns if rx.search(op_name)), "other")
        by_group[label] += us
        by_op[op_name or event["name"]] += us
    by_op = {k: v / calls / 1e3 for k, v in by_op.items()}
    total = sum(by_group.values())
    if total == 0:
        raise RuntimeError("the trace holds no XLA operation events (unsupported backend?)")
    return {
        "wall_ms": wall * 1e3,
        "op_ms": total / calls / 1e3,
        "groups": {
            label: {
                "ms": by_group.get(label, 0.0) / calls / 1e3,
                "share": by_group.get(label, 0.0) / total,
            }
            for label in [lab for lab, _ in groups] + ["other"]
        },
        "top_ops": sorted(by_op.items(), key=lambda kv: -kv[1])[:top],
    }
