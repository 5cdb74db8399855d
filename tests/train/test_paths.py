"""Workdirs as users write them: relative to the current directory, ``~``, symlinks.

Orbax rejects relative checkpoint paths, so a relative ``--workdir`` used to die at the first
checkpoint; ``seqjax.train.paths.workdir_path`` makes every entry point accept them.
"""

import json
import os
import subprocess
import sys

import pytest

from seqjax.train import paths


def test_workdir_path_forms(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert str(paths.workdir_path("runs/a")) == str(tmp_path / "runs" / "a")
    assert str(paths.workdir_path("~/runs/a")) == str(tmp_path / "home" / "runs" / "a")
    assert str(paths.workdir_path("link/a")) == str(tmp_path / "real" / "a")
    assert str(paths.workdir_path(f"file://{tmp_path}/x")) == str(tmp_path / "x")
    assert str(paths.workdir_path("gs://bucket/run")) == "gs://bucket/run"
    with pytest.raises(ValueError, match="unsupported scheme 'ftp'"):
        paths.workdir_path("ftp://host/run")


@pytest.mark.parametrize("form", ["relative", pytest.param("home_symlink", marks=pytest.mark.slow)])
def test_main_evaluate_sample_with_workdir_as_written(corpus, helpers, tmp_path, form):
    """Train (checkpoints, validation, test, sample), then evaluate or sample, all with the
    same workdir string, from another current directory."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = helpers.subprocess_env(corpus)
    if form == "relative":
        workdir, real = "runs/tiny", cwd / "runs" / "tiny"
        tool, args = "seqjax.evaluate", ["--split=test"]
    else:  # ~ expanded, and ~/link a symlink to another folder
        env["HOME"] = str(tmp_path / "home")
        (tmp_path / "home").mkdir()
        (tmp_path / "target").mkdir()
        (tmp_path / "home" / "link").symlink_to(tmp_path / "target")
        workdir, real = "~/link/tiny", tmp_path / "target" / "tiny"
        tool, args = "seqjax.sample", ["--prompt=def ", "--length=8", "--temperature=0"]
    cmd = helpers.main_command(
        workdir,
        corpus,
        **{"train.num_steps": 4, "train.checkpoint_every": 2, "train.eval_every": 2},
        **{"train.eval_max_batches": 1, "train.final_eval": True, "train.sample_length": 8},
        **{"train.sample_temperature": 0.0},
    )
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # A calm console in a log file: plain progress lines, no library INFO lines.
    assert "\r" not in proc.stderr + proc.stdout and "step 4/4: loss=" in proc.stderr
    assert "checkpoint_manager.py" not in proc.stderr and "orbax" not in proc.stderr
    assert helpers.complete_steps(real) == [2, 4]
    result = json.loads((real / "result.json").read_text())
    assert result["step"] == 4 and result["test"]["count"] > 0
    out = subprocess.run(
        [sys.executable, "-m", tool, f"--workdir={workdir}", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, (tool, out.stderr[-3000:])
    if tool == "seqjax.evaluate":
        line = json.loads(out.stdout.strip().splitlines()[-1])
        assert line["step"] == 4
        assert line["loss"] == pytest.approx(result["test"]["loss"], rel=1e-5)
    else:  # the prompt, then the same greedy sample the run printed
        assert out.stdout == "def " + result["sample"] + "\n"
    # Nothing was written under a literal '~' or into the current directory by mistake.
    assert sorted(os.listdir(cwd)) == (["runs"] if form == "relative" else [])


def _fake_gcs_run(helpers, corpus, root, module, args, cwd):
    """``module`` with ``gs://`` served from ``root`` (see ``tests/train/_fake_gcs.py``)."""
    proc = subprocess.run(
        [sys.executable, "-m", "tests.train._fake_gcs", str(root), module, *args],
        env=helpers.subprocess_env(corpus),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, (module, proc.stderr[-3000:])
    return proc


def test_gs_workdir_whole_run_and_resume(corpus, helpers, tmp_path, reference_losses):
    """A ``gs://`` workdir: checkpoints, metrics.jsonl, TensorBoard, config, run info and
    result.json all land in the bucket (a local folder behind a fake GCS network layer), a
    second process resumes from it exactly, and ``seqjax.evaluate`` reads it back."""
    root, cwd = tmp_path / "gcs", tmp_path / "cwd"
    cwd.mkdir()
    workdir = "gs://bucket/runs/tiny"
    args = helpers.main_command(workdir, corpus)[3:]
    _fake_gcs_run(helpers, corpus, root, "seqjax.main", args + ["--config.train.stop_after=3"], cwd)
    bucket = root / "bucket" / "runs" / "tiny"
    assert helpers.complete_steps(bucket) == [3]
    finish = ["--config.train.final_eval=True", "--config.train.sample_length=8"]
    _fake_gcs_run(helpers, corpus, root, "seqjax.main", args + finish, cwd)
    assert os.listdir(cwd) == []  # no local ./gs:/... folder
    losses = helpers.losses(bucket)
    assert sorted(losses) == list(range(1, 41)) and all(len(v) == 1 for v in losses.values())
    for step, (value,) in losses.items():
        assert value == reference_losses[step], step
    names = set(os.listdir(bucket))
    assert {"config.json", "run_info.0.json", "run_info.1.json", "result.json"} <= names
    assert {"metrics.jsonl", "tensorboard", "checkpoints", "sharding.txt"} <= names
    assert any(p.startswith("events.out.tfevents") for p in os.listdir(bucket / "tensorboard"))
    assert helpers.complete_steps(bucket)[-1] == 40
    result = json.loads((bucket / "result.json").read_text())
    assert json.loads((bucket / "run_info.1.json").read_text())["resumed_from_step"] == 3
    ev = _fake_gcs_run(
        helpers, corpus, root, "seqjax.evaluate", [f"--workdir={workdir}", "--split=test"], cwd
    )
    line = json.loads(ev.stdout.strip().splitlines()[-1])
    assert line["step"] == 40
    assert line["loss"] == pytest.approx(result["test"]["loss"], rel=1e-5)
