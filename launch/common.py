"""Shared pieces of the launchers: the main-job command line, sweep expansion, and the
local check of a job's config (and every ``--set`` override) before anything is written,
copied or queued."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
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


class LaunchError(Exception):
    """A problem with the launcher's input that one sentence explains (exit status 2)."""


def fail(prog: str, e: Exception) -> int:
    """Prints ``error: <sentence>`` for ``e`` on stderr; returns exit status 2."""
    print(f"error: [{prog}] {e}", file=sys.stderr, flush=True)
    return 2


def parse_sets(items: list[str]) -> dict:
    """``["train.num_steps=5", ...]`` (``--set`` values) -> ``{"train.num_steps": "5"}``."""
    out = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise LaunchError(f"--set {item!r} is not FIELD=VALUE (e.g. --set train.num_steps=100)")
        out[key.strip()] = value
    return out


def _local_config(config: str) -> str:
    """``config`` (``path.py[:variant]`` or a module name) as a file here: relative paths
    are tried from this directory, then from the checkout (where the job will run)."""
    spec = paths.config_file(config)
    path, sep, variant = spec.partition(":")
    if not os.path.exists(path) and not os.path.isabs(path) and (REPO / path).exists():
        path = str(REPO / path)
    return path + sep + variant


def check_job(
    config: str,
    overrides: dict | None = None,
    *,
    num_devices: int | str | None,
    process_count: int = 1,
):
    """Loads the job's config here, applies ``overrides`` exactly as ``seqjax.main`` parses
    ``--config.FIELD=VALUE`` and runs ``config_validation.validate`` for the job's device
    and process counts (``num_devices=None``: this machine's; ``"mesh"``: any count the
    mesh fits, when the launcher cannot know it). Returns the ConfigDict; any problem is
    one ``LaunchError`` naming the config field (or ``--set`` item) and what is valid.
    """
    from absl import flags
    from ml_collections import config_flags

    from seqjax.train import config_validation, errors

    spec = _local_config(config)
    args = []
    for key, value in (overrides or {}).items():
        key = key[len("config.") :] if key.startswith("config.") else key
        args.append(f"--config.{key}={value}")
    problem = errors.config_file_problem(["seqjax.main", f"--config={spec}", *args])
    if problem:
        raise LaunchError(problem)
    path, _, variant = spec.partition(":")
    base = config_files.load_file(path, "_seqjax_launch_config").get_config(
        *([variant] if variant else [])
    )
    values = flags.FlagValues()
    try:
        config_flags.DEFINE_config_dict(
            "config", base, flag_values=values, lock_config=True, sys_argv=["launcher", *args]
        )
        values(["launcher", *args])
    except flags.Error as e:
        raise LaunchError(f"--set: {e}") from None
    job_config = values["config"].value
    if num_devices == "mesh":
        num_devices = nominal_devices(job_config)
    try:
        config_validation.validate(job_config, num_devices=num_devices, process_count=process_count)
    except config_validation.ConfigError as e:
        raise LaunchError(f"{config} (with the overrides) is not valid:\n{e}") from None
    return job_config


def nominal_devices(config) -> int:
    """A device count the config's mesh fits, for a launcher that cannot know the slice's
    (the product of the mesh's fixed axis sizes; ``-1`` axes count 1)."""
    mesh = config.get("mesh") or {}
    n = 1
    for value in dict(mesh).values():
        if isinstance(value, int) and value > 0:
            n *= value
    return n


def untracked_package_files(repo: Path = REPO) -> list[str]:
    """Untracked files under ``seqjax/`` (a new mechanism not yet ``git add``-ed): a copy
    made with ``git archive HEAD`` leaves them out."""
    out = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "--others", "--exclude-standard", "--", "seqjax"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return [line for line in out.splitlines() if line.strip()]


def marked(value, default) -> str:
    """``value`` with ``" (default)"`` when it is the flag's default (for printed plans)."""
    return f"{value} (default)" if value == default else f"{value}"
