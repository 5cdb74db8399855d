"""Runs the main job on every worker of a Cloud TPU VM pod slice.

    python launch/tpu_vm.py --tpu my-v4-32 --zone us-central2-b --project my-proj \
        --config configs/char_lm.py --workdir gs://bucket/runs/lm --dry-run

Steps (each a ``gcloud compute tpus tpu-vm`` command on ``--worker=all``): copy this
checkout (a tarball of the git-tracked files) to every worker, install it with the TPU extra,
then start the same command on all workers at once. JAX's TPU cluster detection makes
``jax.distributed.initialize()`` (called by ``seqjax.main`` on a multi-host slice) find the
coordinator; every worker reads its own data shard. ``--dry-run`` prints the exact commands.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from launch import common  # noqa: E402

REMOTE_DIR = "seqjax"


def commands(args) -> list[list[str]]:
    base = ["gcloud", "compute", "tpus", "tpu-vm"]
    where = [f"--zone={args.zone}", f"--project={args.project}", "--worker=all"]
    tarball = "/tmp/seqjax.tar.gz"
    overrides = dict(s.split("=", 1) for s in args.set)
    job = common.shell_join(common.main_command(args.config, args.workdir, overrides, "python3"))
    install = (
        f"mkdir -p {REMOTE_DIR} && tar -xzf ~/seqjax.tar.gz -C {REMOTE_DIR} && "
        f"cd {REMOTE_DIR} && python3 -m pip install -q -e '.[tpu]'"
    )
    run = f"cd {REMOTE_DIR} && {job} 2>&1 | tee -a ~/seqjax_job.log"
    return [
        ["git", "-C", str(common.REPO), "archive", "--format=tar.gz", "-o", tarball, "HEAD"],
        base + ["scp", tarball, f"{args.tpu}:~/seqjax.tar.gz"] + where,
        base + ["ssh", args.tpu] + where + ["--command", install],
        base + ["ssh", args.tpu] + where + ["--command", run],
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tpu", required=True, help="TPU VM name")
    parser.add_argument("--zone", required=True)
    parser.add_argument("--project", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--workdir", required=True, help="a path every worker sees (gs://...)")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = parser.parse_args(argv)
    for cmd in commands(args):
        print("+ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
        if not args.dry_run:
            subprocess.run(cmd, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
