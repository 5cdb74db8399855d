"""Issue 38, item 12: SIGTERM during start-up (before the first training step) ends in one
sentence that says what was stopped and that nothing was saved (exit 143), not silence."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import time
from pathlib import Path


def test_sigterm_during_startup_says_nothing_was_saved(helpers, corpus, tmp_path):
    work = tmp_path / "work"
    os.makedirs(corpus["data_dir"], exist_ok=True)
    # Holding the data preparation lock keeps the job in its start-up (it waits for the
    # "other" preparation), after its log file is open, so the signal lands there.
    with open(Path(corpus["data_dir"]) / ".seqjax_text_file.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        proc = subprocess.Popen(
            helpers.main_command(work, corpus),
            env=helpers.subprocess_env(corpus),
            cwd=helpers.repo,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        t0 = time.time()
        while not (work / "seqjax.log").exists():
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            assert time.time() - t0 < 120, "the job never opened its log"
            time.sleep(0.05)
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-3000:]
    assert "Traceback" not in err
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert "stopped by SIGTERM during start-up" in line
    assert "before the first training step" in line and "nothing was saved" in line
    assert not (work / "checkpoints").exists() or not any((work / "checkpoints").iterdir())
