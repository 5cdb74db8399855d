"""Transformer-XL in the training system (Dai et al. 2019, §3.2): recurrence in the train
state, resume with the memories, streamed evaluation with its own lengths, sampling with the
memory as the cache, and the config errors.

All jobs are in-process on one device: the tiny 2-layer, 32-wide character LM of
``conftest.py`` with relative attention, segments of 16 characters and a 16-position memory.

Legend: B batch, M memory length, E model width.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax.models.transformer_xl import TransformerXL, with_lengths
from seqjax.tasks import sampling as sample
from seqjax.train import config_validation, loop, setup
from seqjax.train import evaluator as evaluate

XL = {
    "model.kind": "transformer_xl",
    "model.mem_len": 16,
    "model.attention": "relative",
    "model.positional": "none",
    "data.lm_batching": "stream",
    "data.seq_len": 16,
    "train.num_steps": 40,
    "train.eval_batch_size": 8,
}


def _config(helpers, corpus, **extra):
    config = helpers.tiny_config(corpus, **{**XL, **extra})
    config.model.attention_options = {"relative": {}}
    return config


@pytest.fixture(scope="module")
def xl_run(helpers, corpus, tmp_path_factory):
    """The uninterrupted 40-step XL job: ``(workdir, losses by step)``."""
    workdir = tmp_path_factory.mktemp("xl")
    result = loop.train_and_evaluate(_config(helpers, corpus), str(workdir))
    assert result["stopped"] == "done" and result["step"] == 40
    return workdir, {s: v[0] for s, v in helpers.losses(workdir).items()}


def test_xl_training_learns_and_keeps_memory_in_state(xl_run):
    workdir, losses = xl_run
    assert sorted(losses) == list(range(1, 41))
    first = np.mean([losses[s] for s in range(1, 6)])
    last = np.mean([losses[s] for s in range(36, 41)])
    assert last < first - 1.0, (first, last)
    run, state, step = setup.restore_latest(str(workdir))
    assert step == 40 and run.is_xl
    mems, valid_BM = state["memory"]
    assert len(mems) == run.model_cfg.num_layers + 1
    assert all(m.shape == (8, 16, 32) for m in mems)  # [B, M, E], the global batch
    assert bool(np.all(valid_BM))  # filled by the carried segments
    assert all(float(jnp.abs(m).max()) > 0 for m in mems)


def test_xl_sharded_equals_one_device(helpers, corpus, tmp_path, xl_run):
    """data=4 x tensor=2 on 8 fake devices: the memories are sharded over the batch and
    carried from step to step, and the losses equal the 1-device run's."""
    assert jax.device_count() == 8
    _, losses = xl_run
    config = _config(helpers, corpus, **{"mesh.data": 4, "mesh.tensor": 2, "train.stop_after": 6})
    result = loop.train_and_evaluate(config, str(tmp_path))
    assert result["stopped"] == "stop_after" and result["step"] == 6
    sharded = helpers.losses(tmp_path)
    got = np.array([sharded[s][0] for s in range(1, 7)])
    want = np.array([losses[s] for s in range(1, 7)])
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    _, state, _ = setup.restore_latest(str(tmp_path))
    mems, _ = state["memory"]
    assert "data" in str(mems[0].sharding.spec)  # [B, M, E] split over the batch


def test_xl_resume_restores_memories(helpers, corpus, tmp_path, xl_run):
    """3 steps, a new run that resumes for 3 more: losses == the uninterrupted run's. With
    an empty memory after the resume, steps 4-6 would differ (the memory is used)."""
    _, reference = xl_run
    for stop in (3, 6):
        loop.train_and_evaluate(
            _config(helpers, corpus, **{"train.stop_after": stop}), str(tmp_path)
        )
    losses = helpers.losses(tmp_path)
    assert sorted(losses) == [1, 2, 3, 4, 5, 6]
    for s, values in losses.items():
        assert values == [reference[s]], (s, values, reference[s])


def test_xl_eval_own_lengths_counts_every_target_once_and_resets(xl_run):
    workdir, _ = xl_run
    run, state, _ = setup.restore_latest(
        str(workdir),
        eval_overrides={"tgt_len": 24, "mem_len": 40, "clamp_len": 20, "same_length": True},
    )
    ev = evaluate.Evaluator(run)
    assert ev.lengths == {"tgt_len": 24, "mem_len": 40, "clamp_len": 20, "same_length": True}
    first = ev(state["params"], "test", show=False)
    again = ev(state["params"], "test", show=False)  # memory emptied again at the start
    assert first["count"] == run.info.split_sizes["test"] - 1  # every target exactly once
    assert first == again
    assert np.isclose(first["bits_per_char"], first["loss"] / np.log(2))
    assert 0 < first["bits_per_char"] < np.log2(run.info.vocab_size)


def test_xl_sampling_with_memory_cache(xl_run):
    workdir, _ = xl_run
    run, state, _ = setup.restore_latest(str(workdir))
    text = sample.sample_text(run, state["params"], "def alpha", 37, temperature=0.8)
    assert len(text) == 37
    # Greedy: the memory as cache (prompt = 2 segments of 16, then one token per step)
    # == recomputing the whole sequence without memory, when M covers everything.
    prompt = run.info.encode("for alpha in range(3):\n    beta += al")
    n, mem = 12, 64
    cfg = with_lengths(run.model_cfg, mem_len=mem, clamp_len=-1, same_length=False)
    cached = sample.generate_xl(
        cfg, state["params"], prompt, n, mem_len=mem, segment_len=16, temperature=0.0
    )
    model = TransformerXL(cfg, mem_len=0)
    full = jax.jit(lambda p, x: model.apply({"params": p}, x)[0])
    p = len(prompt)
    buf = np.zeros((1, p + n), np.int32)  # causal: the zeros after position i do not matter
    buf[0, :p] = prompt
    for i in range(p, p + n):
        buf[0, i] = int(jnp.argmax(full(state["params"], jnp.asarray(buf))[0, i - 1]))
    np.testing.assert_array_equal(cached, buf[0, p:])


CASES = [
    ({"data.lm_batching": "random"}, ["config.data.lm_batching", '"stream"']),
    ({"model.attention": "dense"}, ["config.model.attention", '"relative"']),
    ({"model.positional": "sinusoidal"}, ["config.model.positional", '"none"']),
    ({"optimizer.grad_accum_steps": 2}, ["config.optimizer.grad_accum_steps", "1 for"]),
    ({"model.kind": "xl"}, ["config.model.kind", "transformer_xl"]),
    ({"model.kind": "transformer"}, ["config.model.mem_len", '"transformer_xl"']),
    ({"eval.tgt_len": 0}, ["config.eval.tgt_len", ">= 1"]),
    ({"eval.mem_len": 0, "eval.same_length": True}, ["config.eval.same_length", "False"]),
]


@pytest.mark.parametrize("override,expected", CASES, ids=[str(c[0]) for c in CASES])
def test_invalid_xl_config_is_reported(helpers, corpus, override, expected):
    config = _config(helpers, corpus)
    if override.get("model.kind") == "transformer":  # a plain model with a memory length
        config.model.attention, config.model.positional = "dense", "sinusoidal"
        config.data.lm_batching = "random"
    for key, value in override.items():
        node = config
        *parents, leaf = key.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    with pytest.raises(config_validation.ConfigError) as e:
        config_validation.validate(config, num_devices=1, process_count=1)
    for text in expected:
        assert text in str(e.value), (text, str(e.value))
