"""Issue 40, item 3: the masked-LM smoke documented for transfer (``configs/mlm.py``:
``subword,smoke`` then ``subword,finetune,smoke --config.init_from=...``) fine-tunes above
chance and above the same fine-tune from scratch, on a bounded slice of the test split
(``train.test_max_batches``: 512 reviews). Run as printed in the config's docstring."""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO, shared_data_dir

CONFIG = "configs/mlm.py"


def _train(arg: str, workdir, *extra):
    cmd = [sys.executable, "-m", "seqjax.main", "--config", f"{CONFIG}:{arg}",
           "--workdir", str(workdir), *extra]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, (arg, proc.stderr[-3000:])
    assert "Metadata file does not exist" not in proc.stderr  # init_from reads quietly
    return json.loads((workdir / "result.json").read_text())["test"]


def test_the_documented_transfer_commands_are_in_the_docstring():
    doc = (REPO / CONFIG).read_text()
    assert "configs/mlm.py:subword,finetune,smoke" in doc and "shows transfer" in doc


@pytest.mark.slow  # three CPU runs of 200 steps (about 10 minutes on an idle 2-core CPU)
@pytest.mark.skipif(shared_data_dir() is None, reason="needs ../shared/data/imdb")
def test_subword_pretraining_transfers_to_the_imdb_classifier(tmp_path):
    _train("subword,smoke", tmp_path / "mlm_sw")
    tuned = _train("subword,finetune,smoke", tmp_path / "ft_sw",
                   f"--config.init_from={tmp_path / 'mlm_sw'}")  # fmt: skip
    scratch = _train("subword,finetune,smoke", tmp_path / "scratch_sw")
    assert tuned["count"] == scratch["count"] == 512
    assert tuned["accuracy"] > 0.6  # chance: 0.5 (the slice holds both labels)
    assert tuned["accuracy"] > scratch["accuracy"]
