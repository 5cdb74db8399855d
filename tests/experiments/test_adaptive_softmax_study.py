"""The full vs adaptive softmax study (``experiments/adaptive_softmax/run.py``) runs."""

from __future__ import annotations

import math

import pytest

from tests.experiments.test_studies_smoke import load_script


@pytest.mark.slow
def test_adaptive_softmax_smoke(tmp_path, shared_data):
    payload = load_script("adaptive_softmax/run.py").main(
        ["--scale", "smoke", "--out", str(tmp_path), "--tfds-dir", str(tmp_path / "tfds"),
         "--data", str(shared_data / "tinyshakespeare" / "input.txt")]
    )  # fmt: skip
    full, adaptive = payload["rows"]
    assert full["variant"] == "full softmax" and adaptive["variant"].startswith("adaptive")
    assert adaptive["io_layer_params"] < full["io_layer_params"]
    for r in (full, adaptive):
        assert math.isfinite(r["val_word_perplexity"]) and r["tokens_per_s"] > 0
    assert (tmp_path / "adaptive_softmax_smoke.md").exists()


def test_bad_scale_names_the_flag(tmp_path):
    with pytest.raises(ValueError, match="--scale"):
        load_script("adaptive_softmax/run.py").main(["--scale", "huge", "--out", str(tmp_path)])


@pytest.mark.slow  # a subprocess: JAX start-up, data preparation, two tiny models
def test_the_smoke_as_typed_writes_outside_the_repository_without_progress_bars(shared_data):
    """Issue 40, item 7: ``--scale smoke`` without ``--out`` writes into a temporary folder
    (the repository's files stay as they were) and prints no raw TFDS progress bars."""
    import subprocess
    import sys

    from tests.conftest import REPO

    def status():
        cmd = ["git", "status", "--porcelain", "--untracked-files=all", "experiments"]
        return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True).stdout

    before = status()
    proc = subprocess.run(
        [sys.executable, "experiments/adaptive_softmax/run.py", "--scale", "smoke"],
        cwd=REPO, capture_output=True, text=True, timeout=900,
        env={**__import__("os").environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert status() == before
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("wrote ")]
    assert "seqjax_adaptive_smoke_" in line and str(REPO) not in line
    assert "%|" not in proc.stdout + proc.stderr and "\r" not in proc.stdout + proc.stderr
