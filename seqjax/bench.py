"""Benchmark harness: timing, compiled memory, environment, and result files.

Every benchmark script in ``experiments/`` measures through these helpers so its numbers
are comparable: jitted functions are compiled once, warmed up, then timed over repeated
runs (median, min, max); peak memory comes from the compiled program
(``compiled.memory_analysis()``), which also predicts configurations too large to run.
Speed is reported as ratios measured side by side in one run; absolute times are labelled
with the device they came from.

Every result says how it was measured: ``environment()`` (``seqjax.environment``) records
the CPU model, core and thread counts, library versions and commit; ``LoadProbe`` records
the load average before and after a measurement and the CPU that *other* processes used
meanwhile (from ``/proc/stat`` minus this process's own CPU time), and flags the run
``noisy`` when that exceeds ``NOISY_FRACTION`` of the cores. ``interleave`` times
contenders in turns (A B A B ...) so that drifting machine load hits all of them alike, and
reports medians.
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from seqjax import environment as environment_lib


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
    with LoadProbe() as probe:
        while len(times) < repeats or time.perf_counter() - start < min_time_s:
            t0 = time.perf_counter()
            jax.block_until_ready(compiled(*args))
            times.append(time.perf_counter() - t0)
    MEASUREMENTS.append(probe.result)
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


def environment() -> dict[str, Any]:
    """Machine, CPU, threads, devices, versions, commit and current load: recorded with every
    result file (``seqjax.environment.capture``)."""
    return environment_lib.capture()


# ------------------------------------------------------------------ load and interleaving

# A measurement is "noisy" when other processes kept more than this fraction of the cores
# busy on average while it ran (2 cores: half a core).
NOISY_FRACTION = 0.25
# /proc/stat counts in clock ticks (10 ms): shorter windows fall back to the load average.
MIN_WINDOW_S = 0.5
# LoadProbe.result of every timed section of this process (time_compiled, interleave);
# write_results summarizes them into a payload that has no "load" of its own.
MEASUREMENTS: list[dict] = []


_loadavg = environment_lib.loadavg


def _busy_cpu_seconds() -> float | None:
    """Seconds of CPU time all processes have used since boot (``/proc/stat``), or None."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if fields[0] != "cpu":
        return None
    # user nice system idle iowait irq softirq steal [guest guest_nice: inside user/nice]
    ticks = [int(x) for x in fields[1:9]]
    busy = sum(ticks) - ticks[3] - ticks[4]
    return busy / os.sysconf("SC_CLK_TCK")


