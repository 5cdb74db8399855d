"""Existing runs do not change with tasks as plug-ins: two tiny jobs (a duplication LM with
gradient accumulation, validation, checkpoints, test split and sample; a ListOps classifier
with CLS pooling and learned positions) write the same metrics.jsonl rows, result.json,
checkpoint layout, parameter/optimizer tree and throughput units/FLOPs per step as the
code before ``seqjax.tasks`` did.

``reference_before_tasks.json`` was produced by ``tests/tasks/_reference.py`` run against
the commit before the refactor (36c4358); see that file.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent


def _reference_module():
    spec = importlib.util.spec_from_file_location("tasks_reference", HERE / "_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return _reference_module().produce(tmp_path_factory.mktemp("unchanged"))


@pytest.fixture(scope="module")
def before():
    return json.loads((HERE / "reference_before_tasks.json").read_text())


def _close(a, b, path=""):
    """Same structure, keys and strings; floats within float32 round-off."""
    if isinstance(a, dict):
        assert sorted(a) == sorted(b), (path, sorted(a), sorted(b))
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), (path, a, b)
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=path)
    else:
        assert a == b, (path, a, b)


@pytest.mark.parametrize("job", ["lm_duplication", "classification_listops_cls"])
@pytest.mark.parametrize("part", ["metrics", "result", "layout", "step", "state", "throughput"])
def test_run_outputs_equal_the_pre_task_code(runs, before, job, part):
    _close(runs[job][part], before[job][part], f"{job}.{part}")
