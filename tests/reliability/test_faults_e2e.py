"""The fault suite end to end, as a user meets the faults (slow: real training jobs).

Each case asserts the exit status, that the output has no traceback, that the message
names the field, file or fix, and for the faults that the newest complete checkpoint and
the metrics survive and a resume reproduces the uninterrupted losses.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _same_as_reference(losses: dict, reference: dict) -> None:
    for step, values in losses.items():
        for v in values:
            assert v == reference[step], (step, v, reference[step])


def _lines(workdir) -> int:
    path = Path(workdir) / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _wait_for_lines(workdir, n: int, proc, timeout: float = 120) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        assert proc.poll() is None, f"job ended early: {proc.stderr.read()[-3000:]}"
        if _lines(workdir) >= n:
            return
        time.sleep(0.02)
    raise AssertionError(f"metrics.jsonl did not reach {n} lines")


def _start(helpers, workdir, corpus, **extra) -> subprocess.Popen:
    return subprocess.Popen(
        helpers.main_command(workdir, corpus, **extra),
        env=helpers.subprocess_env(corpus),
        cwd=helpers.repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _ok(proc: subprocess.CompletedProcess, code: int = 0) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode == code, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    return out


def test_damaged_newest_checkpoint_resume(helpers, corpus, tmp_path, reference_losses):
    _ok(helpers.run_main(tmp_path, corpus, **{"train.checkpoint_every": 3, "train.stop_after": 6}))
    assert helpers.complete_steps(tmp_path) == [3, 6]
    state_files = [p for p in (tmp_path / "checkpoints" / "6" / "state").rglob("*") if p.is_file()]
    big = max(state_files, key=lambda p: p.stat().st_size)
    big.write_bytes(big.read_bytes()[: big.stat().st_size // 2])
    out = _ok(helpers.run_main(tmp_path, corpus, **{"train.checkpoint_every": 3,
                                                    "train.stop_after": 9}))  # fmt: skip
    assert "step 6" in out and "damaged_checkpoints" in out
    (moved,) = (tmp_path / "damaged_checkpoints").iterdir()
    assert moved.name.startswith("6.") and (moved / "state").is_dir()
    assert helpers.complete_steps(tmp_path) == [3, 6, 9]
    losses = helpers.losses(tmp_path)
    assert sorted(losses) == list(range(1, 10))
    _same_as_reference(losses, reference_losses)  # steps 4-6 logged twice, equal


def test_metrics_file_deleted_mid_run(helpers, corpus, tmp_path, reference_losses):
    proc = _start(helpers, tmp_path, corpus)
    _wait_for_lines(tmp_path, 3, proc)
    (tmp_path / "metrics.jsonl").unlink()
    assert proc.wait(timeout=240) == 0, proc.stderr.read()[-3000:]
    losses = helpers.losses(tmp_path)
    assert 40 in losses and len(losses) >= 30
    _same_as_reference(losses, reference_losses)


def test_ctrl_c_saves_exits_130_and_resumes(helpers, corpus, tmp_path, reference_losses):
    proc = _start(helpers, tmp_path, corpus)
    _wait_for_lines(tmp_path, 3, proc)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 130
    err = proc.stderr.read()
    assert "Traceback" not in err and "rerun the same command to resume" in err
    (saved,) = helpers.complete_steps(tmp_path)
    assert f"interrupted at step {saved}" in err
    assert not (tmp_path / "seqjax.lock").read_text().strip()  # released
    _ok(helpers.run_main(tmp_path, corpus))
    losses = helpers.losses(tmp_path)
    assert sorted(losses) == list(range(1, 41))
    _same_as_reference(losses, reference_losses)


def test_second_job_on_a_running_workdir(helpers, corpus, tmp_path):
    """A long first job holds the workdir; a second one exits 2 at once naming it, and
    the first one goes on, saves on SIGTERM and leaves a complete checkpoint."""
    long = {"train.num_steps": 100_000, "train.log_every": 1}
    first = _start(helpers, tmp_path, corpus, **long)
    _wait_for_lines(tmp_path, 2, first)
    second = helpers.run_main(tmp_path, corpus, timeout=120, **long)
    out = _ok(second, 2)
    assert f"pid {first.pid}" in out and "in use by another job" in out
    assert first.poll() is None, "the first job must still be running"
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=120) == 0, first.stderr.read()[-3000:]
    assert helpers.complete_steps(tmp_path)
    assert helpers.partial_checkpoints(tmp_path) == []


def test_resume_with_a_wider_model_is_refused(helpers, corpus, tmp_path):
    _ok(helpers.run_main(tmp_path, corpus, **{"train.stop_after": 3}))
    out = _ok(helpers.run_main(tmp_path, corpus, **{"model.d_model": 64}), 2)
    assert "config.model.d_model: 32 -> 64 (model shape)" in out and "--workdir" in out
    assert helpers.complete_steps(tmp_path) == [3]
    # An allowed change (learning rate) resumes and says so.
    out = _ok(helpers.run_main(tmp_path, corpus, **{"train.stop_after": 4,
                                                    "optimizer.learning_rate": 1e-3}))  # fmt: skip
    assert "config.optimizer.learning_rate: 0.003 -> 0.001 (allowed)" in out
    assert helpers.complete_steps(tmp_path) == [3, 4]


def test_sample_on_a_trained_workdir(helpers, corpus, tmp_path):
    _ok(helpers.run_main(tmp_path, corpus, **{"train.stop_after": 2}))

    def sample(*args):
        return subprocess.run(
            [sys.executable, "-m", "seqjax.sample", f"--workdir={tmp_path}", *args],
            env=helpers.subprocess_env(corpus),
            cwd=helpers.repo,
            capture_output=True,
            text=True,
            timeout=180,
        )

    out = _ok(sample("--length=100", "--prompt=def "), 2)
    assert "--length=100" in out and "model.max_len=64" in out and "--length <= 60" in out
    proc = sample("--length=8", "--prompt=def é", "--temperature=0")
    out = _ok(proc)
    assert "'é'" in out and "outside the model's vocabulary" in out
    assert proc.stdout.startswith("def ")
    evaluate = subprocess.run(
        [
            sys.executable,
            "-m",
            "seqjax.evaluate",
            f"--workdir={tmp_path}",
            "--max_batches=2",
            "--step=2",
        ],  # fmt: skip
        env=helpers.subprocess_env(corpus),
        cwd=helpers.repo,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert '"step": 2' in _ok(evaluate)
