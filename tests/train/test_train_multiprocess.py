"""Multi-process training through jax.distributed on this machine (``launch/local.py``).

2 processes x 4 fake CPU devices must train exactly like 1 process x 8 devices, and a
checkpoint written by one layout must resume in the other (Orbax reshards on restore).
"""

import json
import sys

import numpy as np
import pytest

from tests.train.conftest import REPO, TEST_XLA_FLAGS, losses, main_command, subprocess_env

sys.path.insert(0, str(REPO))
from launch import local  # noqa: E402

STEPS = {"train.num_steps": 5, "mesh.data": -1, "train.checkpoint_every": 0}
TIMEOUT_S = 400  # a deadlock fails the test (exit 124) instead of hanging CI
# Everything a run does at the end or in between is on: validation during training, the
# whole-split test evaluation and a (greedy) sample. Every collective program must then be
# the same sequence on every process (a mismatch deadlocks: the test times out).
EVALS = {
    "train.eval_every": 2,
    "train.eval_max_batches": 2,
    "train.final_eval": True,
    "train.sample_length": 8,
    "train.sample_temperature": 0.0,
}


def _args(workdir, corpus, **extra):
    # [3:] drops "python -m seqjax.main"
    return main_command(workdir, corpus, **{**STEPS, **EVALS, **extra})[3:]


def _one_process(workdir, corpus, **extra):
    env = subprocess_env(corpus)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count=8 {TEST_XLA_FLAGS}"
    code = local.launch(
        1, 8, _args(workdir, corpus, **extra), env=env, cwd=str(REPO), timeout_s=TIMEOUT_S
    )
    assert code == 0, workdir / "process_0.log"


def _two_processes(workdir, corpus, **extra):
    code = local.launch(
        2,
        4,
        _args(workdir, corpus, **extra),
        env=subprocess_env(corpus),
        cwd=str(REPO),
        timeout_s=TIMEOUT_S,
    )
    log = workdir / "process_1.log"
    assert code == 0, log.read_text()[-3000:] if log.exists() else code


def _loss_list(workdir, steps):
    got = losses(workdir)
    assert set(steps) <= set(got), sorted(got)
    return [got[s][-1] for s in steps]


def _eval_metrics(workdir) -> dict:
    """``{(step, 'validation/loss'): value, ...}`` of metrics.jsonl's evaluation lines."""
    out = {}
    for line in (workdir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        for k, v in rec.items():
            if k.startswith(("validation/", "test/")):
                out[(rec["step"], k)] = v
    return out


@pytest.fixture(scope="module")
def reference_run(corpus, tmp_path_factory):
    """1 process x 8 devices, 5 uninterrupted steps (with validation, test, sample)."""
    workdir = tmp_path_factory.mktemp("mp_reference")
    _one_process(workdir, corpus)
    return workdir


@pytest.fixture(scope="module")
def reference(reference_run):
    return _loss_list(reference_run, range(1, 6))


def test_two_processes_validate_test_and_sample_like_one(corpus, reference_run, tmp_path):
    _two_processes(tmp_path, corpus)
    ref_result = json.loads((reference_run / "result.json").read_text())
    result = json.loads((tmp_path / "result.json").read_text())
    np.testing.assert_allclose(
        _loss_list(tmp_path, range(1, 6)), _loss_list(reference_run, range(1, 6)), rtol=2e-6
    )
    got, want = _eval_metrics(tmp_path), _eval_metrics(reference_run)
    assert sorted(got) == sorted(want)
    assert {s for s, k in got if k.startswith("validation/")} == {2, 4}
    assert (5, "test/loss") in got and got[(5, "test/count")] > 0
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, rtol=2e-6, err_msg=str(key))
    assert result["stopped"] == "done" and result["sample"] == ref_result["sample"]
    assert len(result["sample"]) > 0


@pytest.mark.slow  # 45 s; the fast suite compares two processes with one in the test above
def test_two_processes_equal_one_and_checkpoint_moves_between_layouts(corpus, reference, tmp_path):
    # 2 x 4 for 3 steps (the schedule of a 5-step run), checkpoint at the stop.
    _two_processes(tmp_path, corpus, **{"train.stop_after": 3})
    np.testing.assert_allclose(_loss_list(tmp_path, range(1, 4)), reference[:3], rtol=2e-6)
    # ... resumed by 1 x 8: steps 4-5 equal the uninterrupted run.
    _one_process(tmp_path, corpus)
    np.testing.assert_allclose(_loss_list(tmp_path, range(4, 6)), reference[3:], rtol=2e-6)


@pytest.mark.slow
def test_one_process_checkpoint_resumes_in_two(corpus, reference, tmp_path):
    _one_process(tmp_path, corpus, **{"train.stop_after": 3})
    _two_processes(tmp_path, corpus)
    np.testing.assert_allclose(_loss_list(tmp_path, range(4, 6)), reference[3:], rtol=2e-6)
