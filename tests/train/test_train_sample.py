"""Sampling and evaluation from a workdir's newest checkpoint (CLIs and functions)."""

from __future__ import annotations

import json
import subprocess
import sys

import jax
import numpy as np
import pytest

from seqjax import sample
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
