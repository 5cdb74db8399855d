"""Writes (and submits) a SLURM batch script for a multi-node GPU run of the main job.

    python launch/slurm.py --config configs/char_lm.py --workdir /shared/runs/lm \
        --nodes 2 --gpus-per-node 8 --partition gpu --time 24:00:00 --dry-run

One process per GPU (``--ntasks-per-node = gpus per node``; JAX's SLURM auto-detection in
``jax.distributed.initialize()`` reads the coordinator, process count and id from srun's
environment) or one per node (``--per-node``: each process drives all GPUs of its node).
Preemption: the script asks SLURM for ``--requeue`` and a SIGTERM two minutes before the
end (``--signal=TERM@120``); the job saves a checkpoint and exits 0 on SIGTERM, and the
requeued job resumes from the workdir's newest complete checkpoint.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from launch import common  # noqa: E402

TEMPLATE = """#!/bin/bash
#SBATCH --job-name={job_name}
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node={tasks_per_node}
#SBATCH --gpus-per-node={gpus_per_node}
#SBATCH --cpus-per-task={cpus_per_task}
#SBATCH --time={time}
#SBATCH --output={workdir}/slurm-%j.out
#SBATCH --requeue
#SBATCH --signal=TERM@120
{partition_line}{extra_lines}
set -euo pipefail
mkdir -p {workdir}
cd {repo}
{setup}
# srun starts one task per process; jax.distributed.initialize() (called by seqjax.main
# when SLURM_NTASKS > 1) reads the coordinator and process ids from SLURM's environment.
srun --kill-on-bad-exit=1 {command}
"""


def render(args) -> str:
    tasks = 1 if args.per_node else args.gpus_per_node
    overrides = dict(s.split("=", 1) for s in args.set)
    command = common.shell_join(common.main_command(args.config, args.workdir, overrides))
    return TEMPLATE.format(
        job_name=args.job_name,
        nodes=args.nodes,
        tasks_per_node=tasks,
        gpus_per_node=args.gpus_per_node,
        cpus_per_task=args.cpus_per_task,
        time=args.time,
        workdir=args.workdir,
        repo=args.repo,
        partition_line=f"#SBATCH --partition={args.partition}\n" if args.partition else "",
        extra_lines="".join(f"#SBATCH {x}\n" for x in args.sbatch_arg),
        setup=args.setup,
        command=command,
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--workdir", required=True, help="shared filesystem path")
    parser.add_argument("--job-name", default="seqjax")
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--per-node", action="store_true", help="one process per node")
    parser.add_argument("--cpus-per-task", type=int, default=8)
    parser.add_argument("--time", default="24:00:00")
    parser.add_argument("--partition", default=None)
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
        help="extra '#SBATCH' option, e.g. --sbatch-arg=--account=abc",
    )
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    parser.add_argument("--dry-run", action="store_true", help="print the script, submit nothing")
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.gpus_per_node < 1:
        parser.error("--nodes and --gpus-per-node must be >= 1")
    script = render(args)
    if args.dry_run:
        print(script)
        return 0
    path = Path(args.workdir) / "job.sbatch"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(script)
    return subprocess.run(["sbatch", str(path)], check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
