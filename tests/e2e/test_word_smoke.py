"""Issue 40, item 1: the documented word-level smoke runs offline, with sockets blocked
(``configs/transformer_xl_wt103.py:smoke`` on the shared data's words); WikiText-103
missing ends in one sentence naming the data set and ``manual_dir`` (exit 2); adaptive
cutoffs beyond the data's vocabulary are a config error (exit 2), not a bug."""

import json
import math
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO, shared_data_dir

# Imported by every Python process started with this folder on PYTHONPATH: any internet
# connection (and name lookup) fails at once, as on a machine with no network.
NO_NETWORK = """
import socket

def _blocked(*args, **kwargs):
    raise OSError("network blocked by the test (no internet)")

_connect = socket.socket.connect

def _connect_local(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6):
        _blocked()
    return _connect(self, address)

socket.socket.connect = _connect_local
socket.create_connection = _blocked
socket.getaddrinfo = _blocked
"""
CONFIG = "configs/transformer_xl_wt103.py"


def _run(tmp_path, *args, timeout=900):
    site = tmp_path / "no_network"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(NO_NETWORK)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(REPO)]))
    env.pop("SEQJAX_DATA_DIR", None)
    cmd = [sys.executable, "-m", "seqjax.main", *args]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_socket_block_blocks(tmp_path):
    site = tmp_path / "no_network"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NO_NETWORK)
    env = dict(os.environ, PYTHONPATH=str(site))
    probe = "import socket; socket.create_connection(('pypi.org', 443), timeout=5)"
    proc = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert proc.returncode == 1 and "network blocked by the test" in proc.stderr


@pytest.mark.skipif(shared_data_dir() is None, reason="needs ../shared/data")
def test_the_word_level_smoke_runs_offline_and_ends_with_a_test_perplexity(tmp_path):
    workdir = tmp_path / "wt103_smoke"
    proc = _run(tmp_path, "--config", f"{CONFIG}:smoke", "--workdir", str(workdir))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((workdir / "result.json").read_text())
    assert math.isfinite(result["test"]["perplexity"]) and result["test"]["count"] > 0
    assert result["sample"]


def test_missing_wikitext_is_one_sentence_naming_the_data_set_and_manual_dir(tmp_path):
    proc = _run(tmp_path, "--config", f"{CONFIG}:smoke_wt103", "--workdir", str(tmp_path / "w"),
                f"--config.data.manual_dir={tmp_path}", f"--config.data.data_dir={tmp_path}/tfds",
                timeout=300)  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "bug in seqjax" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1
    assert "'wikitext103'" in errors[0] and "wikitext-103-v1.zip" in errors[0]
    assert "--config.data.manual_dir" in errors[0] and "network blocked" in errors[0]


@pytest.mark.skipif(shared_data_dir() is None, reason="needs ../shared/data")
def test_cutoffs_beyond_the_vocabulary_are_a_config_error(tmp_path):
    proc = _run(tmp_path, "--config", f"{CONFIG}:smoke", "--workdir", str(tmp_path / "w"),
                "--config.model.adaptive.cutoffs=(20000, 40000, 200000)", timeout=300)  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    (error,) = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert "config.model.adaptive.cutoffs=[20000, 40000, 200000] must lie in 1..23842" in error
