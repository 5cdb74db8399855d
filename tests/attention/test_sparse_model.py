"""``configs/sparse_lm.py`` builds, validates and trains (Sparse Transformer LM, §5).

The smoke config's model and optimizer go through the training system's own pieces
(``seqjax.train.setup.build`` validates the config, including the sparse ``validate`` hook,
then ``make_train_step``); the data is swapped for a small synthetic copy task so the test
needs no corpus. Legend: B batch, T sequence length.
"""

from pathlib import Path

import numpy as np
import pytest

from seqjax.configs import common
from seqjax.train import config_validation, setup
from seqjax.train import step as step_lib

REPO = Path(__file__).resolve().parents[2]


def load_config(arg):
    return common.load("sparse_lm").get_config(arg)


def tiny(config, seq_len=32):
    config.data.name = "duplication"
    config.data.dup_vocab_size = 16
    config.data.seq_len = seq_len
    config.data.batch_size = 8
    config.model.num_layers = 2
    config.model.d_model = 32
    config.model.num_heads = 2
    config.mesh.data = 1
    config.optimizer.warmup_steps = 1
    return config


def copy_batch(b, t, vocab, seed=0):
    """``0 w 0 w`` rows (Kitaev et al. 2020's duplication task) as inputs/targets ``[B, T]``."""
    rng = np.random.default_rng(seed)
    w = rng.integers(1, vocab, (b, t // 2))
    x = np.concatenate([np.zeros((b, 1), int), w[:, :-1], np.zeros((b, 1), int), w], axis=1)
    x = x[:, : t + 1].astype(np.int32)
    return {"inputs": x[:, :-1], "targets": x[:, 1:], "weights": np.ones((b, t), np.float32)}


@pytest.mark.parametrize(
    "arg", ["smoke", pytest.param("strided,split,smoke", marks=pytest.mark.slow)]
)
def test_sparse_lm_config_trains(arg):
    config = tiny(load_config(arg))
    run = setup.build(config)
    name = run.model_cfg.attention[0][0]
    assert name == ("sparse_strided" if "strided" in arg else "sparse_fixed")
    train_step = step_lib.jit_train_step(
        step_lib.make_train_step(
            run.model, run.task, run.tx, run.schedule, accum_steps=1, mesh=run.mesh
        ),
        run.shardings,
        run.mesh,
    )
    state = run.init()
    batch = copy_batch(8, config.data.seq_len, 16)
    losses = []
    for _ in range(6):
        state, metrics = train_step(state, batch)
        assert float(metrics["finite"]) == 1.0
        losses.append(float(metrics["loss"]))
    assert losses[-1] < losses[0], losses


def test_sparse_lm_config_rejects_bad_stride():
    config = tiny(load_config("smoke"), seq_len=4)  # stride 8 > seq_len 4
    with pytest.raises(config_validation.ConfigError, match="stride"):
        config_validation.validate(config)


def test_sparse_lm_config_variants():
    assert load_config("strided").model.attention == "sparse_strided"
    assert load_config(None).model.attention == "sparse_fixed"
    with pytest.raises(ValueError, match="variant"):
        load_config("dense")
