"""Shared pieces of the launchers: the main-job command line and sweep expansion."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from seqjax.configs import common as config_files  # noqa: E402
from seqjax.train import paths  # noqa: E402


def main_command(
    config: str, workdir: str, overrides: dict | None = None, python: str = "python"
) -> list[str]:
    """``python -m seqjax.main --config CONFIG --workdir DIR --config.a.b=v ...``."""
    cmd = [python, "-m", "seqjax.main", f"--config={config}", f"--workdir={workdir}"]
    for key, value in (overrides or {}).items():
        key = key if key.startswith("config.") else f"config.{key}"
        cmd.append(f"--{key}={value}")
    return cmd


def absolute_workdir(workdir: str) -> str:
    """The workdir as the job will see it: relative/``~`` made absolute here (a job runs
    in another directory: the checkout on the cluster), ``gs://`` kept."""
    return str(paths.workdir_path(workdir))


def shell_join(cmd: list[str]) -> str:
    return " ".join(shlex.quote(c) for c in cmd)


def load_config_module(config: str):
    """Imports the config file named by ``--config`` (``path.py[:variant]``)."""
    return config_files.load_file(paths.config_file(config).split(":", 1)[0])


def sweep_points(config: str) -> list[dict]:
    """The config's ``sweep()``: a list of ``{"config.field": value}`` override dicts."""
    module = load_config_module(config)
    if not hasattr(module, "sweep"):
        raise ValueError(f"{config} defines no sweep(); add one returning a list of dicts")
    points = list(module.sweep())
    if not points or not all(isinstance(p, dict) for p in points):
        raise ValueError(f"{config}: sweep() must return a non-empty list of dicts")
    return points


def run_name(point: dict) -> str:
    """A short, filesystem-safe name for one sweep point, e.g. ``num_layers=2,d_model=128``."""
    parts = []
    for key, value in point.items():
        short = key.split(".")[-1]
        parts.append(f"{short}={value}")
    name = ",".join(parts) or "default"
    return re.sub(r"[^A-Za-z0-9_.,=+-]", "_", name)