def _own_cpu_seconds() -> float:
    """CPU seconds used by this process (all threads) and its finished children."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def is_noisy(other_cores: float | None, cpu_count: int | None, loadavg_before=None) -> bool:
    """Whether load from other processes was high: other processes used more than
    ``NOISY_FRACTION`` of ``cpu_count`` cores (or, when that was not measured, the 1-minute
    load average before the measurement, when this process was idle, exceeded it)."""
    cores = max(int(cpu_count or 1), 1)
    if other_cores is None:
        if not loadavg_before:
            return False
        other_cores = float(loadavg_before[0])
    return other_cores > NOISY_FRACTION * cores


class LoadProbe:
    """Records the load around a measurement::

        with bench.LoadProbe() as probe:
            ...  # the timed work
        payload["load"] = probe.result

    ``result``: ``loadavg_before`` / ``loadavg_after`` (1, 5, 15 min), ``wall_s``,
    ``own_cores`` (this process's CPU seconds per second), ``other_cores`` (CPU seconds per
    second used by every other process, from ``/proc/stat``; None where unavailable),
    ``cpu_count`` and ``noisy`` (``is_noisy``).
    """

    def __init__(self):
        self.result: dict[str, Any] = {}

    def __enter__(self):
        self._load0 = _loadavg()
        self._busy0 = _busy_cpu_seconds()
        self._own0 = _own_cpu_seconds()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        wall = max(time.perf_counter() - self._t0, 1e-9)
        own = (_own_cpu_seconds() - self._own0) / wall
        busy1 = _busy_cpu_seconds()
        other = None
        if self._busy0 is not None and busy1 is not None and wall >= MIN_WINDOW_S:
            other = max((busy1 - self._busy0) / wall - own, 0.0)
        self.result = load_summary(self._load0, _loadavg(), wall, own, other, os.cpu_count())
        return False


def load_summary(loadavg_before, loadavg_after, wall_s, own_cores, other_cores, cpu_count):
    """The ``LoadProbe.result`` dict of these measurements (``noisy`` from ``is_noisy``)."""
    return {
        "loadavg_before": loadavg_before,
        "loadavg_after": loadavg_after,
        "wall_s": round(float(wall_s), 6),
        "own_cores": None if own_cores is None else round(float(own_cores), 3),
        "other_cores": None if other_cores is None else round(float(other_cores), 3),
        "cpu_count": cpu_count,
        "noisy_threshold_cores": NOISY_FRACTION * max(int(cpu_count or 1), 1),
        "noisy": is_noisy(other_cores, cpu_count, loadavg_before),
    }


def interleave_order(names: Sequence[str], rounds: int) -> list[str]:
    """The order in which ``interleave`` runs its contenders: ``rounds`` turns of every name
    in the given order (A B A B ... for two)."""
    return [name for _ in range(int(rounds)) for name in names]


def median_summary(times: Sequence[float]) -> dict[str, Any]:
    """``{'median_s', 'min_s', 'max_s', 'repeats'}`` of a list of seconds."""
    arr = np.asarray(times, dtype=float)
    return {
        "median_s": float(np.median(arr)),
        "min_s": float(arr.min()),
        "max_s": float(arr.max()),
        "repeats": int(arr.size),
    }


def interleave(
    contenders: dict[str, Callable[[], Any]],
    *,
    rounds: int = 10,
    warmup: int = 1,
    block: Callable[[Any], Any] = jax.block_until_ready,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
    """Times ``contenders`` (name -> a call doing one unit of work) in turns and takes medians.

    Each contender is first called ``warmup`` times (compilation, caches), in turn; then
    ``rounds`` rounds call each once in the given order (A B A B ...), each call timed
    with ``clock`` around the call and ``block`` of its result. The whole timed part is
    wrapped in a ``LoadProbe``.

    Returns:
      ``{'order': names in the order timed, 'times': {name: [seconds]}, 'timing': {name:
      median_summary}, 'ratios': {name: median / first contender's median}, 'load':
      LoadProbe.result, 'noisy': bool}``.
    """
    names = list(contenders)
    if not names:
        raise ValueError("interleave needs at least one contender")
    for _ in range(int(warmup)):
        for name in names:
            block(contenders[name]())
    times: dict[str, list[float]] = {name: [] for name in names}
    order = interleave_order(names, rounds)
    with LoadProbe() as probe:
        for name in order:
            t0 = clock()
            block(contenders[name]())
            times[name].append(clock() - t0)
    MEASUREMENTS.append(probe.result)
    timing = {name: median_summary(ts) for name, ts in times.items()}
    base = timing[names[0]]["median_s"]
    ratios = {name: (t["median_s"] / base if base > 0 else None) for name, t in timing.items()}
    return {
        "order": order,
        "times": times,
        "timing": timing,
        "ratios": ratios,
        "load": probe.result,
        "noisy": bool(probe.result.get("noisy")),
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


def aggregate_load(measurements: Sequence[dict]) -> dict[str, Any]:
    """One ``load`` record for many timed sections: noisy if any of them was."""
    others = [m["other_cores"] for m in measurements if m.get("other_cores") is not None]
    noisy = [m for m in measurements if m.get("noisy")]
    return {
        "measurements": len(measurements),
        "noisy_measurements": len(noisy),
        "other_cores": round(max(others), 3) if others else None,
        "mean_other_cores": round(float(np.mean(others)), 3) if others else None,
        "loadavg_before": measurements[0].get("loadavg_before") if measurements else None,
        "loadavg_after": measurements[-1].get("loadavg_after") if measurements else None,
        "noisy_threshold_cores": NOISY_FRACTION * max(int(os.cpu_count() or 1), 1),
        "noisy": bool(noisy),
    }


def write_results(out_dir: Path | str, name: str, payload: dict, markdown: str) -> Path:
    """Writes ``name.json`` (payload + environment) and ``name.md`` into ``out_dir``.

    A payload without a ``load`` record gets the summary of this process's timed sections
    (``MEASUREMENTS``), so every result file says whether it was measured under load.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    payload = {"environment": environment(), **payload}
    if "load" not in payload and MEASUREMENTS:
        payload["load"] = aggregate_load(MEASUREMENTS)
    (out_dir / f"{name}.json").write_text(json.dumps(payload, indent=2, default=str) + "\n")
    env = payload["environment"]
    footer = (
        f"\n\nMeasured on {device_label()} ({env['cpu_model']}), jax {env['versions']['jax']}, "
        f"commit {env['commit']}, {env['date']}, load average {env['loadavg']}.\n"
    )
    load = payload.get("load") or {}
    if load.get("noisy"):
        several = load.get("measurements")
        which = f" in {load['noisy_measurements']} of {several} timed sections" if several else ""
        footer += (
            f"\n**Noisy**: other processes used up to {load.get('other_cores')} cores on "
            f"average{which} (threshold {load.get('noisy_threshold_cores')}); the load "
            f"average went from {load.get('loadavg_before')} to {load.get('loadavg_after')}.\n"
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
