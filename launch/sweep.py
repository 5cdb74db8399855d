"""Expands a config's ``sweep()`` into named runs and runs or prints them.

    python launch/sweep.py --config configs/char_lm.py:smoke --workdir workdirs/sweep --mode print
    python launch/sweep.py --config configs/char_lm.py:smoke --workdir workdirs/sweep --mode local
    python launch/sweep.py ... --mode local --parallel 2      # two runs at a time
    python launch/sweep.py ... --mode slurm --nodes 1 --gpus-per-node 8 --partition gpu \
        --time 4:00:00 --account abc --dry-run              # one sbatch script per run
    python launch/collect.py --workdir workdirs/sweep --metric validation/bits_per_char

Each run gets its own workdir ``WORKDIR/<name>`` (so rerunning the sweep resumes every
run) and ``WORKDIR/sweep.json`` records the runs, their overrides and commands. Every run's
config is validated here before sweep.json or any script is written. ``--mode local``
prints a line per run when it starts (stderr) and when it ends (stdout: name, elapsed
seconds, and its test metrics or last validation metrics with their step); each run's
output goes to ``<run workdir>/sweep.log``.
"""

from __future__ import annotations

import argparse
import json
import signal
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


_BOOKKEEPING = ("count", "weight_sum", "seconds", "examples", "tokens")


def run_result(workdir: str) -> str:
    """A short summary of a finished run: its test metrics (``result.json``) or else the
    last validation line of ``metrics.jsonl``, with the step they come from."""
    base = paths.workdir_path(workdir)

    def fmt(values: dict) -> str:
        kept = {k: v for k, v in values.items() if k.rsplit("/", 1)[-1] not in _BOOKKEEPING}
        return ", ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in kept.items()
        )

    try:
        result = json.loads((base / "result.json").read_text())
        if result.get("test"):
            return f"test {fmt(result['test'])} (step {result['step']})"
    except (OSError, ValueError):
        pass
    try:
        lines = [json.loads(x) for x in (base / "metrics.jsonl").read_text().splitlines() if x]
    except (OSError, ValueError):
        return "no metrics written"
    for line in reversed(lines):
        val = {k: v for k, v in line.items() if k.startswith("validation/")}
        if val:
            return f"{fmt(val)} (step {line['step']})"
    return f"no validation metrics (last step {lines[-1]['step']})" if lines else "no metrics"


def _last_step(workdir: str) -> int | None:
    try:
        lines = (paths.workdir_path(workdir) / "metrics.jsonl").read_text().splitlines()
        return json.loads(lines[-1])["step"] if lines else None
    except (OSError, ValueError, KeyError):
        return None


def run_local(runs: list[dict], parallel: int, heartbeat_s: float = 60.0) -> int:
    """Runs the commands, ``parallel`` at a time; returns the number of failed runs.

    A line per run on start (stderr), every ``heartbeat_s`` while it runs (stderr: elapsed
    and the last step in its metrics) and on end (stdout: name, elapsed, result)."""
    pending, active, failed = list(enumerate(runs, 1)), [], 0
    total, last_beat = len(runs), time.monotonic()
    try:
        while pending or active:
            if active and time.monotonic() - last_beat >= heartbeat_s:
                last_beat = time.monotonic()
                for i, run, _, _, t0 in active:
                    step = _last_step(run["workdir"])
                    at = f", step {step}" if step is not None else ""
                    print(
                        f"[sweep] {i}/{total} {run['name']}: running for "
                        f"{time.monotonic() - t0:.0f} s{at}",
                        file=sys.stderr,
                        flush=True,
                    )
            while pending and len(active) < parallel:
                i, run = pending.pop(0)
                log_path = _local_log(run["workdir"])
                log = open(log_path, "a")
                print(
                    f"[sweep] {i}/{total} {run['name']}: started (log {log_path})", file=sys.stderr
                )
                proc = subprocess.Popen(run["command"], stdout=log, stderr=log)
                active.append((i, run, proc, log, time.monotonic()))
            for item in list(active):
                i, run, proc, log, t0 = item
                if proc.poll() is not None:
                    log.close()
                    active.remove(item)
                    elapsed = time.monotonic() - t0
                    if proc.returncode == 0:
                        status = f"ok in {elapsed:.0f} s; {run_result(run['workdir'])}"
                    else:
                        failed += 1
                        status = (
                            f"FAILED (exit {proc.returncode}) after {elapsed:.0f} s; see "
                            f"{_local_log(run['workdir'])}"
                        )
                    print(f"[sweep] {i}/{total} {run['name']}: {status}", flush=True)
            time.sleep(0.2)
    finally:  # Ctrl-C or an error here: the runs still going get SIGTERM (they save, exit)
        for _, run, proc, _log, _ in active:
            if proc.poll() is None:
                proc.terminate()
                print(f"[sweep] {run['name']}: stopped (SIGTERM)", file=sys.stderr)
        for _, _, proc, log, _ in active:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
            log.close()
    return failed


def check_runs(runs: list[dict], config: str, num_devices: int | None, processes: int) -> None:
    """Every run's config with its overrides, validated here (``LaunchError``)."""
    for run in runs:
        try:
            common.check_job(
                config, run["overrides"], num_devices=num_devices, process_count=processes
            )
        except common.LaunchError as e:
            raise common.LaunchError(f"sweep run {run['name']}: {e}") from None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="config file[:variant] with a sweep()")
    parser.add_argument("--workdir", required=True, help="base directory, one subfolder per run")
    parser.add_argument(
        "--mode", choices=("print", "local", "slurm"), default="print", help="(default: print)"
    )
    parser.add_argument(
        "--parallel", type=int, default=1, help="local runs at a time (default: %(default)s)"
    )
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
    try:
        return _main(args)
    except (common.LaunchError, ValueError, FileNotFoundError) as e:
        return common.fail("sweep", e)
    except KeyboardInterrupt:
        print(
            "[sweep] interrupted: the running runs were stopped (each saved a checkpoint); "
            "rerun the same command to resume them",
            file=sys.stderr,
        )
        return 130


def _main(args) -> int:
    extra = common.parse_sets(args.set)
    runs = plan(args.config, args.workdir, extra)
    # Everything is checked before sweep.json (or a script) is written.
    if args.mode == "slurm":
        slurm.check_allocation(args)
        procs = args.nodes * slurm.tasks_per_node(args)
        check_runs(runs, args.config, args.nodes * args.gpus_per_node, procs)
        if not args.dry_run:
            slurm.require_sbatch()
    else:
        check_runs(runs, args.config, None, 1)
    print(
        f"[sweep] {len(runs)} runs of {args.config} checked; workdir "
        f"{paths.workdir_path(args.workdir)}",
        file=sys.stderr,
    )
    base = paths.workdir_path(args.workdir)
    base.mkdir(parents=True, exist_ok=True)
    (base / "sweep.json").write_text(json.dumps(runs, indent=2) + "\n")
    if args.mode == "print":
        for run in runs:
            print(common.shell_join(run["command"]))
        return 0
    if args.mode == "slurm":
        status = 0
        for run in runs:
            job = argparse.Namespace(**vars(args))
            job.workdir, job.job_name = run["workdir"], run["name"]
            status = status or slurm.submit(job, run["overrides"], checked=True)
        return status
    # SIGTERM (a job scheduler, kill) stops the runs as Ctrl-C does: each saves, then exits.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    failed = run_local(runs, max(1, args.parallel))
    print(f"[sweep] {len(runs) - failed}/{len(runs)} runs succeeded")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
