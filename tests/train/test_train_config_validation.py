"""Every invalid config fails with one clear error naming the field, before compiling."""

from __future__ import annotations

import jax
import pytest

from seqjax.train import config_validation, loop

# (override, text the message must contain: the field and the valid values)
CASES = [
    ({"model.attention": "flashy"}, ["config.model.attention", "valid", "dense"]),
    ({"model.attention": "dense,nope"}, ["config.model.attention", "'nope'"]),
    ({"data.batch_size": 12, "mesh.data": 8}, ["config.data.batch_size", "= 8"]),
    ({"mesh.data": 4, "mesh.tensor": 4}, ["config.mesh", "16 devices", "<= 8"]),
    ({"mesh.data": -1, "mesh.fsdp": -1}, ["config.mesh", "at most one axis may be -1"]),
    ({"data.seq_len": 128}, ["config.data.seq_len", "model.max_len=64"]),
    ({"model.dtype": "float8"}, ["config.model.dtype", "bfloat16"]),
    ({"model.d_model": 30, "model.num_heads": 4}, ["config.model.d_model", "num_heads=4"]),
    ({"optimizer.grad_accum_steps": 3}, ["config.optimizer.grad_accum_steps", "divisor"]),
    ({"optimizer.warmup_steps": 100}, ["config.optimizer.warmup_steps", "num_steps=40"]),
    ({"model.positional": "rotary"}, ["config.model.positional", "sinusoidal"]),
    ({"data.name": "wikitext"}, ["config.data.name", "pystdlib"]),
    ({"train.log_every": 0}, ["config.train.log_every", "positive"]),
    ({"mesh.tensor": 3, "mesh.data": 1}, ["config.mesh.tensor", "num_heads=2"]),
    ({"model.ff_chunk_size": 5}, ["config.model.ff_chunk_size", "divisor"]),
    # issue 16: every field that can be wrong
    ({"data.batch_size": 0}, ["config.data.batch_size=0", "positive integer"]),
    ({"data.batch_size": -8}, ["config.data.batch_size=-8", "positive integer"]),
    ({"data.seq_len": 0}, ["config.data.seq_len=0", "positive integer"]),
    ({"data.seq_len": -4}, ["config.data.seq_len=-4", "positive integer"]),
    ({"data.seed": -1}, ["config.data.seed=-1", "0 <= seed < 2**32"]),
    ({"seed": -3}, ["config.seed=-3", "0 <= seed"]),
    ({"data.vocab": "wordpiece"}, ["config.data.vocab='wordpiece'", "'bytes'"]),
    ({"optimizer.learning_rate": float("inf")}, ["config.optimizer.learning_rate", "finite"]),
    ({"optimizer.learning_rate": float("nan")}, ["config.optimizer.learning_rate", "> 0"]),
    ({"mesh.data": 3}, ["config.mesh", "divides the 8 devices", "1, 2, 4, 8", "5 idle"]),
    ({"train.sample_temperature": -1.0}, ["config.train.sample_temperature", ">= 0"]),
    ({"train.eval_batch_size": -2}, ["config.train.eval_batch_size", ">= 0"]),
]


def _set(config, key, value):
    node = config
    *parents, leaf = key.split(".")
    for p in parents:
        node = node[p]
    node[leaf] = value


@pytest.mark.parametrize("override,expected", CASES, ids=[str(c[0]) for c in CASES])
def test_invalid_config_is_reported(helpers, corpus, override, expected):
    config = helpers.tiny_config(corpus)
    for k, v in override.items():
        _set(config, k, v)
    with pytest.raises(config_validation.ConfigError) as e:
        config_validation.validate(config, num_devices=8, process_count=1)
    for text in expected:
        assert text in str(e.value), str(e.value)


def test_unknown_attention_option_is_reported(helpers, corpus):
    config = helpers.tiny_config(corpus)
    config.model.attention_options.dense.unlock()
    config.model.attention_options.dense.blok_q = 64
    with pytest.raises(config_validation.ConfigError, match="attention_options.dense.*blok_q"):
        config_validation.validate(config, num_devices=8, process_count=1)


def test_valid_config_passes(helpers, corpus):
    config_validation.validate(helpers.tiny_config(corpus), num_devices=8, process_count=1)


def test_train_rejects_before_compiling(helpers, corpus, tmp_path, monkeypatch):
    """The loop validates before any jit: a jit call would raise a different error."""

    def no_jit(*args, **kwargs):
        raise AssertionError("compiled before validating the config")

    monkeypatch.setattr(jax, "jit", no_jit)
    config = helpers.tiny_config(corpus)
    _set(config, "model.attention", "flashy")
    with pytest.raises(config_validation.ConfigError, match="config.model.attention"):
        loop.train_and_evaluate(config, str(tmp_path))
    assert not (tmp_path / "checkpoints").exists()


def test_mesh_not_dividing_devices_does_not_blame_the_batch(helpers, corpus):
    config = helpers.tiny_config(corpus)
    _set(config, "mesh.data", 3)
    with pytest.raises(config_validation.ConfigError) as e:
        config_validation.validate(config, num_devices=8, process_count=1)
    assert "config.mesh" in str(e.value) and "config.data.batch_size" not in str(e.value)


@pytest.mark.parametrize(
    "name,option,value,expected",
    [
        ("dense", "implementation", "magic", ["attention_options.dense", "'magic'", "chunked"]),
        ("dense", "implementation", "cudnn", ["attention_options.dense", "NVIDIA GPU"]),
    ],
)
def test_attention_option_values_are_checked(helpers, corpus, name, option, value, expected):
    """Option *values* are checked by tracing the mechanism abstractly (nothing compiles)."""
    if value == "cudnn" and jax.default_backend() == "gpu":
        pytest.skip("cudnn is a valid implementation on a GPU backend")
    config = helpers.tiny_config(corpus)
    config.model.attention_options[name][option] = value
    with pytest.raises(config_validation.ConfigError) as e:
        config_validation.validate(config, num_devices=8, process_count=1)
    for text in expected:
        assert text in str(e.value), str(e.value)


@pytest.mark.parametrize("mechanism", ["performer", "linear"])
def test_attention_dropout_with_a_kernelized_attention_is_refused_before_compiling(mechanism):
    from seqjax.configs import common
    from seqjax.train import config_validation
    from tests.conftest import REPO

    config = common.load_file(REPO / "configs" / "lra_image.py", "cfg_kern").get_config("smoke")
    config.model.attention = mechanism  # lra_image sets attention dropout 0.2
    with pytest.raises(ValueError, match="model.attention_dropout_rate=0.2 is invalid; valid: 0 "):
        config_validation.validate(config)


def test_learned_positions_after_an_offset_bound_the_length(helpers, corpus):
    """An imported RoBERTa's table (model.layout.position_offset=2) holds max_len - 2
    positions: a longer input is refused before anything is built."""
    config = helpers.tiny_config(corpus)
    with config.unlocked():
        config.model.positional = "learned"
        config.model.layout = {"position_offset": 2}
        config.data.seq_len = config.model.max_len - 2
    config_validation.validate(config, num_devices=8, process_count=1)
    with config.unlocked():
        config.data.seq_len = config.model.max_len - 1
    want = r"<= 62, the learned positions of model\.max_len=64 rows less model\.layout\."
    with pytest.raises(config_validation.ConfigError, match=want + "position_offset=2"):
        config_validation.validate(config, num_devices=8, process_count=1)
