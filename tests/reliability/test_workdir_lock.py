"""One job per workdir (issue 16, item 1): an exclusive lock that names its holder, taken
over when its holder died."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from seqjax.train import workdir as workdir_lib


def test_second_lock_refused_and_names_holder(tmp_path):
    first = workdir_lib.WorkdirLock(str(tmp_path)).acquire()
    with pytest.raises(workdir_lib.WorkdirError) as e:
        workdir_lib.WorkdirLock(str(tmp_path)).acquire()
    msg = str(e.value)
    assert f"pid {os.getpid()}" in msg and f"host {socket.gethostname()}" in msg
    assert "started 20" in msg and "seqjax.lock" in msg
    first.release()
    again = workdir_lib.WorkdirLock(str(tmp_path)).acquire()  # free once released
    assert again.took_over is None
    again.release()


def test_lock_of_a_killed_process_is_taken_over(tmp_path):
    """A process holds the lock and is killed with SIGKILL: the next job takes it over."""
    code = (
        "import sys, time; from seqjax.train import workdir as w; "
        f"w.WorkdirLock({str(tmp_path)!r}).acquire(); print('locked', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(workdir_lib.WorkdirError, match=f"pid {proc.pid}"):
            workdir_lib.WorkdirLock(str(tmp_path)).acquire()
    finally:
        proc.kill()
        proc.wait()
    lock = workdir_lib.WorkdirLock(str(tmp_path)).acquire()
    assert lock.took_over["pid"] == proc.pid
    holder = json.loads((tmp_path / "seqjax.lock").read_text())
    assert holder["pid"] == os.getpid()
    lock.release()


def test_acquire_for_job_single_process(tmp_path):
    lock = workdir_lib.acquire_for_job(str(tmp_path))
    with pytest.raises(workdir_lib.WorkdirError, match="in use by another job"):
        workdir_lib.acquire_for_job(str(tmp_path))
    lock.release()


def test_main_refuses_a_locked_workdir(helpers, corpus, tmp_path):
    """A second ``seqjax.main`` on a workdir in use exits 2 at once, naming the holder."""
    lock = workdir_lib.WorkdirLock(str(tmp_path)).acquire()
    try:
        proc = helpers.run_main(tmp_path, corpus, timeout=120)
    finally:
        lock.release()
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert "Traceback" not in out
    assert f"pid {os.getpid()}" in out and "in use by another job" in out
    assert not (tmp_path / "checkpoints").exists()


def test_remote_workdir_is_not_locked_locally(caplog):
    """gs:// workdirs: no local folder or lock file is made (flock needs a local/NFS path)."""
    import logging

    with caplog.at_level(logging.WARNING):
        assert workdir_lib.acquire_for_job("gs://bucket/run") is None
    assert "no lock" in caplog.text
    assert not os.path.exists("gs:")
