"""The task interface (``seqjax.tasks``): registry, batch checks, the LM's and the
classifier's loss sums against a direct reimplementation (values and gradients), label
smoothing, and the seq2seq-shaped hooks (``decode_metrics``, ``generates``) reaching the
evaluator and the loop without a line of either naming a task.

Legend: B batch, T length, V vocabulary, C classes.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from seqjax import tasks
from seqjax.models import TransformerConfig
from seqjax.models.transformer import TransformerClassifier, TransformerLM
from seqjax.tasks.lm import LanguageModel

HERE = Path(__file__).resolve().parent


def _reference():
    spec = importlib.util.spec_from_file_location("tasks_reference_2", HERE / "_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---- registry -----------------------------------------------------------------------------


def test_registry_names_get_and_errors():
    assert {"lm", "classification"} <= set(tasks.names())
    lm = tasks.get("lm")
    assert lm.name == "lm" and tasks.get(lm) is lm and lm.generates
    assert not tasks.get("classification").generates
    with pytest.raises(ValueError, match=r"unknown task 'nope'.*valid tasks: .*classification.*lm"):
        tasks.get("nope")
    with pytest.raises(ValueError, match="already registered"):
        tasks.register(LanguageModel())
    with pytest.raises(TypeError, match="Task instance"):
        tasks.register("lm")


def test_task_of_a_data_config_before_the_data_are_prepared():
    from seqjax import data

    d = data.default_config()
    for name, task in (("pystdlib", "lm"), ("duplication", "lm"), ("listops", "classification"),
                       ("imdb_bytes", "classification")):  # fmt: skip
        d.name = name
        assert tasks.for_data_config(d).name == task
    d.name = "no_such_data"
    assert tasks.for_data_config(d) is None


# ---- batches ------------------------------------------------------------------------------


def _lm_batch(b=4, t=8, v=11, seed=0):
    r = np.random.default_rng(seed)
    w = (r.random((b, t)) > 0.3).astype(np.float32)
    return {"inputs": r.integers(0, v, (b, t)).astype(np.int32),
            "targets": r.integers(0, v, (b, t)).astype(np.int32), "weights": w}  # fmt: skip


def _cls_batch(b=4, t=8, v=11, c=3, seed=0):
    r = np.random.default_rng(seed)
    inputs = r.integers(1, v, (b, t)).astype(np.int32)
    inputs[:, 6:] = 0  # padding
    return {"inputs": inputs, "targets": r.integers(0, c, (b,)).astype(np.int32),
            "weights": np.array([1, 1, 1, 0], np.float32)}  # fmt: skip


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda b: {k: v for k, v in b.items() if k != "weights"}, "fields"),
        (lambda b: {**b, "extra": b["inputs"]}, "fields"),
        (lambda b: {**b, "inputs": b["inputs"].astype(np.int16)}, r"\['inputs'\] must be int32"),
        (lambda b: {**b, "weights": b["weights"][:, 0]}, r"'weights'\] must be float32 of rank 2"),
    ],
)  # fmt: skip
def test_lm_batch_checks_name_the_field(change, match):
    lm = tasks.get("lm")
    lm.check_batch(_lm_batch())
    with pytest.raises(ValueError, match=match):
        lm.check_batch(change(_lm_batch()))


def test_classification_batches_are_not_lm_batches():
    tasks.get("classification").check_batch(_cls_batch())
    with pytest.raises(ValueError, match=r"task 'lm': batch\['targets'\] must be int32 of rank 2"):
        tasks.get("lm").check_batch(_cls_batch())


def test_train_step_refuses_a_malformed_batch_before_compiling():
    from seqjax.train import sharding
    from seqjax.train import step as step_lib

    cfg = TransformerConfig(vocab_size=11, num_layers=1, d_model=16, num_heads=2, max_len=8)
    model, tx = TransformerLM(cfg), optax.sgd(0.1)
    mesh = sharding.make_mesh({"data": 1, "fsdp": 1, "tensor": 1})
    fn = step_lib.make_train_step(model, "lm", tx, optax.constant_schedule(0.1), accum_steps=1,
                                  mesh=mesh)  # fmt: skip

    def init():
        params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))["params"]
        return {"params": params, "opt_state": tx.init(params), "step": jnp.zeros((), jnp.int32),
                "rng": jax.random.PRNGKey(1)}  # fmt: skip

    st = jax.eval_shape(init)
    jax.eval_shape(fn, st, _lm_batch())  # an LM batch traces (abstractly: nothing runs)
    with pytest.raises(ValueError, match=r"batch\['targets'\] must be int32 of rank 2"):
        jax.eval_shape(fn, st, _cls_batch())


# ---- loss sums against a direct reimplementation (the code before seqjax.tasks) -----------


def _old_loss(logits, batch):
    """The pre-task train loss: sum w CE / max(sum w, 1) with optax's integer-label CE."""
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch["targets"])
    w = batch["weights"]
    return (ce * w).sum() / jnp.maximum(w.sum(), 1.0)


