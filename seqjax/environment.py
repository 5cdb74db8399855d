"""What a result was measured on: machine, CPU, threads, devices, versions, commit, load.

One capture for everything that records its environment: a training run's
``run_info.<n>.json`` (``seqjax.train.metrics.write_run_info``), every benchmark result file
(``seqjax.bench.write_results``) and the studies in ``experiments/``.
"""

from __future__ import annotations

import datetime
import os
import platform
import socket
import subprocess
import threading
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import jax

# Versions recorded with every run and result (None when a package is not installed).
PACKAGES = (
    "jax",
    "jaxlib",
    "flax",
    "optax",
    "orbax-checkpoint",
    "grain",
    "tensorflow-datasets",
    "ml-collections",
    "numpy",
    "tensorboardX",
)
REPO = Path(__file__).resolve().parents[1]


def git_commit(repo: Path | None = None, short: bool = False) -> str:
    """``<sha>`` or ``<sha>-dirty`` (tracked files changed) of the repository holding seqjax
    (or ``repo``), or "unknown" outside a git checkout."""
    cwd = repo or REPO
    try:
        sha = subprocess.run(
            ["git", "rev-parse", *(["--short"] if short else []), "HEAD"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        return (sha + ("-dirty" if dirty else "")) if sha else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def package_versions(names: Sequence[str] = PACKAGES, python: bool = False) -> dict:
    """``{package: version or None}``, with ``"python"`` first when ``python``."""
    out = {"python": platform.python_version()} if python else {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def thread_counts() -> dict[str, Any]:
    """Cores this process may use, its live threads, and the settings that size thread pools."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = os.cpu_count()
    os_threads = None
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Threads:"):
                os_threads = int(line.split()[1])
    except OSError:
        pass
    env = ("XLA_FLAGS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "TF_NUM_INTEROP_THREADS")
    return {
        "cpu_affinity": affinity,
        "os_threads": os_threads,
        "python_threads": threading.active_count(),
        "env": {k: os.environ[k] for k in env if k in os.environ},
    }


def loadavg() -> list[float] | None:
    """The 1, 5 and 15-minute load averages, or None where the OS has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def capture() -> dict[str, Any]:
    """Machine, CPU, threads, devices, versions, commit and current load, as one dict.

    The keys the studies print (``processor``, ``cpu_count``, ``python``, ``platform``,
    ``backend``, ``device_kind``) are top-level; ``versions`` holds the packages.
    """
    devices = jax.devices()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": platform.node(),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "threads": thread_counts(),
        "loadavg": loadavg(),
        "python": platform.python_version(),
        "backend": jax.default_backend(),
        "process_count": jax.process_count(),
        "devices": [str(d.device_kind) for d in devices],
        "device_kind": devices[0].device_kind,
        "device_count": len(devices),
        "versions": package_versions(),
        "commit": git_commit(short=True),
    }
