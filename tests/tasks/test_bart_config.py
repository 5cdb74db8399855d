"""``configs/bart.py:smoke`` trains through the normal entry point (``seqjax.main.train``):
the denoising objective feeds the encoder-decoder, the reconstruction loss falls, and the
test evaluation reports it (a shrunken model and corpus: one compile of each step)."""

from __future__ import annotations

import json
import math

import numpy as np

from seqjax.configs import common
from tests.conftest import REPO


def test_bart_smoke_config_trains(tmp_path, monkeypatch):
    from seqjax import main as seqjax_main

    rng = np.random.default_rng(0)
    words = "to be or not that is the question whether tis nobler in mind".split()
    lines = [" ".join(rng.choice(words, size=rng.integers(2, 5))) for _ in range(2000)]
    corpus = tmp_path / "lines.txt"
    corpus.write_text("\n".join(lines) + "\n")
    monkeypatch.chdir(REPO)
    config = common.load_file(REPO / "configs" / "bart.py", "bart_cfg").get_config(
        "noise=infilling+permutation,smoke"
    )
    d, m, t = config.data, config.model, config.train
    d.path, d.data_dir, d.download = str(corpus), str(tmp_path / "tfds"), False
    d.max_source_len = d.max_target_len = m.max_len = 32
    m.num_layers = m.decoder_layers = 1
    m.d_model, m.d_ff, m.num_heads = 32, 64, 2
    t.num_steps, t.log_every, t.eval_every, t.checkpoint_every = 30, 10, 0, 30
    t.test_max_batches = 1
    config.mesh.data = 1
    result = seqjax_main.train(config, str(tmp_path / "work"))
    assert result["step"] == 30
    losses = [json.loads(line).get("train/loss") for line in
              (tmp_path / "work" / "metrics.jsonl").read_text().splitlines()]  # fmt: skip
    losses = [x for x in losses if x is not None]
    assert losses[-1] < losses[0] - 1.0  # learns to reconstruct
    assert math.isfinite(result["test"]["nll"])
