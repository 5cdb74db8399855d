"""The Longformer warm-start study end to end at its smoke size: seqjax MLM pre-training,
Hugging Face export and re-import, copied and random positions, three mechanisms (slow:
minutes of compilation on 2 cores)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_study_smoke(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "longformer_warmstart_run", REPO / "experiments/longformer_warmstart/run.py"
    )
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    config = str(REPO / "configs/_longformer_warmstart.py") + ":smoke"
    results = run.main(["--config", config, "--out", str(tmp_path)])
    assert set(results["runs"]) == {"dense/copy", "longformer/copy", "bigbird/copy",
                                    "longformer/random"}  # fmt: skip
    assert (tmp_path / "pretrained_hf" / "config.json").is_file()
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["long_len"] == 4 * saved["short_len"]
    assert "| extended (4n = 256) | longformer | copy |" in (tmp_path / "results.md").read_text()
