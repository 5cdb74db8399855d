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

Before anything is written or queued, the config and every ``--set FIELD=VALUE`` are
loaded and validated here (``seqjax.train.config_validation``) for this allocation's device
and process counts, so a misspelled field or a batch that the GPUs do not divide fails now,
not after the queue wait. The plan printed on stderr states every allocation value and
marks defaults (1 node, 8 GPUs per node, 8 CPUs per task, 24:00:00, no ``--mem``: the
cluster's default). Paths may contain spaces (``#SBATCH`` values are double-quoted). Any
problem ends in one ``error:`` line and exit status 2.
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
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
#SBATCH --output={output}
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


# The allocation flags' defaults, stated in --help and in the printed plan.
DEFAULTS = {
    "nodes": 1,
    "gpus_per_node": 8,
    "cpus_per_task": 8,
    "time": "24:00:00",
    "mem": None,
}


def time_limit_seconds(text: str) -> int:
    """SLURM ``--time`` (``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``) -> s."""
    try:
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
    except ValueError:
        raise common.LaunchError(
            f"--time={text!r} is not a SLURM time; valid: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S "
            "(e.g. 24:00:00)"
        ) from None


def local_device_ids(per_node: bool, gpus_per_node: int) -> str:
    """The ``JAX_LOCAL_DEVICE_IDS`` value of a task (a shell word, expanded per task)."""
    if per_node:
        return ",".join(str(i) for i in range(gpus_per_node))
    return "$SLURM_LOCALID"


def sbatch_quote(flag: str, value: str) -> str:
    """``value`` in double quotes for an ``#SBATCH`` line: sbatch splits those lines at
    spaces and treats ``#`` as a comment outside double quotes (single quotes are not
    special to it)."""
    value = str(value)
    if any(c in value for c in '"\\\n$`'):
        raise common.LaunchError(
            f"{flag} {value!r} contains a double quote, backslash, $, ` or newline, which an "
            "#SBATCH line cannot carry; choose a path without them"
        )
    return value if re.fullmatch(r"[A-Za-z0-9_./%:,=+@~-]+", value) else f'"{value}"'


def _default_log_dir(args) -> str:
    """SLURM writes its output file itself: the workdir, unless that is a bucket."""
    return args.workdir if not paths.is_remote(args.workdir) else f"{args.repo}/slurm_logs"


def tasks_per_node(args) -> int:
    return 1 if args.per_node else args.gpus_per_node


def render(args, overrides: dict | None = None) -> str:
    """The batch script (``args.workdir`` already absolute)."""
    overrides = common.parse_sets(args.set) if overrides is None else overrides
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
        optional.append(f"#SBATCH --partition={sbatch_quote('--partition', args.partition)}")
    if args.account:
        optional.append(f"#SBATCH --account={sbatch_quote('--account', args.account)}")
    if args.mem:
        optional.append(f"#SBATCH --mem={sbatch_quote('--mem', args.mem)}")
    optional += [f"#SBATCH {x}" for x in args.sbatch_arg]
    log_dir = args.log_dir or _default_log_dir(args)
    return TEMPLATE.format(
        job_name=sbatch_quote("--job-name", args.job_name),
        nodes=args.nodes,
        tasks_per_node=tasks_per_node(args),
        gpus_per_node=args.gpus_per_node,
        cpus_per_task=args.cpus_per_task,
        time=args.time,
        output=sbatch_quote("--log-dir", f"{log_dir}/slurm-%j.out"),
        repo=shlex.quote(args.repo),
        optional_lines="\n".join(optional),
        setup=args.setup,
        devices=devices,
        command=command,
        limit_s=time_limit_seconds(args.time),
        margin_s=REQUEUE_MARGIN_S,
        workdir_q=shlex.quote(args.workdir),
    )


def add_job_arguments(parser) -> None:
    """The allocation flags (shared with ``launch/sweep.py --mode slurm``)."""
    d = DEFAULTS
    parser.add_argument("--nodes", type=int, default=d["nodes"], help="(default: %(default)s)")
    parser.add_argument(
        "--gpus-per-node", type=int, default=d["gpus_per_node"], help="(default: %(default)s)"
    )
    parser.add_argument(
        "--per-node",
        action="store_true",
        help="one process per node driving all its GPUs (default: one process per GPU)",
    )
    parser.add_argument(
        "--cpus-per-task", type=int, default=d["cpus_per_task"], help="(default: %(default)s)"
    )
    parser.add_argument(
        "--time",
        default=d["time"],
        help="wall-clock limit, H:M:S or D-H:M:S (default: %(default)s)",
    )
    parser.add_argument(
        "--mem",
        default=d["mem"],
        help="memory per node, e.g. 64G or 0 for all of it (default: not set, i.e. the "
        "cluster's default, often a few GB per CPU)",
    )
    parser.add_argument("--partition", default=None, help="(default: the cluster's default)")
    parser.add_argument("--account", default=None, help="(default: your default account)")
    parser.add_argument(
        "--log-dir",
        default=None,
        help="where slurm-<jobid>.out goes (default: the workdir; REPO/slurm_logs for gs://)",
    )
    parser.add_argument(
        "--repo",
        default=str(common.REPO),
        help="seqjax checkout on the cluster (default: this checkout, %(default)s)",
    )
    parser.add_argument(
        "--setup",
        default="source .venv/bin/activate",
        help="shell line preparing the environment on each node (default: %(default)r)",
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
    out += [f"--mem={args.mem}"] if args.mem else []
    out += [f"--log-dir={args.log_dir}"] if args.log_dir else []
    return out + [f"--sbatch-arg={x}" for x in args.sbatch_arg]


def check_allocation(args) -> None:
    """The allocation flags, checked before anything else (``LaunchError``)."""
    for flag, value in (("--nodes", args.nodes), ("--gpus-per-node", args.gpus_per_node)):
        if value < 1:
            raise common.LaunchError(f"{flag}={value}; valid: an integer >= 1")
    if args.cpus_per_task < 1:
        raise common.LaunchError(f"--cpus-per-task={args.cpus_per_task}; valid: >= 1")
    time_limit_seconds(args.time)


def check_job(args, overrides: dict) -> None:
    """The config and overrides, validated here for this allocation's devices and tasks."""
    common.check_job(
        args.config,
        overrides,
        num_devices=args.nodes * args.gpus_per_node,
        process_count=args.nodes * tasks_per_node(args),
    )


def require_sbatch() -> None:
    if shutil.which("sbatch") is None:
        raise common.LaunchError(
            "sbatch is not on PATH: run this on a SLURM login node, or pass --dry-run to "
            "print the script"
        )


def plan(args) -> str:
    """What will be asked for, each default marked as such."""
    d, m = DEFAULTS, common.marked
    procs = args.nodes * tasks_per_node(args)
    each = "one per node" if args.per_node else "one per GPU"
    mem = args.mem if args.mem else "the cluster's default (--mem not set)"
    return "\n".join(
        [
            f"[slurm] job {args.job_name}: nodes {m(args.nodes, d['nodes'])}, GPUs per node "
            f"{m(args.gpus_per_node, d['gpus_per_node'])}, {procs} processes ({each}), CPUs "
            f"per task {m(args.cpus_per_task, d['cpus_per_task'])}, time "
            f"{m(args.time, d['time'])}, memory per node {mem}, partition "
            f"{args.partition or 'the default'}",
            f"[slurm] config {args.config} with its overrides is valid for "
            f"{args.nodes * args.gpus_per_node} devices; workdir {args.workdir}; log "
            f"{args.log_dir or _default_log_dir(args)}/slurm-<jobid>.out",
        ]
    )


def submit(args, overrides: dict, *, checked: bool = False) -> int:
    """Checks (unless ``checked``), prints the plan, then prints or writes and submits the
    script. ``args.workdir`` must already be absolute."""
    if not checked:
        check_allocation(args)
        check_job(args, overrides)
        if not args.dry_run:
            require_sbatch()
    script = render(args, overrides)
    print(plan(args), file=sys.stderr, flush=True)
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="config file[:variant]")
    parser.add_argument("--workdir", required=True, help="shared filesystem path (or gs://)")
    parser.add_argument("--job-name", default="seqjax", help="(default: %(default)s)")
    add_job_arguments(parser)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="config override, e.g. --set train.num_steps=100 (checked here first)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the script, submit nothing")
    args = parser.parse_args(argv)
    try:
        overrides = common.parse_sets(args.set)
        args.workdir = common.absolute_workdir(args.workdir)  # the job runs in --repo
        return submit(args, overrides)
    except common.LaunchError as e:
        return common.fail("slurm", e)


if __name__ == "__main__":
    sys.exit(main())
