"""Training with context parallelism (``config.mesh.sequence``) on 8 fake CPU devices.

A few train steps of the tiny character LM with the sequence split over 4 devices (ring
attention: 2 heads do not divide 4) and over 4 devices beside ``data=2`` (all-to-all: 4
heads) give the losses of one device; config validation refuses what cannot run
sequence-sharded, naming the field, before anything compiles.
"""

from __future__ import annotations

import logging

import jax
import numpy as np
import pytest

from seqjax import data as data_lib
from seqjax.attention import ring
from seqjax.train import config_validation, setup, sharding
from seqjax.train import step as step_lib

STEPS = 3


def _losses(config) -> list[float]:
    run = setup.build(config)
    fn = step_lib.make_train_step(
        run.model, run.task, run.tx, run.schedule, accum_steps=1, mesh=run.mesh,
        epoch_steps=run.epoch_steps,
    )  # fmt: skip
    train_step = step_lib.jit_train_step(fn, run.shardings, run.mesh)
    it = data_lib.make(config.data, split="train", train=True)
    state, losses = run.init(), []
    with sharding.rules_and_mesh(run.mesh):
        for _ in range(STEPS):
            state, metrics = train_step(state, sharding.global_batch(next(it), run.mesh))
            losses.append(float(jax.device_get(metrics["loss"])))
    it.close()
    return losses


@pytest.mark.parametrize(
    "heads,mesh,impl",
    [
        (2, {"mesh.sequence": 4}, "ring"),
        pytest.param(4, {"mesh.sequence": 4, "mesh.data": 2}, "ulysses", marks=pytest.mark.slow),
        pytest.param(
            4,
            {"mesh.sequence": 2, "mesh.fsdp": 2, "mesh.tensor": 2},
            "ulysses",  # 2 heads per tensor shard divide sequence=2
            marks=pytest.mark.slow,
        ),
        pytest.param(
            2,
            {"mesh.sequence": 2, "mesh.fsdp": 2, "mesh.tensor": 2},
            "ring",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_sequence_parallel_losses_equal_one_device(helpers, corpus, caplog, heads, mesh, impl):
    base = {"model.num_heads": heads, "train.num_steps": STEPS}
    want = _losses(helpers.tiny_config(corpus, **base))
    ring.log_choice.cache_clear()
    with caplog.at_level(logging.INFO, logger=ring.__name__):
        got = _losses(helpers.tiny_config(corpus, **base, **mesh))
    assert f"uses {impl!r}" in caplog.text
    np.testing.assert_allclose(got, want, rtol=2e-5)


def _problems(helpers, corpus, **extra) -> str:
    config = helpers.tiny_config(corpus, **extra)
    with pytest.raises(config_validation.ConfigError) as e:
        config_validation.validate(config, num_devices=8, process_count=1)
    return str(e.value)


def test_mechanisms_that_cannot_run_sequence_sharded_are_refused(helpers, corpus):
    msg = _problems(helpers, corpus, **{"mesh.sequence": 2, "model.attention": "dense,lsh"})
    assert "config.mesh.sequence=2: attention 'lsh' cannot run" in msg
    assert "'dense'" not in msg


def test_sequence_parallel_lengths_heads_and_implementation_are_checked(helpers, corpus):
    # 2 heads do not divide 4 -> ring, whose zigzag placement needs 8 | seq_len
    msg = _problems(helpers, corpus, **{"mesh.sequence": 4, "data.seq_len": 36})
    assert "multiple of 8 = 2 x config.mesh.sequence" in msg
    config = helpers.tiny_config(corpus, **{"mesh.sequence": 4})
    config.model.attention_options = {"dense": {"implementation": "ulysses"}}
    with pytest.raises(config_validation.ConfigError, match="heads per device"):
        config_validation.validate(config, num_devices=8, process_count=1)
    config.model.attention_options = {"dense": {"implementation": "chunked"}}
    with pytest.raises(config_validation.ConfigError, match="gather the whole sequence"):
        config_validation.validate(config, num_devices=8, process_count=1)
    msg = _problems(helpers, corpus, **{"mesh.sequence": 3, "mesh.data": 2, "mesh.tensor": 2})
    assert "sequence=3" in msg  # 12 devices > 8


def test_sequence_minus_one_takes_the_rest():
    import ml_collections

    cfg = ml_collections.ConfigDict({"data": 2, "fsdp": 1, "sequence": -1, "tensor": 1})
    assert sharding.resolve_mesh_shape(cfg, 8) == (2, 1, 4, 1)
    assert sharding.RULES[[r[0] for r in sharding.RULES].index("length")][1] == "sequence"
