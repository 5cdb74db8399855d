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


@pytest.mark.slow
@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data/fashion_mnist not found")
@pytest.mark.parametrize("config_file", ["lra_image.py", "image_fashion_mnist.py"])
def test_image_config_smoke_variants_train(tmp_path, monkeypatch, config_file):
    from seqjax import main as seqjax_main
    from seqjax.configs import common

    monkeypatch.setenv("SEQJAX_TFDS_DIR", str(tmp_path / "tfds"))
    monkeypatch.chdir(REPO)
    config = common.load_file(REPO / "configs" / config_file, "smoke_cfg").get_config("smoke")
    config.mesh.data = 1
    result = seqjax_main.train(config, str(tmp_path / "work"))
    assert result["step"] == config.train.num_steps
    metrics = (tmp_path / "work" / "metrics.jsonl").read_text()
    assert ("validation/bits_per_dim" in metrics) == (config.data.image_task == "generation")
