"""What every committed experiment plot shares: a "measured under load" mark read from its
results file, chance lines, binomial error bars, and saving.

The studies' plotting functions take the results payload (the JSON their script wrote), so
``python experiments/replot.py`` redraws every plot from the committed files without
re-running anything.
"""

from __future__ import annotations

import math
from pathlib import Path

# A recorded 1-minute load average above this many times the cores means other processes
# competed for the machine while it was measured (the study itself keeps about the cores
# busy).
LOADED_FACTOR = 1.5


def _load_averages(payload: dict) -> list[float]:
    """Every load average the results file recorded (file-level lists, per-row fields)."""
    values: list[float] = []
    for key in ("load_avg", "loadavg"):
        v = payload.get(key)
        if isinstance(v, list | tuple):
            values += [float(x) for x in v if isinstance(x, int | float)]
    # Recorded (1, 5, 15)-minute triples: only the 1-minute value counts.
    triples = [
        (payload.get("load") or {}).get("loadavg_before"),
        (payload.get("load") or {}).get("loadavg_after"),
        (payload.get("machine") or {}).get("load_average_at_start"),
        (payload.get("environment") or {}).get("loadavg"),
    ]
    for row in payload.get("rows") or []:
        if isinstance(row, dict):
            for key in ("loadavg_before", "loadavg_after", "load_avg_1min"):
                if isinstance(row.get(key), int | float):
                    values.append(float(row[key]))
            if isinstance(row.get("load"), dict):
                triples += [row["load"].get("loadavg_before"), row["load"].get("loadavg_after")]
    for t in triples:
        if isinstance(t, list | tuple) and t and isinstance(t[0], int | float):
            values.append(float(t[0]))
    return values


def _cores(payload: dict) -> int:
    for key in ("environment", "machine"):
        if isinstance(payload.get(key), dict) and payload[key].get("cpu_count"):
            return int(payload[key]["cpu_count"])
    return 2


def load_recorded(payload: dict) -> bool:
    """Whether the results file records the machine's load at all."""
    return bool(_load_averages(payload) or (payload.get("load") or {}).get("noisy") is not None)


def load_note(payload: dict) -> str | None:
    """A sentence when the results file records that the machine was loaded while the
    timings were taken (``load.noisy``, a summary row's ``noisy``, or a recorded load
    average above ``LOADED_FACTOR`` x cores), else None."""
    cores = _cores(payload)
    load = payload.get("load") or {}
    noisy_rows = [r for r in payload.get("summary") or [] if r.get("noisy") is True]
    if load.get("noisy"):
        return (
            f"measured under load: other processes used up to {load.get('other_cores')} of "
            f"{cores} cores"
        )
    if noisy_rows:
        return f"measured under load ({len(noisy_rows)} timing(s) flagged noisy in the file)"
    averages = _load_averages(payload)
    if averages and max(averages) > LOADED_FACTOR * cores:
        return (
            f"measured under load: 1-min load average {min(averages):.1f}-{max(averages):.1f} "
            f"on {cores} cores"
        )
    return None


def mark_load(fig, payload: dict) -> str | None:
    """Writes ``load_note(payload)`` in red at the bottom of ``fig``; returns it."""
    note = load_note(payload)
    if note:
        fig.text(0.01, 0.005, note, color="firebrick", fontsize=7.5, ha="left", va="bottom")
    return note


def mark_timing(fig, payload: dict) -> str:
    """For a timing plot: ``mark_load``'s red note, or a grey "load not recorded" when the
    results file has no load record (its timings may include other processes' work)."""
    note = mark_load(fig, payload)
    if note:
        return note
    if load_recorded(payload):
        return ""
    note = "load not recorded: timings may include other processes' work"
    fig.text(0.01, 0.005, note, color="dimgray", fontsize=7.5, ha="left", va="bottom")
    return note


def binomial_se(accuracy_pct: float, n: int) -> float:
    """Standard error (percentage points) of an accuracy measured on ``n`` examples."""
    p = accuracy_pct / 100.0
    return 100.0 * math.sqrt(max(p * (1 - p), 0.0) / n) if n else 0.0


def save(fig, path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    import matplotlib.pyplot as plt

    plt.close(fig)


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
