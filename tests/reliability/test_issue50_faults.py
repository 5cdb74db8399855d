"""Issue 50, faults with real processes: a launcher stopped with hung workers (item 8), the
two-process run with its final evaluation repeated (item 8, slow), SIGTERM over a sweep of
moments of start-up (item 1, slow) and a workdir that turns read-only mid-run (item 2)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("sig,status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stopped_launcher_stops_its_hung_workers(sig, status, tmp_path):
    """The workers ignore the forwarded signal (as one stuck in a collective does): they are
    killed once the grace period is over, and the launcher exits 128 + the signal."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    launcher = subprocess.Popen(
        [sys.executable, "launch/local.py", "--num-processes", "2", "--devices-per-process",
         "1", "--module", "tests.reliability._hung_worker", "--grace-s", "2", "--",
         f"--workdir={tmp_path}"],
        cwd=REPO, env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    pid_files = [tmp_path / f"worker_{i}.pid" for i in range(2)]
    t0 = time.monotonic()
    while not all(p.exists() for p in pid_files):
        assert launcher.poll() is None, launcher.stderr.read()
        assert time.monotonic() - t0 < 60, "the workers never started"
        time.sleep(0.05)
    pids = [int(p.read_text()) for p in pid_files]
    launcher.send_signal(sig)
    try:
        _, err = launcher.communicate(timeout=60)
    finally:
        for pid in pids:  # never leave one behind, even when the test fails
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert launcher.returncode == status, err
    assert "forwarded to the 2 processes" in err and "killed" in err
    t0 = time.monotonic()
    while any(_alive(pid) for pid in pids) and time.monotonic() - t0 < 10:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in pids)
