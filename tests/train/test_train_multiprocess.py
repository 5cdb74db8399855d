"""Multi-process training through jax.distributed on this machine (``launch/local.py``).

2 processes x 4 fake CPU devices must train exactly like 1 process x 8 devices, and a
checkpoint written by one layout must resume in the other (Orbax reshards on restore).
"""

import sys

import numpy as np
import pytest

from tests.train.conftest import REPO, losses, main_command, subprocess_env

sys.path.insert(0, str(REPO))
from launch import local  # noqa: E402

STEPS = {"train.num_steps": 5, "mesh.data": -1, "train.checkpoint_every": 0}


def _args(workdir, corpus, **extra):
    return main_command(workdir, corpus, **{**STEPS, **extra})[3:]  # drop python -m seqjax.main


def _one_process(workdir, corpus, **extra):
    env = subprocess_env(corpus)
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    code = local.launch(1, 8, _args(workdir, corpus, **extra), env=env, cwd=str(REPO))
    assert code == 0, workdir / "process_0.log"


def _two_processes(workdir, corpus, **extra):
    code = local.launch(
        2, 4, _args(workdir, corpus, **extra), env=subprocess_env(corpus), cwd=str(REPO)
    )
    log = workdir / "process_1.log"
    assert code == 0, log.read_text()[-3000:] if log.exists() else code


def _loss_list(workdir, steps):
    got = losses(workdir)
    assert set(steps) <= set(got), sorted(got)
    return [got[s][-1] for s in steps]


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory):
    """1 process x 8 devices, 5 uninterrupted steps."""
    workdir = tmp_path_factory.mktemp("mp_reference")
    _one_process(workdir, corpus)
    return _loss_list(workdir, range(1, 6))


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
