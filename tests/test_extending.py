"""The extension recipes of ``docs/extending.md``, run: a new attention mechanism is its
scores + its mask + one ``numerics`` call and one ``register``; it then works in every model
(here the LM, trained one step) and equals the flex ``sliding_window`` pattern it restates.
A new task (the doc's code block, executed as printed) trains through the loop's train step.

Legend: B batch, T length, H heads, D head dim.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from seqjax.attention import flex, masks, numerics, registry
from seqjax.models import TransformerConfig, TransformerLM

NAME = "window_example"


# --- the whole new mechanism (docs/extending.md, "A new attention mechanism") ---------------
def window_attention(q, k, v, *, causal=False, mask=None, segment_ids=None, dropout_rate=0.0,
                     dropout_rng=None, scale=None, window=4):  # fmt: skip
    """Local attention: query i sees keys j with |i - j| <= window (Child et al. 2019, §4.2
    "local" / Beltagy et al. 2020 sliding window), on top of the common masks."""
    b, t, _, d = q.shape
    s = k.shape[1]
    dist_TS = (s - t) + jnp.arange(t)[:, None] - jnp.arange(s)[None, :]
    valid = jnp.abs(dist_TS)[None, None] <= window
    common = masks.dense_mask(b, t, s, causal=causal, mask=mask, segment_ids=segment_ids)
    valid = valid if common is None else valid & common
    return numerics.attend(q, k, v, valid, scale=scale, dropout_rate=dropout_rate,
                           dropout_rng=dropout_rng)  # fmt: skip


# ---------------------------------------------------------------------------------------------


@pytest.fixture
def registered():
    registry.register(registry.Mechanism(NAME, window_attention, options=("window",)))
    yield NAME
    registry._REGISTRY.pop(NAME)


def _qkv(b=2, t=24, h=2, d=8, seed=0):
    ks = jax.random.split(jax.random.PRNGKey(seed), 3)
    return [jax.random.normal(k_, (b, t, h, d), jnp.float32) for k_ in ks]


@pytest.mark.parametrize("causal", [False, True])
def test_new_mechanism_equals_the_flex_pattern_it_restates(registered, causal):
    q, k, v = _qkv()
    ours = registry.get(registered)(q, k, v, causal=causal, window=3)
    theirs = flex.flex_attention(
        q, k, v, causal=causal, pattern="sliding_window", window=3, implementation="masked"
    )
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    g1 = jax.grad(lambda q_: registry.get(registered)(q_, k, v, causal=causal, window=3).sum())(q)
    g2 = jax.grad(
        lambda q_: flex.flex_attention(
            q_, k, v, causal=causal, pattern="sliding_window", window=3, implementation="masked"
        ).sum()
    )(q)
    np.testing.assert_allclose(g1, g2, rtol=1e-4, atol=1e-5)


def test_new_mechanism_trains_in_the_lm(registered):
    cfg = TransformerConfig(
        vocab_size=40, num_layers=2, d_model=32, num_heads=4, max_len=16,
        attention=((registered, (("window", 2),)),),
    )  # fmt: skip
    model = TransformerLM(cfg)
    tok = jax.random.randint(jax.random.PRNGKey(1), (2, 16), 0, 40)
    params = model.init(jax.random.PRNGKey(0), tok)["params"]

    def loss(p):
        logits = model.apply({"params": p}, tok[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, tok[:, 1:]).mean()

    tx = optax.adam(1e-2)
    opt = tx.init(params)
    loss_and_grad = jax.jit(jax.value_and_grad(loss))
    l0, g = loss_and_grad(params)
    for _ in range(5):
        updates, opt = tx.update(g, opt, params)
        params = optax.apply_updates(params, updates)
        l1, g = loss_and_grad(params)
    assert np.isfinite(l0) and l1 < l0
    # Causal with a window: position 10's logits ignore tokens more than 2 back (per layer,
    # so at most 2 layers x 2 = 4 positions back).
    changed = tok.at[:, 3].set((tok[:, 3] + 1) % 40)
    apply = jax.jit(lambda t: model.apply({"params": params}, t))
    a, b = apply(tok), apply(changed)
    np.testing.assert_allclose(a[:, 8:], b[:, 8:], rtol=1e-5, atol=1e-5)
    assert not np.allclose(a[:, 3:8], b[:, 3:8])


# --- "A new task" (docs/extending.md): the code block is executed as printed ---------------


def _doc_block(heading: str) -> str:
    """The first ```python block after ``heading`` in docs/extending.md."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "extending.md").read_text()
    section = text[text.index(heading) :]
    start = section.index("```python\n") + len("```python\n")
    return section[start : section.index("```", start)]


