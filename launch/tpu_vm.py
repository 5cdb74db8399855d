"""Runs the main job on every worker of a Cloud TPU VM pod slice, detached from this shell.

    python launch/tpu_vm.py --tpu my-v4-32 --zone us-central2-b --project my-proj \
        --config configs/char_lm.py --workdir gs://bucket/runs/lm [--dry-run]
    python launch/tpu_vm.py --tpu my-v4-32 --zone us-central2-b --project my-proj --status
    python launch/tpu_vm.py ... --logs [--worker 3] [--lines 100]
    python launch/tpu_vm.py ... --stop          # SIGTERM: the job saves a checkpoint, exits

Start (each a ``gcloud compute tpus tpu-vm`` command on ``--worker=all``): copy this
checkout (``git archive HEAD``: committed files only; a warning lists uncommitted changes)
to every worker, install it with the TPU extra (``gcsfs`` included for ``gs://``), then
start the same command on all workers with ``nohup`` in the background: the ssh session
returns at once, and a dropped connection does not kill the pod job. Each worker writes
its own log ``~/seqjax_job/worker.log`` and its pid to ``~/seqjax_job/pid``; ``--status``,
``--logs`` and ``--stop`` reach them. JAX's TPU cluster detection makes
``jax.distributed.initialize()`` (called by ``seqjax.main`` on a multi-host slice) find the
coordinator; every worker reads its own data shard. Rerunning the start command resumes
the run from the workdir's newest complete checkpoint.

Before anything is copied, the config and every ``--set`` override are validated here, and
a multi-host slice (``--hosts`` > 1, or as ``gcloud ... describe`` reports) needs a
``gs://`` workdir: each worker would otherwise write its own, unshared checkpoints.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from launch import common  # noqa: E402
from seqjax.train import paths  # noqa: E402

REMOTE_DIR = "seqjax"
JOB_DIR = "~/seqjax_job"


def _gcloud(args, *command: str) -> list[str]:
    worker = getattr(args, "worker", None)
    where = [f"--zone={args.zone}", f"--project={args.project}"]
    where.append(f"--worker={'all' if worker is None else worker}")
    return ["gcloud", "compute", "tpus", "tpu-vm", *command, *where]


def start_commands(args, overrides: dict | None = None) -> list[list[str]]:
    """The commands that copy, install and start the job (detached) on every worker."""
    tarball = "/tmp/seqjax.tar.gz"
    overrides = common.parse_sets(args.set) if overrides is None else overrides
    job = common.shell_join(common.main_command(args.config, args.workdir, overrides, "python3"))
    install = (
        f"mkdir -p {REMOTE_DIR} && tar -xzf ~/seqjax.tar.gz -C {REMOTE_DIR} && "
        f"cd {REMOTE_DIR} && python3 -m pip install -q -e '.[tpu]'"
    )
    # nohup + setsid + no terminal: the job outlives the ssh session.
    run = (
        f"mkdir -p {JOB_DIR} && cd {REMOTE_DIR} && "
        f"(if [ -f {JOB_DIR}/pid ] && kill -0 $(cat {JOB_DIR}/pid) 2>/dev/null; "
        f'then echo "$(hostname): a job is already running (pid $(cat {JOB_DIR}/pid))"; '
        f"exit 1; fi) && "
        f"nohup setsid {job} >> {JOB_DIR}/worker.log 2>&1 < /dev/null & "
        f'echo $! > {JOB_DIR}/pid && echo "$(hostname): started pid $(cat {JOB_DIR}/pid)"'
    )
    return [
        ["git", "-C", str(common.REPO), "archive", "--format=tar.gz", "-o", tarball, "HEAD"],
        _gcloud(args, "scp", tarball, f"{args.tpu}:~/seqjax.tar.gz"),
        _gcloud(args, "ssh", args.tpu) + ["--command", install],
        _gcloud(args, "ssh", args.tpu) + ["--command", run],
    ]


def status_command(args) -> list[str]:
    check = (
        f"if [ -f {JOB_DIR}/pid ] && kill -0 $(cat {JOB_DIR}/pid) 2>/dev/null; "
        f'then echo "$(hostname): running (pid $(cat {JOB_DIR}/pid))"; '
        f'else echo "$(hostname): not running"; fi; tail -n 1 {JOB_DIR}/worker.log 2>/dev/null'
    )
    return _gcloud(args, "ssh", args.tpu) + ["--command", check]


def logs_command(args) -> list[str]:
    return _gcloud(args, "ssh", args.tpu) + [
        "--command",
        f"tail -n {int(args.lines)} {JOB_DIR}/worker.log",
    ]


def stop_command(args) -> list[str]:
    stop = (
        f"if [ -f {JOB_DIR}/pid ] && kill -TERM $(cat {JOB_DIR}/pid) 2>/dev/null; "
        f'then echo "$(hostname): SIGTERM sent (the job saves a checkpoint, then exits)"; '
        f'else echo "$(hostname): not running"; fi'
    )
    return _gcloud(args, "ssh", args.tpu) + ["--command", stop]


def uncommitted_changes(repo: Path = common.REPO) -> list[str]:
    """``git status --porcelain`` lines of tracked files that ``git archive HEAD`` would
    not ship."""
    out = subprocess.run(
        ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return [line for line in out.splitlines() if line.strip()]


def slice_hosts(args) -> int | None:
    """Workers of the slice: ``--hosts``, else ``gcloud ... describe`` (None in a dry run
    without ``--hosts``)."""
    if args.hosts is not None:
        return args.hosts
    if args.dry_run:
        return None
    command = _gcloud(args, "describe", args.tpu)[:-1] + ["--format=json"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise common.LaunchError(
            f"could not describe TPU {args.tpu} ({done.stderr.strip()[-300:]}); check --tpu, "
            "--zone and --project, or pass --hosts"
        )
    return max(1, len(json.loads(done.stdout).get("networkEndpoints", [])))


def check_start(args, overrides: dict) -> None:
    """Everything checked before anything is copied (``LaunchError``)."""
    if not args.dry_run and shutil.which("gcloud") is None:
        raise common.LaunchError(
            "gcloud is not on PATH: install the Google Cloud CLI, or pass --dry-run to print "
            "the commands"
        )
    hosts = slice_hosts(args)
    if not paths.is_remote(args.workdir):
        if hosts is None:
            raise common.LaunchError(
                f"--workdir {args.workdir} is not a bucket and the slice's size is unknown: "
                "give a gs:// workdir (needed on a multi-host slice), or --hosts 1 for a "
                "single-host TPU VM"
            )
        if hosts > 1:
            raise common.LaunchError(
                f"--workdir {args.workdir} is not a bucket but {args.tpu} has {hosts} hosts: "
                "each would write its own unshared checkpoints; give a gs://bucket/... workdir"
            )
    devices = hosts * args.chips_per_host if hosts else "mesh"
    common.check_job(args.config, overrides, num_devices=devices, process_count=hosts or 1)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tpu", required=True, help="TPU VM name")
    parser.add_argument("--zone", required=True)
    parser.add_argument("--project", required=True)
    parser.add_argument("--config", help="start: config file[:variant]")
    parser.add_argument(
        "--workdir", help="start: a path every worker sees (gs://...; required on multi-host)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="config override, e.g. --set train.num_steps=100 (checked here first)",
    )
    parser.add_argument(
        "--hosts",
        type=int,
        default=None,
        help="start: workers in the slice (default: from gcloud ... describe)",
    )
    parser.add_argument(
        "--chips-per-host",
        type=int,
        default=4,
        help="start: TPU chips per worker, for the config check (default: %(default)s)",
    )
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--status", action="store_true", help="is the job running on each worker")
    action.add_argument("--logs", action="store_true", help="the end of a worker's log")
    action.add_argument("--stop", action="store_true", help="SIGTERM the job on every worker")
    parser.add_argument("--worker", default=None, help="--logs: worker index (default 0)")
    parser.add_argument("--lines", type=int, default=50, help="--logs: lines to show (default 50)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = parser.parse_args(argv)
    try:
        commands = _commands(args, parser)
    except common.LaunchError as e:
        return common.fail("tpu_vm", e)
    for cmd in commands:
        print("+ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
        if not args.dry_run:
            done = subprocess.run(cmd, check=False)
            if done.returncode != 0:
                print(
                    f"error: [tpu_vm] {cmd[0]} {' '.join(cmd[1:5])} ... failed (exit "
                    f"{done.returncode}); its output is above",
                    file=sys.stderr,
                )
                return done.returncode
    return 0


def _commands(args, parser) -> list[list[str]]:
    if args.status:
        return [status_command(args)]
    if args.logs:
        args.worker = args.worker if args.worker is not None else "0"
        return [logs_command(args)]
    if args.stop:
        return [stop_command(args)]
    if not args.config or not args.workdir:
        parser.error("starting a job needs --config and --workdir")
    overrides = common.parse_sets(args.set)
    check_start(args, overrides)
    dirty = uncommitted_changes()
    if dirty:
        print(
            "[tpu_vm] warning: uncommitted changes are NOT shipped (git archive HEAD):\n  "
            + "\n  ".join(dirty),
            file=sys.stderr,
        )
    untracked = common.untracked_package_files()
    if untracked:
        print(
            "[tpu_vm] warning: untracked files under seqjax/ are NOT shipped (git archive "
            "HEAD); git add and commit them first:\n  " + "\n  ".join(untracked),
            file=sys.stderr,
        )
    hosts = (
        args.hosts if args.hosts is not None else ("unknown" if args.dry_run else "as described")
    )
    print(
        f"[tpu_vm] {args.tpu}: hosts {hosts}, config {args.config} with its overrides is "
        f"valid; workdir {args.workdir}",
        file=sys.stderr,
    )
    return start_commands(args, overrides)


if __name__ == "__main__":
    sys.exit(main())
