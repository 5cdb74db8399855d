"""Sampling and evaluation from a workdir's newest checkpoint (CLIs and functions)."""

from __future__ import annotations

import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax import models
from seqjax.tasks import sampling as sample
from seqjax.train import loop, setup


@pytest.fixture(scope="module")
def trained(helpers, corpus, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("trained")
    config = helpers.tiny_config(corpus, **{"train.num_steps": 20})
    loop.train_and_evaluate(config, str(workdir))
    return workdir


def _cli(helpers, corpus, module, *args):
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        env=helpers.subprocess_env(corpus),
        cwd=helpers.repo,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_sample_cli_prints_requested_length(helpers, corpus, trained):
    out = _cli(helpers, corpus, "seqjax.sample", f"--workdir={trained}", "--prompt=def ",
               "--length=25", "--temperature=0.8")  # fmt: skip
    assert out.startswith("def ")
    assert len(out) == len("def ") + 25 + 1  # the sample, then print's newline


def test_kv_cache_decoding_equals_full_recompute(trained):
    """Greedy decoding with the KV cache == recomputing the whole window per token."""
    run, state, _ = setup.restore_latest(str(trained))
    prompt = run.info.encode("for alpha in ")
    cached = sample.generate(run.model_cfg, state["params"], prompt, 30, temperature=0.0)
    buf = np.zeros(run.model_cfg.max_len, np.int32)
    buf[: len(prompt)] = prompt
    windowed = sample._generate_windowed(
        run.model_cfg, state["params"], buf, len(prompt), 30, 0.0, jax.random.PRNGKey(0)
    )
    np.testing.assert_array_equal(cached, np.asarray(windowed))
    with pytest.raises(ValueError, match="max_len"):
        sample.generate(run.model_cfg, state["params"], prompt, 64)


def test_evaluate_cli_counts_every_test_target(helpers, corpus, trained):
    out = _cli(helpers, corpus, "seqjax.evaluate", f"--workdir={trained}", "--split=test")
    res = json.loads(out.strip().splitlines()[-1])
    run, _, _ = setup.restore_latest(str(trained))
    assert res["step"] == 20 and res["split"] == "test"
    assert res["count"] == run.info.split_sizes["test"] - 1  # every target exactly once
    assert np.isclose(res["bits_per_char"], res["loss"] / np.log(2))
    assert np.isfinite(res["bits_per_char"]) and res["bits_per_char"] > 0


def _random_lm(seed=0, **kw):
    base = dict(vocab_size=23, num_layers=2, d_model=16, num_heads=2, max_len=16)
    base.update(kw)
    cfg = models.TransformerConfig(**base)
    tokens = jnp.zeros((1, cfg.max_len), jnp.int32)
    params = jax.jit(models.TransformerLM(cfg).init)(jax.random.PRNGKey(seed), tokens)["params"]
    return cfg, params


def test_reversible_models_sample_with_a_correct_kv_cache():
    """A reversible dense LM takes the KV-cache path, and its greedy samples equal
    recomputing the prefix per token (the cache reproduces the full forward)."""
    cfg, params = _random_lm(1, reversible=True, tie_embeddings=False)
    assert sample.uses_kv_cache(cfg)
    prompt = np.array([3, 1, 4, 1, 5], np.int32)
    cached = sample.generate(cfg, params, prompt, 9, temperature=0.0)
    buf = np.zeros(cfg.max_len, np.int32)
    buf[: len(prompt)] = prompt
    windowed = sample._generate_windowed(
        cfg, params, buf, len(prompt), 9, 0.0, jax.random.PRNGKey(0)
    )
    np.testing.assert_array_equal(cached, np.asarray(windowed))
    assert len(set(cached.tolist())) > 1  # not a constant sequence


def test_lsh_sampling_conditions_on_exactly_the_prefix():
    """At every greedy step t the sampler's logits depend only on tokens[:t] (whatever
    follows t in the buffer) and equal the LM run on the t-token prefix alone, so the
    samples equal recomputing each prefix alone. Without the mask, later *queries* do move
    LSH's chunks (the reason for it)."""
    lsh_opts = {"lsh": dict(n_hashes=2, chunk_len=4)}
    cfg, params = _random_lm(2, attention=models.attention_cycle("lsh,dense", lsh_opts))
    assert not sample.uses_kv_cache(cfg)
    model = models.TransformerLM(cfg)
    step = jax.jit(lambda buf, i: sample.prefix_logits(model, params, buf, i))
    full = jax.jit(lambda buf: model.apply({"params": params}, buf[None])[0])
    alone_fn = jax.jit(lambda x: model.apply({"params": params}, x)[0, -1])  # one per length
    future = np.random.default_rng(0).integers(0, 23, cfg.max_len).astype(np.int32)
    prompt, n = np.array([5, 17, 2], np.int32), 4
    seq, moved = list(prompt), False
    for _ in range(n):
        t = len(seq)
        other = np.concatenate([seq, future[t:]]).astype(np.int32)
        zeros = np.concatenate([seq, np.zeros(cfg.max_len - t, np.int32)])
        got = step(other, t)
        np.testing.assert_array_equal(got, step(zeros, t))
        alone = alone_fn(np.array([seq], np.int32))
        np.testing.assert_allclose(got, alone, rtol=1e-5, atol=1e-5)
        moved |= not np.allclose(full(other)[t - 1], full(zeros)[t - 1], atol=1e-5)
        seq.append(int(jnp.argmax(alone)))
    assert moved, "unmasked, future queries never changed a past output (test too weak)"
    greedy = sample.generate(cfg, params, prompt, n, temperature=0.0)
    np.testing.assert_array_equal(greedy, seq[len(prompt) :])