@pytest.fixture
def doc_task(monkeypatch):
    """The doc's task file, run as a module of its own (Flax modules need a real module)."""
    from seqjax import tasks

    module = types.ModuleType("doc_task_example")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(_doc_block("## A new task"), "docs/extending.md", "exec"), module.__dict__)  # noqa: S102
    yield module.ReverseTask
    tasks.unregister("reverse_example")


def _reverse_batch(rng, b=8, s=8, vocab=12):
    """Source: s - 1 ids in [2, vocab) then a pad; targets: the ids reversed, then EOS = 1."""
    ids = rng.integers(2, vocab, (b, s - 1)).astype(np.int32)
    source = np.concatenate([ids, np.zeros((b, 1), np.int32)], axis=1)
    targets = np.concatenate([ids[:, ::-1], np.ones((b, 1), np.int32)], axis=1)
    return {"inputs": source, "targets": targets, "weights": np.ones((b, s), np.float32)}


def test_new_task_from_the_doc_trains_through_the_train_step(doc_task):
    from seqjax import data as data_lib
    from seqjax import tasks
    from seqjax.train import defaults, optim, sharding, state
    from seqjax.train import step as step_lib

    config = defaults.base(data_lib.default_config())
    config.data.seq_len, config.data.batch_size = 8, 8
    config.model.update(num_layers=1, d_model=32, num_heads=2, max_len=16)
    config.train.num_steps = 40
    config.train.label_smoothing = 0.1
    config.optimizer.update(learning_rate=1e-2, warmup_steps=0)
    config.mesh.data = 1
    info = SimpleNamespace(task="reverse_example", vocab_size=12, seq_len=8, pad_id=0)

    assert "reverse_example" in tasks.names()
    task = tasks.for_run(config, info)  # the registry's task, configured from the config
    assert isinstance(task, doc_task) and task.label_smoothing == 0.1
    assert task.input_length(config) == config.model.max_len  # [source; decoder inputs]
    model = task.build_model(config, task.model_config(config, info))
    tx, schedule = optim.make_optimizer(config.optimizer, config.train.num_steps)
    mesh = sharding.make_mesh(config.mesh)
    _, shardings, init = state.create_state(model, tx, task.init_shapes(config, info), 0, mesh)
    fn = step_lib.make_train_step(model, task, tx, schedule, accum_steps=2, mesh=mesh)
    train_step = step_lib.jit_train_step(fn, shardings, mesh)
    rng = np.random.default_rng(0)
    st, losses = init(), []
    with sharding.rules_and_mesh(mesh):
        for _ in range(40):
            st, m = train_step(st, sharding.global_batch(_reverse_batch(rng), mesh))
            losses.append(float(m["loss"]))
    assert np.isfinite(losses).all() and np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.5

    # Evaluation sums: smoothed loss, unsmoothed NLL (perplexity), count.
    batch = _reverse_batch(rng)
    params = jax.device_get(st["params"])
    sums, _ = task.batch_sums(model, params, batch, rng=None, train=False)
    summary = task.eval_summary(jax.device_get(sums), config)
    assert summary["count"] == 64.0 and not np.isclose(sums["loss_sum"], sums["nll_sum"])
    np.testing.assert_allclose(summary["perplexity"], np.exp(sums["nll_sum"] / 64), rtol=1e-6)
    # A malformed batch is refused by name before anything compiles.
    with pytest.raises(ValueError, match=r"batch\['targets'\] must be int32 of rank 2"):
        task.check_batch({**batch, "targets": batch["targets"][:, 0]})
