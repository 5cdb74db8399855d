"""Benchmark harness: timing, compiled memory, environment, and result files.

Every benchmark script in ``experiments/`` measures through these helpers so its numbers
are comparable: jitted functions are compiled once, warmed up, then timed over repeated
runs (median, min, max); peak memory comes from the compiled program
(``compiled.memory_analysis()``), which also predicts configurations too large to run.
Speed is reported as ratios measured side by side in one run; absolute times are labelled
with the device they came from.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import subprocess
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import jax
import numpy as np


@dataclasses.dataclass
class Timing:
    """Wall-clock seconds of one jitted call (after compilation and warm-up)."""

    median_s: float
    min_s: float
    max_s: float
    repeats: int
    compile_s: float


def compiled_memory(compiled) -> dict[str, int] | None:
    """Bytes of a compiled program: arguments, outputs, temporaries, and their sum."""
    try:
        ma = compiled.memory_analysis()
    except Exception:  # backends without memory analysis
        return None
    if ma is None:
        return None
    out = {
        "argument_bytes": int(ma.argument_size_in_bytes),
        "output_bytes": int(ma.output_size_in_bytes),
        "temp_bytes": int(ma.temp_size_in_bytes),
        "alias_bytes": int(getattr(ma, "alias_size_in_bytes", 0)),
    }
    out["peak_bytes"] = (
        out["argument_bytes"] + out["output_bytes"] + out["temp_bytes"] - out["alias_bytes"]
    )
    return out


def compile_fn(fn: Callable, *args, **jit_kwargs):
    """``jax.jit(fn).lower(*args).compile()`` and the seconds it took."""
    t0 = time.perf_counter()
    compiled = jax.jit(fn, **jit_kwargs).lower(*args).compile()
    return compiled, time.perf_counter() - t0


def time_compiled(compiled, *args, repeats: int = 5, warmup: int = 1, min_time_s: float = 0.0):
    """Median/min/max seconds of ``compiled(*args)``, blocking on the result each time.

    Repeats at least ``repeats`` times and until ``min_time_s`` seconds were spent.
    """
    for _ in range(warmup):
        jax.block_until_ready(compiled(*args))
    times = []
    start = time.perf_counter()
    while len(times) < repeats or time.perf_counter() - start < min_time_s:
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - t0)
    return times


def benchmark(fn: Callable, *args, repeats: int = 5, warmup: int = 1, max_bytes: int | None = None):
    """Compiles, checks memory, and times ``fn(*args)``.

    Args:
      fn: a function of arrays (jitted here).
      max_bytes: if the compiled program's peak would exceed this many bytes, it is not run
        and the result says so (``"status": "does not fit"``).

    Returns:
      A dict with ``status`` ("ok" | "does not fit"), ``memory`` and ``timing`` (or None).
    """
    compiled, compile_s = compile_fn(fn, *args)
    memory = compiled_memory(compiled)
    if max_bytes is not None and memory is not None and memory["peak_bytes"] > max_bytes:
        return {"status": "does not fit", "memory": memory, "timing": None}
    times = time_compiled(compiled, *args, repeats=repeats, warmup=warmup)
    timing = Timing(
        float(np.median(times)), float(min(times)), float(max(times)), len(times), compile_s
    )
    return {"status": "ok", "memory": memory, "timing": dataclasses.asdict(timing)}


def git_commit(repo: Path | None = None) -> str:
    """The current git commit (with ``-dirty`` if the tree has changes), or "unknown"."""
    cwd = repo or Path(__file__).resolve().parents[1]
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def package_versions(names: Sequence[str] = ("jax", "jaxlib", "flax", "optax", "numpy")):
    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            out[n] = None
    return out


def environment() -> dict[str, Any]:
    """Machine, devices, versions and commit: recorded with every result file."""
    devices = jax.devices()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": platform.node(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "backend": jax.default_backend(),
        "devices": [str(d.device_kind) for d in devices],
        "device_count": len(devices),
        "versions": package_versions(),
        "commit": git_commit(),
    }


def device_label() -> str:
    """A short label for absolute numbers, e.g. "cpu (2 cores)" or "NVIDIA H100"."""
    if jax.default_backend() == "cpu":
        return f"cpu ({os.cpu_count()} cores)"
    return jax.devices()[0].device_kind


def markdown_table(rows: Sequence[dict], columns: Sequence[str], headers=None) -> str:
    """A GitHub markdown table of ``rows`` (dicts) restricted to ``columns``."""
    headers = headers or columns

    def fmt(x):
        if x is None:
            return "—"
        if isinstance(x, float):
            return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"
        return str(x)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def write_results(out_dir: Path | str, name: str, payload: dict, markdown: str) -> Path:
    """Writes ``name.json`` (payload + environment) and ``name.md`` into ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    payload = {"environment": environment(), **payload}
    (out_dir / f"{name}.json").write_text(json.dumps(payload, indent=2, default=str) + "\n")
    env = payload["environment"]
    footer = (
        f"\n\nMeasured on {device_label()}, jax {env['versions']['jax']}, "
        f"commit {env['commit']}, {env['date']}.\n"
    )
    (out_dir / f"{name}.md").write_text(markdown.rstrip() + footer)
    return out_dir / f"{name}.json"


def plot_lines(
    path,
    series: dict[str, tuple[Sequence, Sequence]],
    *,
    xlabel,
    ylabel,
    title,
    logx=True,
    logy=True,
):
    """Saves a line plot (one line per series name: (xs, ys); None values are skipped)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for label, (xs, ys) in series.items():
        pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
        if pts:
            ax.plot(*zip(*pts), marker="o", label=label)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_lines():
        ax.legend(fontsize=8)
    else:  # nothing measured (e.g. every configuration did not fit)
        ax.text(0.5, 0.5, "no measured points", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
