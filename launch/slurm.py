"""Writes (and submits) a SLURM batch script for a multi-node GPU run of the main job.

    python launch/slurm.py --config configs/char_lm.py --workdir /shared/runs/lm \
        --nodes 2 --gpus-per-node 8 --partition gpu --time 24:00:00 --dry-run

Processes: one per GPU (default; ``--ntasks-per-node`` = GPUs per node, task i of a node
drives GPU ``$SLURM_LOCALID``) or one per node (``--per-node``: each process drives all
GPUs of its node). ``JAX_LOCAL_DEVICE_IDS`` is exported per task in both modes, since JAX's
SLURM auto-detection would otherwise give every process ``[SLURM_LOCALID]``, i.e. one GPU.
``jax.distributed.initialize()`` (called by ``seqjax.main`` when ``SLURM_NTASKS > 1``) reads
the coordinator, process count and id from srun's environment.

Time limit and preemption: the batch shell gets SIGTERM two minutes before the end
(``--signal=B:TERM@120``), forwards it to the job (which saves a checkpoint and exits 0)
and then requeues the job itself (``scontrol requeue $SLURM_JOB_ID``), so the next
allocation resumes from the workdir's newest complete checkpoint. A run that ends for any
other reason is not requeued. ``--requeue`` also lets SLURM requeue it after a preemption.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from etils import epath  # noqa: E402

from launch import common  # noqa: E402
from seqjax.train import paths  # noqa: E402

TEMPLATE = """#!/bin/bash
#SBATCH --job-name={job_name}
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node={tasks_per_node}
#SBATCH --gpus-per-node={gpus_per_node}
#SBATCH --cpus-per-task={cpus_per_task}
#SBATCH --time={time}
#SBATCH --output={log_dir}/slurm-%j.out
#SBATCH --open-mode=append
#SBATCH --requeue
#SBATCH --signal=TERM@120
{optional_lines}
set -uo pipefail
cd {repo} || exit 1
{setup}
{devices}
# srun starts one task per process; jax.distributed.initialize() (called by seqjax.main
# when SLURM_NTASKS > 1) reads the coordinator and process ids from SLURM's environment.
start_s=$(date +%s)
srun --kill-on-bad-exit=1 {command}
status=$?

# SIGTERM 120 s before the time limit: the job saved a checkpoint and exited 0. Requeue
# this job when that is why it ended (the limit is near and the run has no result.json),
# so the next allocation resumes it; a finished, failed or cancelled run is left alone.
limit_s={limit_s}
elapsed_s=$(( $(date +%s) - start_s ))
if [ "$status" = 0 ] && [ "$elapsed_s" -ge $(( limit_s - {margin_s} )) ] && \
    ! python -c "import sys; from etils import epath; \
sys.exit(not epath.Path(sys.argv[1], 'result.json').exists())" {workdir_q}; then
  echo "[slurm] stopped at the time limit after ${{elapsed_s}} s: requeueing $SLURM_JOB_ID"
  scontrol requeue "$SLURM_JOB_ID"
