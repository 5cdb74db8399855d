"""SIGTERM to ONE process of a 2-process job (``jax.distributed`` on this machine): both
processes stop at the same step, save one checkpoint of that step together and exit 0.

JAX's preemption notifier owns SIGTERM once ``jax.distributed`` is initialized and tells
every process; a handler of the loop's own that replaced it would leave the signalled
process alone in the collective save (a deadlock: the test's timeout).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.train.conftest import REPO, complete_steps, main_command, subprocess_env

sys.path.insert(0, str(REPO))
from launch import local  # noqa: E402

TIMEOUT_S = 300


def _last_step(workdir) -> int:
    path = workdir / "metrics.jsonl"
    if not path.exists():
        return 0
    steps = []
    for line in path.read_text().splitlines():
        try:
            steps.append(json.loads(line).get("step", 0))
        except json.JSONDecodeError:  # a line being written
            pass
    return max(steps, default=0)


@pytest.mark.parametrize("signalled", [1])
def test_sigterm_to_one_process_stops_both_at_the_same_step(corpus, tmp_path, signalled):
    args = main_command(
        tmp_path,
        corpus,
        **{"train.num_steps": 100_000, "mesh.data": -1, "train.checkpoint_every": 0},
    )
    port = local.free_port()
    procs, logs = [], []
    try:
        for i in range(2):
            log = open(tmp_path / f"log_{i}.txt", "w")
            logs.append(log)
            env = local.process_env(i, 2, 4, port, subprocess_env(corpus))
            procs.append(
                subprocess.Popen(args, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
            )
        t0 = time.monotonic()
        while _last_step(tmp_path) < 3:  # training, past the first steps
            assert all(p.poll() is None for p in procs), "a process exited before the signal"
            assert time.monotonic() - t0 < TIMEOUT_S, "no training step in time"
            time.sleep(0.2)
        procs[signalled].send_signal(signal.SIGTERM)
        codes = [p.wait(timeout=TIMEOUT_S) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for log in logs:
            log.close()
    texts = [(tmp_path / f"log_{i}.txt").read_text() for i in range(2)]
    assert codes == [0, 0], [t[-3000:] for t in texts]
    stops = [re.findall(r"stopped \(preempted\) at step (\d+)", t) for t in texts]
    assert all(len(s) == 1 for s in stops), [t[-3000:] for t in texts]
    step = int(stops[0][0])
    assert int(stops[1][0]) == step >= 3
    assert complete_steps(tmp_path) == [step]  # one checkpoint, of the agreed step
    assert _last_step(tmp_path) == step  # metrics up to the stop, none after
