"""The loop logs model FLOP/s (and MFU where the device has a known peak) and writes a
jax.profiler trace of the configured steps."""

from __future__ import annotations

import json

import pytest

from seqjax.models import flops
from seqjax.train import config_validation, loop


def test_profile_trace_and_flops_metrics(helpers, corpus, tmp_path):
    config = helpers.tiny_config(corpus, **{"train.num_steps": 6, "train.profile_steps": "2,4"})
    loop.train_and_evaluate(config, str(tmp_path))
    traces = list((tmp_path / "profile").rglob("*.xplane.pb"))
    assert traces, sorted(p.name for p in (tmp_path / "profile").rglob("*"))
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "train/model_tflops_per_s" in r]
    assert train and all(r["train/model_tflops_per_s"] > 0 for r in train)
    assert all("train/mfu" not in r for r in train)  # a CPU has no peak: no MFU


@pytest.mark.parametrize("value", ["5", "4,2", "0,3", "a,b"])
def test_bad_profile_steps_is_one_message(helpers, corpus, value):
    config = helpers.tiny_config(corpus, **{"train.profile_steps": value})
    with pytest.raises(config_validation.ConfigError, match="train.profile_steps"):
        config_validation.validate(config, num_devices=1, process_count=1)


def test_parse_profile_steps():
    assert flops.parse_profile_steps("") is None
    assert flops.parse_profile_steps("10,20") == (10, 20)