@pytest.mark.parametrize("task_name", ["lm", "classification"])
def test_loss_sums_equal_the_direct_formula_in_values_and_gradients(task_name):
    task = tasks.get(task_name)
    lm = task_name == "lm"
    cfg = TransformerConfig(vocab_size=11, num_layers=1, d_model=16, num_heads=2, max_len=8,
                            causal=lm, num_classes=0 if lm else 3, pad_id=None if lm else 0,
                            dropout_rate=0.1)  # fmt: skip
    model = task.make_model(cfg)
    assert isinstance(model, TransformerLM if lm else TransformerClassifier)
    batch = jax.tree.map(jnp.asarray, _lm_batch() if lm else _cls_batch())
    params = jax.jit(model.init)(jax.random.PRNGKey(0), batch["inputs"])["params"]
    rng = jax.random.PRNGKey(3)

    def new(p):
        sums, memory = task.batch_sums(model, p, batch, rng=rng, train=True)
        assert memory is None
        return sums["loss_sum"] / jnp.maximum(batch["weights"].sum(), 1.0), sums

    def old(p):
        logits = model.apply({"params": p}, batch["inputs"], rngs={"dropout": rng},
                             deterministic=False)  # fmt: skip
        return _old_loss(logits, batch)

    (l_new, sums), g_new = jax.jit(jax.value_and_grad(new, has_aux=True))(params)
    l_old, g_old = jax.jit(jax.value_and_grad(old))(params)
    np.testing.assert_allclose(l_new, l_old, rtol=1e-6)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7), g_new, g_old)
    assert set(sums) == set(task.sum_keys) and float(sums["weight_sum"]) == batch["weights"].sum()


def test_label_smoothing_sums():
    r = np.random.default_rng(0)
    logits = jnp.asarray(r.normal(size=(3, 5, 7)), jnp.float32)
    targets = jnp.asarray(r.integers(0, 7, (3, 5)), jnp.int32)
    w = jnp.asarray(r.random((3, 5)) > 0.2, jnp.float32)
    plain = tasks.losses.cross_entropy_sums(logits, targets, w)
    s0 = tasks.losses.smoothed_cross_entropy_sums(logits, targets, w, 0.0)
    assert s0["loss_sum"] == plain["loss_sum"] == s0["nll_sum"]
    eps = 0.1
    s = tasks.losses.smoothed_cross_entropy_sums(logits, targets, w, eps)
    logp = jax.nn.log_softmax(logits)
    nll = -jnp.take_along_axis(logp, targets[..., None], -1)[..., 0]
    smoothed = (1 - eps) * nll - eps * logp.mean(-1)  # (1 - eps) onehot + eps / V
    np.testing.assert_allclose(s["loss_sum"], (smoothed * w).sum(), rtol=1e-6)
    np.testing.assert_allclose(s["nll_sum"], (nll * w).sum(), rtol=1e-6)
    assert s["correct_sum"] == plain["correct_sum"] and s["weight_sum"] == w.sum()


# ---- the seq2seq-shaped hooks reach the evaluator and the loop -----------------------------


class DecodingLM(LanguageModel):
    """The LM with a decoding metric and no generation: what a seq2seq task adds."""

    name = "lm_decoding_probe"
    generates = False

    def __init__(self):
        self.calls = []

    def decode_metrics(self, run, params, split, *, max_batches=0):
        self.calls.append((split, max_batches))
        n = sum(int(np.size(x)) for x in jax.tree.leaves(params))
        return {"decoded": float(len(self.calls)), "param_count": float(n)}


def test_decode_metrics_and_generation_are_asked_of_the_task(tmp_path, monkeypatch):
    from seqjax.train import loop

    probe = DecodingLM()
    monkeypatch.setattr(tasks, "for_run", lambda config, info: probe)
    ref = _reference()
    config = ref.job_config("lm_duplication", str(tmp_path / "tfds"))
    config.train.update(num_steps=2, eval_every=1, checkpoint_every=0)
    result = loop.train_and_evaluate(config, str(tmp_path / "work"))
    assert probe.calls == [("validation", 1), ("test", 0)]
    assert result["test"]["decoded"] == 2.0 and result["test"]["param_count"] > 0
    assert list(result["test"])[:5] == ["loss", "accuracy", "count", "bits_per_char", "perplexity"]
    assert result["sample"] is None  # sample_length > 0, but the task does not generate
    rows = [json.loads(x) for x in (tmp_path / "work" / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("validation/decoded") == 1.0 for r in rows)
    assert any(r.get("test/decoded") == 2.0 for r in rows)
