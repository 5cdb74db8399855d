"""Issue 38, messages that misled (items 8, 9, 11): the decoder's unknown mechanism names
``config.model.decoder_attention``; a translation run's over-long ``config.train.sample_prompt``
is refused before step 0; an integer field given a string or a float names the field and its
valid values instead of ``invalid literal for int()``."""

from __future__ import annotations

import pytest

from seqjax.configs import common
from seqjax.train import config_validation, extensions, field_checks, setup

CONFIGS = common.__file__.replace("seqjax/configs/common.py", "configs")


def _config(name: str, variant: str):
    return common.load_file(f"{CONFIGS}/{name}.py").get_config(variant)


def test_unknown_decoder_mechanism_names_decoder_attention(tmp_path):
    config = _config("translation", "copy")
    config.model.decoder_attention = "flash"
    with pytest.raises(extensions.ExtensionError) as e:
        extensions.prepare_training(config, str(tmp_path))
    assert str(e.value).startswith("config.model.decoder_attention names 'flash'")
    config.model.decoder_attention, config.model.attention = "dense", "flash"
    with pytest.raises(extensions.ExtensionError, match="^config.model.attention names 'flash'"):
        extensions.prepare_training(config, str(tmp_path))


def test_overlong_translation_sample_prompt_is_refused_before_step_0():
    config = _config("translation", "copy")
    config.mesh.data = 1
    config.train.sample_prompt = " ".join(["5"] * 40)  # 40 symbols > max_source_len 16
    with pytest.raises(config_validation.ConfigError) as e:
        setup.build(config)
    msg = str(e.value)
    assert msg.startswith("config.train.sample_prompt='5 5 5")
    assert "data.max_source_len=16" in msg and "config.train.sample_length=0" in msg
    config.train.sample_prompt = "4 5 6 7"  # the variant's own prompt builds
    assert setup.build(config).task.name == "seq2seq"


@pytest.mark.parametrize(
    "override,expected",
    [
        ("--config.train.num_steps=abc", "config.train.num_steps is an integer field"),
        ("--config.train.num_steps=2.5", "valid: a positive integer"),
        ("--config.data.batch_size=1e3", "config.data.batch_size is an integer field"),
        ("--config.optimizer.learning_rate=fast", "valid: a number"),
        ("--config.train.final_eval=maybe", "valid: True or False"),
    ],
)
def test_wrong_type_overrides_name_the_field_and_valid_values(override, expected):
    argv = ["seqjax.main", f"--config={CONFIGS}/char_lm.py:smoke", override]
    problem = field_checks.override_type_problem(_config("char_lm", "smoke"), argv)
    assert problem is not None and expected in problem
    assert problem.startswith(override.split("=")[0] + "=")
    assert "invalid literal" not in problem


def test_right_type_overrides_pass():
    argv = ["seqjax.main", f"--config={CONFIGS}/char_lm.py:smoke", "--config.train.num_steps=7",
            "--config.optimizer.learning_rate=1e-3", "--config.train.final_eval=false",
            "--config.data.batch_size", "4"]  # fmt: skip
    assert field_checks.override_type_problem(_config("char_lm", "smoke"), argv) is None
