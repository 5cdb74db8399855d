"""Jobs in separate processes: resume equals uninterrupted; SIGTERM saves and exits 0;
``kill -9`` at random moments (some during an asynchronous save) never leaves a checkpoint
that a restart would pick half-written, and every loss after a restart equals the
uninterrupted run's.

All runs use the same config (40 steps); ``train.stop_after`` ends a run early without
changing the learning-rate schedule.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest


def _assert_same_as_reference(losses: dict, reference: dict) -> None:
    for step, values in losses.items():
        for v in values:  # every run that logged this step (killed ones included)
            assert v == reference[step], (step, v, reference[step])


def _resumed_from(workdir) -> list:
    runs = sorted(Path(workdir).glob("run_info.*.json"), key=lambda p: int(p.name.split(".")[1]))
    return [json.loads(p.read_text())["resumed_from_step"] for p in runs]


def test_resume_equals_uninterrupted(helpers, corpus, tmp_path, reference_losses):
    """6 steps straight == 3 steps, then a new process that resumes for 3 more."""
    first = helpers.run_main(tmp_path, corpus, **{"train.stop_after": 3})
    assert first.returncode == 0, first.stderr[-3000:]
    assert helpers.complete_steps(tmp_path) == [3]
    second = helpers.run_main(tmp_path, corpus, **{"train.stop_after": 6})
    assert second.returncode == 0, second.stderr[-3000:]
    losses = helpers.losses(tmp_path)
    assert sorted(losses) == [1, 2, 3, 4, 5, 6]
    assert all(len(v) == 1 for v in losses.values())  # the resumed run starts at step 4
    _assert_same_as_reference(losses, reference_losses)
    assert _resumed_from(tmp_path) == [None, 3]


def _num_lines(workdir) -> int:
    path = Path(workdir) / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _wait_for_lines(workdir, n: int, proc, timeout: float = 120) -> None:
    """Waits until metrics.jsonl has ``n`` lines (this process has logged new steps)."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise AssertionError(f"job ended early: {proc.stderr.read()[-3000:]}")
        if _num_lines(workdir) >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"metrics.jsonl did not reach {n} lines within {timeout}s")


def _start(helpers, workdir, corpus, **extra) -> subprocess.Popen:
    return subprocess.Popen(
        helpers.main_command(workdir, corpus, **extra),
        env=helpers.subprocess_env(corpus),
        cwd=helpers.repo,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigterm_saves_exits_zero_and_resumes(helpers, corpus, tmp_path, reference_losses):
    proc = _start(helpers, tmp_path, corpus, **{"train.checkpoint_every": 0})
    _wait_for_lines(tmp_path, 3, proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 0, proc.stderr.read()[-3000:]
    saved = helpers.complete_steps(tmp_path)
    assert len(saved) == 1 and 3 <= saved[0] < 40, saved  # saved on SIGTERM, not the end
    stop = saved[0] + 3
    again = helpers.run_main(tmp_path, corpus, **{"train.stop_after": stop})
    assert again.returncode == 0, again.stderr[-3000:]
    assert _resumed_from(tmp_path) == [None, saved[0]]
    losses = helpers.losses(tmp_path)
    assert max(losses) == stop
    _assert_same_as_reference(losses, reference_losses)


def _kill_trials(helpers, corpus, workdir, reference, trials: int, seed: int) -> int:
    """Kills the job ``trials`` times, then lets it finish; returns kills during a save."""
    rng = random.Random(seed)
    expected_resume = [None]
    during_save = 0
    for _ in range(trials):
        lines = _num_lines(workdir)
        proc = _start(helpers, workdir, corpus, **{"train.checkpoint_every": 1})
        _wait_for_lines(workdir, lines + 1, proc)  # this process is training
        time.sleep(rng.uniform(0.0, 0.6))
        proc.kill()  # SIGKILL: no handler, no cleanup
        proc.wait()
        proc.stderr.close()
        during_save += bool(helpers.partial_checkpoints(workdir))
        steps = helpers.complete_steps(workdir)
        expected_resume.append(steps[-1] if steps else None)
    final = helpers.run_main(workdir, corpus, **{"train.checkpoint_every": 1})
    assert final.returncode == 0, final.stderr[-3000:]
    # Each restart resumed from the newest checkpoint that was complete when it started.
    assert _resumed_from(workdir) == expected_resume
    losses = helpers.losses(workdir)
    assert sorted(losses) == list(range(1, 41))
    _assert_same_as_reference(losses, reference)
    assert helpers.partial_checkpoints(workdir) == []  # cleaned up by the restarts
    return during_save


def test_kill9_resumes_from_newest_complete_checkpoint(helpers, corpus, tmp_path, reference_losses):
    """3 kill -9 trials (CI); the 10-trial version is marked slow."""
    _kill_trials(helpers, corpus, tmp_path, reference_losses, trials=3, seed=0)


@pytest.mark.slow
def test_kill9_ten_trials(helpers, corpus, tmp_path, reference_losses):
    during_save = _kill_trials(helpers, corpus, tmp_path, reference_losses, trials=10, seed=1)
    assert during_save >= 1  # at least one kill landed while a save was being written