fi
exit "$status"
"""

# Seconds before the time limit from which an exit counts as "stopped for time" (the
# SIGTERM comes 120 s before the limit; the job may take a while to save and exit).
REQUEUE_MARGIN_S = 300


def time_limit_seconds(text: str) -> int:
    """SLURM ``--time`` (``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``) -> s."""
    days, _, rest = text.partition("-") if "-" in text else ("0", "", text)
    parts = [int(p) for p in rest.split(":")]
    if "-" in text:  # D-H[:M[:S]]
        parts += [0] * (3 - len(parts))
        h, m, s = parts
    elif len(parts) == 1:
        h, m, s = 0, parts[0], 0
    elif len(parts) == 2:
        h, m, s = 0, parts[0], parts[1]
    else:
        h, m, s = parts
    return ((int(days) * 24 + h) * 60 + m) * 60 + s


def local_device_ids(per_node: bool, gpus_per_node: int) -> str:
    """The ``JAX_LOCAL_DEVICE_IDS`` value of a task (a shell word, expanded per task)."""
    if per_node:
        return ",".join(str(i) for i in range(gpus_per_node))
    return "$SLURM_LOCALID"


def _default_log_dir(args) -> str:
    """SLURM writes its output file itself: the workdir, unless that is a bucket."""
    return args.workdir if not paths.is_remote(args.workdir) else f"{args.repo}/slurm_logs"


def render(args) -> str:
    tasks = 1 if args.per_node else args.gpus_per_node
    overrides = dict(s.split("=", 1) for s in args.set)
    command = common.shell_join(common.main_command(args.config, args.workdir, overrides))
    if args.per_node:
        ids = local_device_ids(True, args.gpus_per_node)
        devices = (
            f"# One process per node drives all its GPUs (JAX's SLURM detection would give it\n"
            f"# [SLURM_LOCALID], one GPU).\nexport JAX_LOCAL_DEVICE_IDS={ids}\n"
        )
    else:
        devices = (
            "# One process per GPU: JAX's SLURM detection gives task i of a node\n"
            "# local_device_ids=[SLURM_LOCALID], i.e. GPU i.\nunset JAX_LOCAL_DEVICE_IDS\n"
        )
    optional = []
    if args.partition:
        optional.append(f"#SBATCH --partition={args.partition}")
    if args.account:
        optional.append(f"#SBATCH --account={args.account}")
    optional += [f"#SBATCH {x}" for x in args.sbatch_arg]
    return TEMPLATE.format(
        job_name=args.job_name,
        nodes=args.nodes,
        tasks_per_node=tasks,
        gpus_per_node=args.gpus_per_node,
        cpus_per_task=args.cpus_per_task,
        time=args.time,
        log_dir=args.log_dir or _default_log_dir(args),
        repo=args.repo,
        optional_lines="\n".join(optional),
        setup=args.setup,
        devices=devices,
        command=command,
        limit_s=time_limit_seconds(args.time),
        margin_s=REQUEUE_MARGIN_S,
        workdir_q=shlex.quote(args.workdir),
    )


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    """The allocation flags (shared with ``launch/sweep.py --mode slurm``)."""
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--per-node", action="store_true", help="one process per node")
    parser.add_argument("--cpus-per-task", type=int, default=8)
    parser.add_argument("--time", default="24:00:00")
    parser.add_argument("--partition", default=None)
    parser.add_argument("--account", default=None)
    parser.add_argument(
        "--log-dir", default=None, help="where slurm-<jobid>.out goes (default: the workdir)"
    )
    parser.add_argument("--repo", default=str(common.REPO), help="seqjax checkout on the cluster")
    parser.add_argument(
        "--setup",
        default="source .venv/bin/activate",
        help="shell line preparing the environment on each node",
    )
    parser.add_argument(
        "--sbatch-arg",
        action="append",
        default=[],
        help="extra '#SBATCH' option, e.g. --sbatch-arg=--qos=high",
    )


def job_argv(args) -> list[str]:
    """``add_job_arguments``'s values as command-line flags again."""
    out = [
        f"--nodes={args.nodes}",
        f"--gpus-per-node={args.gpus_per_node}",
        f"--cpus-per-task={args.cpus_per_task}",
        f"--time={args.time}",
        f"--repo={args.repo}",
        f"--setup={args.setup}",
    ]
    out += ["--per-node"] if args.per_node else []
    out += [f"--partition={args.partition}"] if args.partition else []
    out += [f"--account={args.account}"] if args.account else []
    out += [f"--log-dir={args.log_dir}"] if args.log_dir else []
    return out + [f"--sbatch-arg={x}" for x in args.sbatch_arg]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--workdir", required=True, help="shared filesystem path (or gs://)")
    parser.add_argument("--job-name", default="seqjax")
    add_job_arguments(parser)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    parser.add_argument("--dry-run", action="store_true", help="print the script, submit nothing")
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.gpus_per_node < 1:
        parser.error("--nodes and --gpus-per-node must be >= 1")
    args.workdir = common.absolute_workdir(args.workdir)  # the job runs in --repo
    script = render(args)
    if args.dry_run:
        print(script)
        return 0
    path = epath.Path(args.workdir) / "job.sbatch"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(script)
    Path(args.log_dir or _default_log_dir(args)).mkdir(parents=True, exist_ok=True)
    local = path if not paths.is_remote(path) else Path(tempfile.mkdtemp()) / "job.sbatch"
    if local != path:
        local.write_text(script)
    return subprocess.run(["sbatch", str(local)], check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
