"""In-process properties of the training loop: it learns, sharding does not change the
numbers, accumulation equals one big batch, and a non-finite loss stops without saving."""

from __future__ import annotations

import json
import re

import jax
import numpy as np
import pytest

from seqjax.train import loop


def _run(helpers, corpus, workdir, **extra):
    config = helpers.tiny_config(corpus, **extra)
    result = loop.train_and_evaluate(config, str(workdir))
    return result, helpers.losses(workdir)


def test_smoke_loss_decreases(helpers, corpus, tmp_path):
    """The smoke job's loss falls clearly over 50 steps on the tiny corpus."""
    result, losses = _run(helpers, corpus, tmp_path, **{"train.num_steps": 50})
    assert result["stopped"] == "done" and result["step"] == 50
    first = np.mean([losses[s][0] for s in range(1, 6)])
    last = np.mean([losses[s][0] for s in range(46, 51)])
    assert first > np.log(20)  # near uniform over the ~40 characters at the start
    assert last < first - 1.0, (first, last)
    assert all(np.isfinite(v[0]) for v in losses.values())


_COMMON = {"train.num_steps": 3, "data.batch_size": 16}


@pytest.fixture(scope="module")
def one_device_losses(helpers, corpus, tmp_path_factory):
    """First 3 losses of the tiny job (batch 16) on a single device."""
    _, losses = _run(helpers, corpus, tmp_path_factory.mktemp("one"), **_COMMON,
                     **{"mesh.data": 1})  # fmt: skip
    return np.array([losses[s][0] for s in (1, 2, 3)])


@pytest.mark.parametrize(
    "mesh",
    [{"mesh.data": 4, "mesh.fsdp": 1, "mesh.tensor": 2}, {"mesh.data": 1, "mesh.fsdp": 8}],
    ids=["data4_tensor2", "fsdp8"],
)
def test_sharded_equals_unsharded(helpers, corpus, tmp_path, mesh, one_device_losses):
    """First 3 losses on 1 device == on 8 fake devices, within float32 tolerance."""
    assert jax.device_count() == 8
    _, many = _run(helpers, corpus, tmp_path / "many", **_COMMON, **mesh)
    b = np.array([many[s][0] for s in (1, 2, 3)])
    np.testing.assert_allclose(b, one_device_losses, rtol=2e-5, atol=2e-5)
    text = (tmp_path / "many" / "sharding.txt").read_text()
    axis = "tensor" if mesh.get("mesh.tensor", 1) > 1 else "fsdp"
    assert f"'{axis}'" in text  # parameters really are sharded over that axis


def test_grad_accumulation_equals_big_batch(helpers, corpus, tmp_path, one_device_losses):
    """2 accumulated micro-batches give the same updates as the whole batch at once."""
    _, accum = _run(helpers, corpus, tmp_path, **_COMMON, **{"optimizer.grad_accum_steps": 2})
    b = np.array([accum[s][0] for s in (1, 2, 3)])
    np.testing.assert_allclose(b, one_device_losses, rtol=1e-5, atol=1e-5)


def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(helpers, corpus, tmp_path):
    """A diverging run stops with a clear error and saves nothing after the good step."""
    good, _ = _run(
        helpers, corpus, tmp_path, **{"train.stop_after": 2, "train.checkpoint_every": 1}
    )
    assert good["stopped"] == "stop_after"
    assert helpers.complete_steps(tmp_path) == [1, 2]
    config = helpers.tiny_config(corpus, **{"optimizer.learning_rate": 1e30})
    with pytest.raises(loop.NonFiniteLossError, match="last good checkpoint \\(step 2\\)"):
        loop.train_and_evaluate(config, str(tmp_path))
    assert helpers.complete_steps(tmp_path) == [1, 2]
    assert helpers.partial_checkpoints(tmp_path) == []


def test_metrics_fetched_every_log_every_steps(helpers, corpus, tmp_path):
    """log_every=3: metrics at steps 3, 6, 7 (the last) only, equal in every logged value
    (timings aside) to the log_every=1 run's at those steps; a non-finite step between two
    log steps still stops the run before a save, naming that step."""
    extra = {"train.num_steps": 7, "train.checkpoint_every": 0}
    _run(helpers, corpus, tmp_path / "every", **extra)
    _run(helpers, corpus, tmp_path / "third", **extra, **{"train.log_every": 3})

    def lines(workdir):
        recs = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
        timing = ("time", "steps_per_s", "tokens_per_s", "elapsed_s", "model_tflops_per_s", "mfu")
        return {
            r["step"]: {k: v for k, v in r.items() if not k.endswith(timing)}
            for r in recs
            if "train/loss" in r
        }

    every, third = lines(tmp_path / "every"), lines(tmp_path / "third")
    assert sorted(every) == list(range(1, 8)) and sorted(third) == [3, 6, 7]
    for s in (3, 6, 7):
        assert third[s] == every[s], s
    first_bad = []
    for log_every in (1, 100):
        config = helpers.tiny_config(
            corpus,
            **{"optimizer.learning_rate": 1e30, "train.log_every": log_every,
               "train.num_steps": 6, "train.checkpoint_every": 0},
        )  # fmt: skip
        workdir = tmp_path / f"nan{log_every}"
        with pytest.raises(loop.NonFiniteLossError) as err:
            loop.train_and_evaluate(config, str(workdir))
        first_bad.append(re.search(r"non-finite training value at step (\d+):", str(err.value)))
        assert helpers.complete_steps(workdir) == []
    assert first_bad[0] and first_bad[1] and first_bad[0][1] == first_bad[1][1]
