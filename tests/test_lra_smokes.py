"""Issue 40, item 2: an LRA config switched to a kernelized mechanism on the command line
(``--config.model.attention=performer`` or ``linear``) runs, and every LRA smoke ends with
a test figure (a bounded slice of the test split, ``train.test_max_batches``)."""

import json
import subprocess
import sys

import pytest

from seqjax import main as main_lib
from seqjax.configs import common
from seqjax.train import config_validation
from tests.conftest import REPO

LRA = ("lra_listops", "lra_text", "lra_image", "lra_pathfinder", "lra_pathx", "lra_retrieval")


def _validate(config):
    if config.mesh.data == -1:  # the tests see 8 fake devices (as tests/test_configs.py)
        config.mesh.data = 1
    config_validation.validate(config)


@pytest.mark.parametrize("name", LRA)
@pytest.mark.parametrize("mechanism", ["performer", "linear"])
def test_a_kernelized_mechanism_on_the_command_line_validates(name, mechanism):
    config = common.load_config(f"{name}:smoke")
    config.model.attention = mechanism
    argv = ["seqjax.main", f"--config=configs/{name}.py:smoke",
            f"--config.model.attention={mechanism}"]  # fmt: skip
    had_dropout = bool(config.model.attention_dropout_rate)
    assert main_lib.fit_attention_dropout(config, argv) == had_dropout
    assert config.model.attention_dropout_rate == 0.0
    _validate(config)


def test_an_attention_dropout_given_on_the_command_line_is_kept_and_refused():
    config = common.load_config("lra_listops:smoke")
    config.model.attention = "performer"
    argv = ["--config.model.attention=performer", "--config.model.attention_dropout_rate=0.1"]
    assert not main_lib.fit_attention_dropout(config, argv)
    assert config.model.attention_dropout_rate == 0.1
    with pytest.raises(ValueError, match="model.attention_dropout_rate"):
        _validate(config)
    dense = common.load_config("lra_listops:smoke")  # dense keeps LRA's attention dropout
    assert not main_lib.fit_attention_dropout(dense, ["--config=configs/lra_listops.py:smoke"])
    assert dense.model.attention_dropout_rate == 0.1


@pytest.mark.parametrize("name", LRA)
def test_every_lra_smoke_ends_with_a_bounded_test_evaluation(name):
    t = common.load_config(f"{name}:smoke").train
    assert t.final_eval and 1 <= t.test_max_batches <= 4


def test_test_max_batches_is_validated():
    config = common.load_config("lra_image:smoke")
    config.train.test_max_batches = -1
    with pytest.raises(ValueError, match="train.test_max_batches"):
        _validate(config)


@pytest.mark.slow  # a minute on 2 CPU cores: the smoke as a user types it
def test_lra_image_smoke_with_linear_attention_ends_with_a_test_accuracy(tmp_path):
    cmd = [sys.executable, "-m", "seqjax.main", "--config", "configs/lra_image.py:smoke",
           "--workdir", str(tmp_path / "run"), "--config.model.attention=linear"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert 0.0 <= result["test"]["accuracy"] <= 1.0 and result["test"]["count"] == 16
