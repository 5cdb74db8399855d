"""The ``rnn_seq2seq`` family in the training system, in process: ``configs/translation_rnn.py:
copy`` (the algorithmic copy task, no data file) with a 16-unit Bahdanau model trains, is
evaluated with beam search and BLEU through the seq2seq task, and translates; a bad field is
one sentence naming it.
"""

from __future__ import annotations

import numpy as np
import pytest

from seqjax.configs import common
from seqjax.train import config_validation, loop, setup


def _config(tmp_path):
    config = common.load_config("translation_rnn:copy")
    config.data.data_dir = str(tmp_path / "tfds")
    config.model.hidden_dim = config.model.embed_dim = 16
    config.mesh.data = 1
    t = config.train
    t.num_steps, t.log_every, t.eval_every, t.checkpoint_every = 20, 1, 0, 0
    t.eval_max_batches, t.eval_batch_size = 1, 16
    config.optimizer.warmup_steps = 2
    return config


@pytest.mark.slow
def test_rnn_encoder_decoder_trains_scores_bleu_and_translates(tmp_path, helpers):
    result = loop.train_and_evaluate(_config(tmp_path), str(tmp_path / "run"))
    assert result["stopped"] == "done" and result["step"] == 20
    losses = helpers.losses(tmp_path / "run")
    assert np.mean([losses[s][0] for s in (18, 19, 20)]) < losses[1][0]
    assert "bleu" in result["test"] and np.isfinite(result["test"]["loss"])
    run, state, _ = setup.restore_latest(str(tmp_path / "run"))
    (text,) = run.task.translate(run, state["params"], ["4 5 6"], beam_size=2)
    assert isinstance(text, str)


def test_bad_attention_type_is_named(tmp_path):
    config = _config(tmp_path)
    config.model.attention_type = "luong"
    with pytest.raises(config_validation.ConfigError, match="config.model.attention_type='luong'"):
        config_validation.validate(config)
