"""The translation study's smoke scale runs end to end and writes its table and plot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # two tiny trainings on the real en-de file (~2-3 min)
def test_translation_study_smoke(shared_data, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO), SEQJAX_SHARED_DATA=str(shared_data),
               SEQJAX_TFDS_DIR=str(tmp_path / "tfds"))  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "experiments/translation/run.py", "--scale", "smoke",
         "--workdirs", str(tmp_path / "w"), "--out", str(tmp_path / "out")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((tmp_path / "out" / "translation_smoke.json").read_text())
    assert [r["variant"] for r in record["rows"]] == ["cpu", "reversible"]
    for row in record["rows"]:
        assert 0.0 <= row["bleu"] <= 100.0 and row["params"] > 0
    speed = record["decode_speed"]
    assert speed["same_output"] is True  # the cache changes the speed, not the output
    assert speed["kv_cache"]["median_s"] > 0 and speed["recompute"]["median_s"] > 0
    md = (tmp_path / "out" / "translation_smoke.md").read_text()
    assert "| model | params | test BLEU |" in md and "27.3" in md
    assert (tmp_path / "out" / "translation_smoke.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
