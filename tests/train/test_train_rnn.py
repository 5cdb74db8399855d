"""The ``rnn`` family in the training system: a 1-layer, 32-unit LSTM char-LM whose state is
carried across batches (``model.kind="rnn"``, ``seqjax.models.memory``) trains, keeps its
state in the train state, evaluates as streams and samples with the state as its cache; the
config errors name their fields.

Legend: B batch, H hidden width.
"""

from __future__ import annotations

import numpy as np
import pytest

from seqjax.models import registry
from seqjax.train import config_validation, loop, setup


def _config(helpers, corpus, **model):
    config = helpers.tiny_config(corpus, **{
        "data.lm_batching": "stream", "train.num_steps": 30, "train.sample_length": 12,
        "train.sample_prompt": "def ", "train.final_eval": True, "train.eval_batch_size": 4,
    })  # fmt: skip
    config.model = registry.model_block("rnn", num_layers=1, hidden_dim=32, **model)
    config.model.kind = "rnn"
    config.optimizer.learning_rate = 1e-2
    return config


def test_rnn_lm_trains_carries_its_state_and_samples(helpers, corpus, tmp_path):
    result = loop.train_and_evaluate(_config(helpers, corpus), str(tmp_path))
    assert result["stopped"] == "done" and result["step"] == 30
    losses = helpers.losses(tmp_path)
    first = np.mean([losses[s][0] for s in range(1, 4)])
    last = np.mean([losses[s][0] for s in range(28, 31)])
    assert last < first - 0.5, (first, last)
    assert np.isfinite(result["test"]["bits_per_char"])
    run, state, step = setup.restore_latest(str(tmp_path))
    assert step == 30 and run.recurrence is not None
    ((c_BH, h_BH),) = state["memory"]  # the LSTM's (c, h), one layer, the global batch
    assert c_BH.shape == h_BH.shape == (8, 32) and float(np.abs(h_BH).max()) > 0
    text = run.task.sample(run, state["params"], "def ", 12, temperature=0)
    assert isinstance(text, str) and len(text) == 12


@pytest.mark.parametrize(
    "model, data, message",
    [
        ({"cell": "rnn"}, {}, "config.model.cell='rnn' is invalid; valid: lstm, gru, elman"),
        ({"hidden_dim": 0}, {}, "config.model.hidden_dim=0 is invalid; valid: an integer >= 1"),
        ({}, {"lm_batching": "random"}, "config.data.lm_batching='random' is invalid"),
    ],
)
def test_config_errors_name_the_field(helpers, corpus, model, data, message):
    config = _config(helpers, corpus)
    for key, value in {**model}.items():
        config.model[key] = value
    for key, value in data.items():
        config.data[key] = value
    with pytest.raises(config_validation.ConfigError, match=message.replace("(", r"\(")):
        config_validation.validate(config)
