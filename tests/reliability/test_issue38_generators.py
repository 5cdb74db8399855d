"""Issue 38, generated data sets: an empty split (item 5) and a length range no tree can
fill (item 7) end in one sentence naming the ``config.data.listops_*`` field, before any
generation; a generator that cannot make progress stops with a sentence instead of hanging."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

import pytest

from seqjax.data import listops
from seqjax.data.sources import DataError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@contextlib.contextmanager
def _deadline(seconds: int):
    """Fails (instead of hanging the suite) when the block runs past ``seconds``."""

    def on_alarm(signum, frame):
        raise TimeoutError(f"no answer within {seconds} s: the generator hangs")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize(
    "fields,named",
    [
        ({"train_size": 0}, "config.data.listops_train_size=0"),
        ({"test_size": -1}, "config.data.listops_test_size=-1"),
        ({"min_length": 3000, "max_length": 500}, "config.data.listops_min_length=3000"),
        ({"min_length": 10, "max_length": 11}, "config.data.listops_max_length=11"),
        ({"max_depth": 2, "max_args": 2, "min_length": 10}, "no tree is longer than 4 tokens"),
    ],
)
def test_impossible_listops_settings_are_named(fields, named):
    with pytest.raises(DataError, match=named):
        listops.ListOpsSpec(**fields)


def test_the_smoke_settings_pass_and_generate():
    spec = listops.ListOpsSpec(train_size=8, validation_size=2, test_size=2, min_length=50,
                               max_length=500)  # fmt: skip
    out = listops.generate(spec, num_procs=1, job_size=16)
    assert [len(out[s]) for s in ("train", "validation", "test")] == [8, 2, 2]
    assert all(50 < len(tokens) < 500 for tokens, _ in out["train"])


def test_too_few_distinct_trees_stop_with_a_sentence():
    # Depth 2, two arguments: trees of 1 or 4 tokens; 2 < length < 6 leaves 4-token trees
    # only (4 operators x 100 digit pairs = 400 distinct), fewer than the 520 asked for.
    spec = listops.ListOpsSpec(train_size=500, validation_size=10, test_size=10, min_length=2,
                               max_length=6, max_depth=2, max_args=2)  # fmt: skip
    with _deadline(60), pytest.raises(DataError, match=r"only \d+ distinct trees exist .* 520"):
        listops.generate(spec, num_procs=1)


def test_a_range_trees_never_reach_stops_a_job(monkeypatch):
    monkeypatch.setattr(listops, "MAX_REJECTS_IN_A_ROW", 200)
    spec = listops.ListOpsSpec(min_length=1_000_000, max_length=1_000_010)  # possible, unlikely
    with _deadline(60), pytest.raises(DataError, match="makes no progress: 200 trees in a row"):
        listops.generate_job(spec, 0, job_size=4)


@pytest.mark.parametrize(
    "override,named",
    [
        ("listops_train_size=0", "config.data.listops_train_size=0"),
        ("listops_min_length=3000", "config.data.listops_min_length=3000"),
    ],
)
def test_listops_smoke_with_impossible_settings_ends_in_one_sentence(tmp_path, override, named):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": REPO}
    env["XLA_FLAGS"] = "--xla_backend_optimization_level=0"
    cmd = [sys.executable, "-m", "seqjax.main", "--config=configs/lra_listops.py:smoke",
           f"--workdir={tmp_path / 'w'}", f"--config.data.data_dir={tmp_path / 'tfds'}",
           f"--config.data.{override}"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "AssertionError" not in proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert named in line and "seqjax.log" in line
