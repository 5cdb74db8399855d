"""Memory before launch (issue 49): ``seqjax.main --dry_run=<target>`` compiles the train step
for a compile-only accelerator and prints its peak memory per device with the parameter /
optimizer / activation split, or refuses in one sentence (exit 2) when it does not fit."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from seqjax import compile_targets
from seqjax.train import config_validation, dry_run
from tests.accelerator import lowering_lib as lib
from tests.conftest import REPO


def test_report_splits_the_step_memory(h100):
    """char_lm's full-size step (``model.dtype="auto"``: bf16 on the H100, cuDNN attention)
    compiles for one H100. Adam keeps two moments per parameter (twice the parameters'
    bytes); the peak holds the state, the batch and XLA's temporaries, and fits 80 GB."""
    from tests.accelerator import test_compile_gpu

    config = test_compile_gpu.load_config("char_lm.py", "default")
    report = dry_run.report(config, "h100", info=lib._fake_info(config))
    assert report.fits and report.num_devices == 1
    assert report.device_memory == compile_targets.GPU_DEVICES["h100"]["memory"]
    assert report.optimizer == pytest.approx(2 * report.params, rel=0.01)
    assert report.peak >= report.params + report.optimizer + report.batch
    assert any("peak" in line for line in report.lines())


def test_unknown_target_is_one_sentence():
    config = lib.family_config("lm_dense")
    with pytest.raises(config_validation.ConfigError, match=r"--dry_run=h200: .* not one of"):
        dry_run.report(config, "h200")


def test_cli_refuses_a_config_that_does_not_fit_an_h100(h100):
    """A 13B-parameter LM (width 32,768, one layer) on one H100: float32 parameters and
    Adam's moments alone are 155 GB; the dry run says so in one sentence, exit 2."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "seqjax.main", "--config", "configs/char_lm.py:smoke",
           "--dry_run=h100", "--config.model.d_model=32768", "--config.model.num_heads=256",
           "--config.model.num_layers=1"]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, done.stderr[-2000:]
    assert "above its 84.9 GB" in errors[0] and "NVIDIA H100 80GB HBM3" in errors[0]
    split = re.search(r"parameters ([\d.]+), optimizer ([\d.]+)", errors[0])
    params, optimizer = float(split.group(1)), float(split.group(2))
    assert 51 < params < 53 and optimizer == pytest.approx(2 * params, rel=0.01)
