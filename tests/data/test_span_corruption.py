"""T5 span corruption (``config.data.objective='span_corruption'``, Raffel et al. 2020
§3.1.4): 15% noise in spans of mean length 3, one sentinel per span, and source + target
together spell the window; seeded seq2seq batches; bad fields named."""

from __future__ import annotations

import numpy as np
import pytest

import seqjax.data as sd
from seqjax import tasks
from seqjax.data import api as data_api
from seqjax.data import span_corruption


def _restore(src, tgt, sentinel0):
    """The window from a corrupted source and its target (sentinels pair them up)."""
    spans, cur = {}, None
    for t in tgt[:-1].tolist():  # drop EOS
        if t >= sentinel0:
            cur = t
            spans[cur] = []
        else:
            spans[cur].append(t)
    out = []
    for t in src[:-1].tolist():
        out.extend(spans[t] if t >= sentinel0 else [t])
    return np.array(out)


def test_corrupt_spans_t5_statistics():
    rng = np.random.default_rng(0)
    noise, spans = 0, 0
    for row in range(200):
        window = rng.integers(4, 100, size=100).astype(np.int32)
        src, tgt = span_corruption.corrupt_spans(window, (0, row), sentinel0=100, eos_id=3)
        assert src[-1] == 3 and tgt[-1] == 3
        assert (len(src), len(tgt)) == span_corruption.corrupted_lengths(100)
        np.testing.assert_array_equal(_restore(src, tgt, 100), window)
        k = int((tgt >= 100).sum())
        assert (src >= 100).sum() == k and list(tgt[tgt >= 100]) == list(range(100, 100 + k))
        noise += len(tgt) - 1 - k
        spans += k
    assert noise / (200 * 100) == pytest.approx(0.15)
    assert noise / spans == pytest.approx(3.0, abs=0.1)


def test_span_corruption_batches(tmp_path):
    cfg = sd.default_config()
    cfg.update(name="text_file", path="../shared/data/tinyshakespeare/input.txt",
               vocab="sentencepiece", vocab_size=400, spm_input_sentence_size=2000,
               data_dir=str(tmp_path), manual_dir=None, download=False, batch_size=4,
               max_source_len=32, max_target_len=16, objective="span_corruption",
               prefetch=1)  # fmt: skip
    problems = data_api.config_problems(cfg)
    if any(f == "path" for f, _, _ in problems):
        pytest.skip("shared data missing")
    assert problems == []
    info = sd.info(cfg)
    K = span_corruption.num_sentinels(32)
    assert info.task == "seq2seq" and info.vocab_size == 400 + K
    assert tasks.for_data_config(cfg).name == "seq2seq"
    it = sd.make(cfg, split="train")
    b = next(it)
    state = it.get_state()
    nxt = next(it)
    again = sd.make(cfg, split="train")
    again.set_state(state)
    for k, v in next(again).items():
        np.testing.assert_array_equal(v, nxt[k])
    assert b["inputs"].shape == (4, 32) and b["targets"].shape == (4, 16)
    assert ((b["inputs"] >= 400).sum(1) >= 1).all()
    assert (b["weights"] == (b["targets"] > 0)).all()
    ev = next(sd.make(cfg, split="validation", train=False))
    assert ev["weights"].sum() > 0
    cfg.max_target_len = 4
    assert [f for f, _, _ in data_api.config_problems(cfg)] == ["max_target_len"]


@pytest.mark.slow
def test_span_corruption_trains_the_encoder_decoder(tmp_path):
    """Two steps of the encoder-decoder on span-corrupted text, then the validation loss."""
    from seqjax.configs import common
    from seqjax.train import loop
    from tests.conftest import REPO

    config = common.load_file(REPO / "configs" / "translation.py").get_config("smoke")
    d = config.data
    d.update(name="text_file", path=str(REPO.parent / "shared/data/tinyshakespeare/input.txt"),
             vocab="sentencepiece", vocab_size=400, spm_input_sentence_size=2000,
             data_dir=str(tmp_path / "tfds"), batch_size=4, max_source_len=32,
             max_target_len=16, objective="span_corruption")  # fmt: skip
    if not (REPO.parent / "shared/data/tinyshakespeare/input.txt").exists():
        pytest.skip("shared data missing")
    config.model.max_len = 32
    config.eval.decode_metrics = False
    config.mesh.data = 1
    config.train.update(num_steps=2, eval_every=0, checkpoint_every=0, final_eval=True,
                        sample_length=0)  # fmt: skip
    config.optimizer.warmup_steps = 1
    result = loop.train_and_evaluate(config, str(tmp_path / "run"))
    assert np.isfinite(result["test"]["loss"]) and result["test"]["count"] > 0
