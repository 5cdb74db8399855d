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
