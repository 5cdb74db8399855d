"""The two-tower pair classifier (LRA Retrieval) and its task: one shared encoder, LRA's
``classifier_head_dual`` head, padding, and the config errors."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax import tasks
from seqjax.configs import common
from seqjax.models.transformer import TransformerConfig
from seqjax.models.two_tower import TwoTowerClassifier
from seqjax.train import config_validation
from tests.conftest import REPO

B, T = 3, 12


def _cfg(pooling="cls", attention=(("dense", ()),)):
    return TransformerConfig(
        vocab_size=257, num_layers=2, num_heads=2, d_model=16, d_ff=32, max_len=T + 1,
        attention=attention, causal=False, num_classes=2, pooling=pooling, pad_id=0,
    )  # fmt: skip


def _docs(seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(1, 257, size=(B, T)).astype(np.int32)
    b = rng.integers(1, 257, size=(B, T)).astype(np.int32)
    a[0, 7:] = 0  # padded documents
    b[1, 3:] = 0
    return jnp.asarray(a), jnp.asarray(b)


def _reference(model, params, a, b):
    """The head written out: [u, v, u*v, u-v] (or [u, v]) -> relu -> relu -> logits."""
    u = model.apply({"params": params}, a, method=TwoTowerClassifier.encode)
    v = model.apply({"params": params}, b, method=TwoTowerClassifier.encode)
    h = jnp.concatenate([u, v, u * v, u - v] if model.interaction == "nli" else [u, v], -1)
    for name in ("mlp", "mlp2"):
        h = jax.nn.relu(h @ params[name]["kernel"] + params[name]["bias"][None])
    return h @ params["logits"]["kernel"] + params["logits"]["bias"][None]


@pytest.mark.parametrize("pooling, interaction", [("cls", "nli"), ("mean", "concat")])
def test_values_and_gradients_equal_the_written_out_head(pooling, interaction):
    model = TwoTowerClassifier(_cfg(pooling), interaction=interaction, mlp_dim=24)
    a, b = _docs()
    params = jax.tree.map(
        lambda x: x.unbox() if hasattr(x, "unbox") else x,
        model.init(jax.random.key(0), a, b)["params"],
        is_leaf=lambda x: hasattr(x, "unbox"),
    )
    # one encoder: the same parameters encode both documents
    assert [k for k in params if k.startswith("encoder")] == ["encoder"]
    assert params["mlp"]["kernel"].shape == ((4 if interaction == "nli" else 2) * 16, 24)
    assert params["mlp2"]["kernel"].shape == (24, 12)
    y = jnp.asarray([0, 1, 1])

    def loss(p, f):
        logits = f(p)
        return -jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], 1).sum()

    full = lambda p: model.apply({"params": p}, a, b)  # noqa: E731
    ref = lambda p: _reference(model, p, a, b)  # noqa: E731
    np.testing.assert_allclose(full(params), ref(params), rtol=1e-5, atol=1e-5)
    g_full = jax.grad(loss)(params, full)
    g_ref = jax.grad(loss)(params, ref)
    for x, r in zip(jax.tree.leaves(g_full), jax.tree.leaves(g_ref), strict=True):
        np.testing.assert_allclose(x, r, rtol=1e-4, atol=1e-6)
    # the shared table's gradient reaches a byte seen only in the second document
    only_b = sorted(set(np.asarray(b[b > 0]).tolist()) - set(np.asarray(a).ravel().tolist()))
    assert (
        only_b and np.abs(np.asarray(g_full["encoder"]["embed"]["embedding"][only_b[0]])).sum() > 0
    )


def test_padding_is_ignored_and_rows_are_independent():
    model = TwoTowerClassifier(_cfg("mean"))
    a, b = _docs()
    variables = model.init(jax.random.key(1), a, b)
    enc = lambda x: model.apply(variables, x, method=TwoTowerClassifier.encode)  # noqa: E731
    logits = model.apply(variables, a, b)
    # more padding at the end changes nothing (attention and mean pooling skip pad tokens)
    pad = jnp.zeros((B, 5), jnp.int32)
    longer = TwoTowerClassifier(dataclasses.replace(_cfg("mean"), max_len=T + 6))
    np.testing.assert_allclose(
        longer.apply(variables, jnp.concatenate([a, pad], 1), jnp.concatenate([b, pad], 1)),
        logits, rtol=1e-5, atol=1e-5,
    )  # fmt: skip
    # a document's vector depends on its own row only; swapping the documents swaps u and v
    np.testing.assert_allclose(enc(a), enc(a[::-1])[::-1], rtol=1e-5, atol=1e-6)
    assert not np.allclose(model.apply(variables, b, a), logits)


def _load(variant):
    return common.load_file(REPO / "configs" / "lra_retrieval.py", name="cfg_lra_ret").get_config(
        variant
    )


def _errors(config) -> str:
    config.mesh.data = 1
    with pytest.raises(config_validation.ConfigError) as e:
        config_validation.validate(config)
    return str(e.value)


def test_two_tower_config_on_a_single_input_data_set_names_the_field():
    c = _load("smoke")
    config_validation.validate(c)  # the stand-in config itself is valid
    c.data.name = "imdb_bytes"
    msg = _errors(c)
    assert "config.model.towers=2" in msg and "'imdb_bytes'" in msg and "l10n_pairs" in msg
    c = _load("smoke")
    c.model.towers = 3  # 1 is the cross-encoder (tests/tasks/test_token_tasks.py)
    assert "config.model.towers=3 is invalid; valid: 2 (two towers) or 1" in _errors(c)
    c = _load("smoke")
    c.model.pair_interaction = "dot"
    assert "config.model.pair_interaction='dot'" in _errors(c)


def test_task_batches_and_train_step_shapes():
    task = tasks.get("pair_classification")
    assert task.batch_fields["inputs2"] == ("int32", 2)
    c = _load("smoke")
    task = tasks.registry.for_data_config(c.data).configure(c)
    assert task.name == "pair_classification" and task.interaction == "nli"
    assert task.input_length(c) == 128 and task.init_shapes(c, None) == ((1, 127), (1, 127))
    model = task.make_model(_cfg())
    a, b = _docs()
    batch = {"inputs": a, "inputs2": b, "targets": jnp.asarray([0, 1, 0], jnp.int32),
             "weights": jnp.asarray([1.0, 1.0, 0.0])}  # fmt: skip
    task.check_batch(batch)
    params = model.init(jax.random.key(0), a, b)["params"]
    sums, _ = task.batch_sums(model, params, batch, rng=jax.random.key(1), train=True)
    assert float(sums["weight_sum"]) == 2.0 and np.isfinite(float(sums["loss_sum"]))
    with pytest.raises(ValueError, match="inputs2"):
        task.check_batch({k: v for k, v in batch.items() if k != "inputs2"})
