"""The Fashion-MNIST bits/dim study (experiments/images/run.py) runs at smoke scale on the
real files and writes its table, JSON and one real PNG sample grid per mechanism."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data" / "fashion_mnist"


@pytest.mark.slow
@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data/fashion_mnist not found")
def test_images_experiment_smoke(tmp_path):
    env = dict(os.environ, SEQJAX_TFDS_DIR=str(tmp_path / "tfds"), PYTHONPATH=str(REPO))
    cmd = [sys.executable, "experiments/images/run.py", "--scale", "smoke", "--out",
           str(tmp_path / "out")]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    payload = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [r["mechanism"] for r in payload["rows"]] == ["dense", "sparse_strided", "sparse_fixed"]
    for r in payload["rows"]:
        assert 0 < r["validation_bits_per_dim"] < 9
        assert (tmp_path / "out" / r["sample_grid"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "bits/dim" in (tmp_path / "out" / "results.md").read_text()
