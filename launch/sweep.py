"""Expands a config's ``sweep()`` into named runs and runs or prints them.

    python launch/sweep.py --config configs/char_lm.py:smoke --workdir workdirs/sweep --mode print
    python launch/sweep.py --config configs/char_lm.py:smoke --workdir workdirs/sweep --mode local
    python launch/sweep.py ... --mode local --parallel 2      # two runs at a time
    python launch/sweep.py ... --mode slurm --nodes 1 --gpus-per-node 8 --partition gpu \
        --time 4:00:00 --account abc --dry-run              # one sbatch script per run
    python launch/collect.py --workdir workdirs/sweep --metric validation/bits_per_char

Each run gets its own workdir ``WORKDIR/<name>`` (so rerunning the sweep resumes every
run) and ``WORKDIR/sweep.json`` records the runs, their overrides and commands.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from launch import common, slurm  # noqa: E402
from seqjax.train import paths  # noqa: E402


def plan(config: str, workdir: str, extra: dict | None = None) -> list[dict]:
    runs = []
    for point in common.sweep_points(config):
        overrides = {**point, **(extra or {})}
        name = common.run_name(point)
        run_dir = str(paths.workdir_path(workdir) / name)
        runs.append(
            {
                "name": name,
                "workdir": run_dir,
                "overrides": overrides,
                "command": common.main_command(config, run_dir, overrides, sys.executable),
            }
        )
    return runs


def _local_log(workdir: str) -> Path:
    """``<run workdir>/sweep.log``, or ``./sweep_logs/<run>.log`` for a bucket workdir."""
    if paths.is_remote(workdir):
        path = Path("sweep_logs") / (workdir.rstrip("/").rsplit("/", 1)[-1] + ".log")
    else:
        path = Path(workdir) / "sweep.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def run_local(runs: list[dict], parallel: int) -> int:
    """Runs the commands, ``parallel`` at a time; returns the number of failed runs."""
    pending, active, failed = list(runs), [], 0
    while pending or active:
        while pending and len(active) < parallel:
            run = pending.pop(0)
            log_path = _local_log(run["workdir"])
            log = open(log_path, "a")
            print(f"[sweep] start {run['name']}", flush=True)
            active.append((run, subprocess.Popen(run["command"], stdout=log, stderr=log), log))
        for item in list(active):
            run, proc, log = item
            if proc.poll() is not None:
                log.close()
                active.remove(item)
                status = "ok" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})"
                failed += proc.returncode != 0
                print(
                    f"[sweep] {run['name']}: {status}; log {_local_log(run['workdir'])}", flush=True
                )
        time.sleep(0.5)
    return failed


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="config file[:variant] with a sweep()")
    parser.add_argument("--workdir", required=True, help="base directory, one subfolder per run")
    parser.add_argument("--mode", choices=("print", "local", "slurm"), default="print")
    parser.add_argument("--parallel", type=int, default=1, help="local runs at a time")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="extra override for every run, e.g. --set train.num_steps=100",
    )
    parser.add_argument("--dry-run", action="store_true", help="slurm: print, do not submit")
    slurm_flags = parser.add_argument_group("--mode slurm: the allocation of every run")
    slurm.add_job_arguments(slurm_flags)
    args = parser.parse_args(argv)
    extra = dict(s.split("=", 1) for s in args.set)
    runs = plan(args.config, args.workdir, extra)
    base = paths.workdir_path(args.workdir)
    base.mkdir(parents=True, exist_ok=True)
    (base / "sweep.json").write_text(json.dumps(runs, indent=2) + "\n")
    if args.mode == "print":
        for run in runs:
            print(common.shell_join(run["command"]))
        return 0
    if args.mode == "slurm":
        for run in runs:
            slurm.main(
                ["--config", args.config, "--workdir", run["workdir"], "--job-name", run["name"]]
                + slurm.job_argv(args)
                + [f"--set={k}={v}" for k, v in run["overrides"].items()]
                + (["--dry-run"] if args.dry_run else [])
            )
        return 0
    failed = run_local(runs, max(1, args.parallel))
    print(f"[sweep] {len(runs) - failed}/{len(runs)} runs succeeded")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
