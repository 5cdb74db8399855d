"""Optimizers, schedules and weight-decay masks from ``config.optimizer`` (seqjax.train.optim).

Every option is checked three ways: the transformation built from the config gives the same
updates as the optax object written out by hand, the schedule equals its paper formula at
known steps, and a short run on a tiny regression problem lowers the loss.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from seqjax.models import TransformerConfig
from seqjax.train import config_validation, defaults, optim, state


def _opt(**fields) -> ml_collections.ConfigDict:
    o = defaults.optimizer()
    for key, value in fields.items():
        if key.startswith("adafactor_"):
            o.adafactor[key[len("adafactor_") :]] = value
        else:
            o[key] = value
    return o


def _params(seed: int = 0) -> dict:
    """A tree with the names the models use: kernels, embedding, biases, norms, u/v, cls."""
    k = jax.random.split(jax.random.PRNGKey(seed), 6)
    return {
        "embed": {"embedding": jax.random.normal(k[0], (12, 8))},
        "block_0": {
            "attention": {
                "query": {"kernel": jax.random.normal(k[1], (8, 2, 4))},
                "r_w_bias": jax.random.normal(k[2], (2, 4)),
                "r_r_bias": jax.random.normal(k[3], (2, 4)),
            },
            "ln": {"scale": jnp.ones(8), "bias": jnp.zeros(8)},
            "dense": {"kernel": jax.random.normal(k[4], (8, 8)), "bias": jnp.zeros(8)},
        },
        "cls": jax.random.normal(k[5], (8,)),
    }


def _updates(tx, params, steps: int = 3):
    """The parameters after ``steps`` updates with fixed pseudo-random gradients."""
    opt_state = tx.init(params)
    update = jax.jit(tx.update)
    for i in range(steps):
        leaves, treedef = jax.tree.flatten(params)
        keys = jax.random.split(jax.random.PRNGKey(100 + i), len(leaves))
        grads = jax.tree.unflatten(
            treedef, [jax.random.normal(key, x.shape) for key, x in zip(keys, leaves)]
        )
        updates, opt_state = update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
    return params


def _assert_same(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------------ defaults: unchanged


def test_default_optimizer_is_the_previous_clip_adamw_cosine():
    """The defaults build exactly what state.py built before (clip, AdamW, warm-up cosine,
    decay on >= 2-D leaves) for a tree without Transformer-XL's u/v."""
    opt = _opt()
    params = _params()
    del params["block_0"]["attention"]["r_w_bias"], params["block_0"]["attention"]["r_r_bias"]
    schedule = optax.warmup_cosine_decay_schedule(0.0, 1e-3, 100, 1000, 1e-4)
    previous = optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.adamw(
            schedule, b1=0.9, b2=0.99, eps=1e-8, weight_decay=0.01,
            mask=lambda p: jax.tree.map(lambda x: x.ndim >= 2, p),
        ),
    )  # fmt: skip
    tx, sched = optim.make_optimizer(opt, 1000)
    _assert_same(_updates(tx, params), _updates(previous, params))
    for step in (0, 50, 100, 600, 1000):
        assert float(sched(step)) == pytest.approx(float(schedule(step)))
    # state.py still exports the builders (setup.py, experiments).
    assert state.make_optimizer is optim.make_optimizer


# ------------------------------------------------------------------ optimizers


def _reference(name: str, schedule):
    """The optax object each name must build (weight decay on the "matrices" mask)."""
    mask = optim.decay_mask("matrices")
    if name == "adamw":
        return optax.adamw(schedule, b1=0.9, b2=0.99, eps=1e-8, weight_decay=0.01, mask=mask)
    if name == "adam":
        return optax.adam(schedule, b1=0.9, b2=0.99, eps=1e-8)
    if name == "lamb":
        return optax.lamb(schedule, b1=0.9, b2=0.99, eps=1e-8, weight_decay=0.01, mask=mask)
    if name == "sgd":
        return optax.chain(
            optax.add_decayed_weights(0.01, mask), optax.sgd(schedule, 0.9, nesterov=True)
        )
    return optax.adafactor(
        schedule, decay_rate=0.8, clipping_threshold=1.0, multiply_by_parameter_scale=True,
        weight_decay_rate=0.01, weight_decay_mask=mask, eps=1e-30,
    )  # fmt: skip


@pytest.mark.parametrize("name", optim.NAMES)
def test_each_optimizer_builds_its_optax_transformation(name):
    extra = {"nesterov": True} if name == "sgd" else {}
    wd = 0.0 if name == "adam" else 0.01
    opt = _opt(name=name, schedule="constant", warmup_steps=0, learning_rate=0.01,
               grad_clip_norm=0.0, weight_decay=wd, **extra)  # fmt: skip
    tx, schedule = optim.make_optimizer(opt, 100)
    params = _params()
    _assert_same(_updates(tx, params), _updates(_reference(name, schedule), params))


def test_clipping_is_optional_and_first():
    opt = _opt(schedule="constant", warmup_steps=0, grad_clip_norm=0.5)
    tx, schedule = optim.make_optimizer(opt, 100)
    ref = optax.chain(optax.clip_by_global_norm(0.5), _reference("adamw", schedule))
    _assert_same(_updates(tx, _params()), _updates(ref, _params()))
    tx0, _ = optim.make_optimizer(_opt(schedule="constant", warmup_steps=0, grad_clip_norm=0), 1)
    _assert_same(_updates(tx0, _params()), _updates(_reference("adamw", schedule), _params()))


def _regression_loss(params, x, y):
    h = jnp.tanh(x @ params["dense"]["kernel"] + params["dense"]["bias"][None])
    pred = h @ params["out"]["kernel"] + params["out"]["bias"][None]
    return jnp.mean((pred - y) ** 2)


LEARNING = {  # name -> (learning_rate, schedule) for the tiny problem
    "adamw": (1e-2, "warmup_cosine"),
    "adam": (1e-2, "warmup_linear"),
    "lamb": (1e-2, "constant"),
    "sgd": (0.1, "inverse_sqrt"),
    "adafactor": (0.5, "rsqrt"),
}


@pytest.mark.parametrize("name", optim.NAMES)
def test_each_optimizer_learns_a_tiny_problem(name):
    lr, schedule = LEARNING[name]
    opt = _opt(name=name, schedule=schedule, learning_rate=lr, warmup_steps=5,
               weight_decay=0.0 if name == "adam" else 1e-4)  # fmt: skip
    tx, _ = optim.make_optimizer(opt, 60)
    k = jax.random.split(jax.random.PRNGKey(0), 4)
    x = jax.random.normal(k[0], (64, 4))
    y = jnp.sin(x @ jax.random.normal(k[1], (4, 1)))
    params = {
        "dense": {"kernel": 0.5 * jax.random.normal(k[2], (4, 16)), "bias": jnp.zeros(16)},
        "out": {"kernel": 0.5 * jax.random.normal(k[3], (16, 1)), "bias": jnp.zeros(1)},
    }

    @jax.jit
    def step(params, opt_state):
        loss, grads = jax.value_and_grad(_regression_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    opt_state = tx.init(params)
    first = float(_regression_loss(params, x, y))
    for _ in range(60):
        params, opt_state, _ = step(params, opt_state)
    last = float(_regression_loss(params, x, y))
    assert np.isfinite(last) and last < 0.5 * first, (name, first, last)


# ------------------------------------------------------------------ schedules


def test_warmup_cosine_and_linear_values():
    lr, w, n, r = 2e-3, 10, 110, 0.1
    cos = optim.make_schedule(_opt(learning_rate=lr, warmup_steps=w, min_lr_ratio=r), n)
    lin = optim.make_schedule(
        _opt(schedule="warmup_linear", learning_rate=lr, warmup_steps=w, min_lr_ratio=r), n
    )
    for s in (0, 5, 10, 35, 60, 110, 200):
        warm = lr * s / w
        frac = min((s - w) / (n - w), 1.0)
        cos_ref = warm if s < w else r * lr + (lr - r * lr) * 0.5 * (1 + math.cos(math.pi * frac))
        lin_ref = warm if s < w else lr + (r * lr - lr) * frac
        assert float(cos(s)) == pytest.approx(cos_ref, rel=1e-5), s
        assert float(lin(s)) == pytest.approx(lin_ref, rel=1e-5), s


def test_constant_values():
    sched = optim.make_schedule(_opt(schedule="constant", learning_rate=3e-4, warmup_steps=4), 50)
    assert [float(sched(s)) for s in (0, 2, 4, 49)] == pytest.approx([0, 1.5e-4, 3e-4, 3e-4])
    flat = optim.make_schedule(_opt(schedule="constant", learning_rate=3e-4, warmup_steps=0), 50)
    assert float(flat(0)) == pytest.approx(3e-4)


def test_rsqrt_is_lras_constant_linear_warmup_rsqrt_decay():
    """LRA ListOps: 0.05 * min(1, step / 1000) / sqrt(max(step, 1000))."""
    sched = optim.make_schedule(_opt(schedule="rsqrt", learning_rate=0.05, warmup_steps=1000), 5000)
    for s in (0, 1, 500, 1000, 2000, 4999):
        ref = 0.05 * min(1.0, s / 1000) / math.sqrt(max(s, 1000))
        assert float(sched(s)) == pytest.approx(ref, rel=1e-5), s
    assert float(sched(1000)) == pytest.approx(0.05 / math.sqrt(1000), rel=1e-5)


def test_inverse_sqrt_is_vaswani_eq_5_3():
    """lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), d_model 512, warmup 4000."""
    d, w = 512, 4000
    sched = optim.make_schedule(
        _opt(schedule="inverse_sqrt", learning_rate=(d * w) ** -0.5, warmup_steps=w), 100_000
    )
    for s in (1, 100, 3999, 4000, 4001, 20_000, 100_000):
        ref = d**-0.5 * min(s**-0.5, s * w**-1.5)
        assert float(sched(s)) == pytest.approx(ref, rel=1e-5), s
    assert float(sched(0)) == 0.0


# ------------------------------------------------------------------ weight-decay masks


def _mask_by_path(mask_fn, params) -> dict:
    flat = jax.tree_util.tree_flatten_with_path(mask_fn(params))[0]
    return {"/".join(str(getattr(e, "key", e)) for e in path): bool(v) for path, v in flat}


def test_matrices_mask_excludes_biases_norms_xl_u_v_and_cls():
    got = _mask_by_path(optim.decay_mask("matrices"), _params())
    decayed = {p for p, v in got.items() if v}
    assert decayed == {
        "embed/embedding",
        "block_0/attention/query/kernel",
        "block_0/dense/kernel",
    }, got  # r_w_bias / r_r_bias are [H, D] but are biases (Dai et al. 2019 u, v)


def test_all_and_none_masks():
    params = _params()
    assert optim.decay_mask("all") is None  # optax: every leaf
    assert not any(_mask_by_path(optim.decay_mask("none"), params).values())


def test_matrices_mask_on_boxed_model_params_and_real_names():
    """On a real model's (logically boxed) parameters: every kernel/embedding decayed,
    no bias/scale."""
    from seqjax.models import TransformerLM

    cfg = TransformerConfig(vocab_size=11, num_layers=1, num_heads=2, d_model=8, max_len=16,
                            positional="learned", causal=True)  # fmt: skip
    init = jax.jit(TransformerLM(cfg).init)
    boxed = init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))["params"]
    flat = jax.tree_util.tree_flatten_with_path(optim.decay_mask("matrices")(boxed))[0]
    names = {}
    for path, v in flat:
        name = optim._leaf_name(path)
        names.setdefault(name, set()).add(bool(v))
    assert names["kernel"] == {True} and names["embedding"] == {True}
    assert names["pos_embed"] == {True}
    assert names["bias"] == {False} and names["scale"] == {False}
    assert isinstance(jax.tree.leaves(boxed, is_leaf=lambda x: isinstance(x, nn.Partitioned))[0],
                      nn.Partitioned)  # fmt: skip


# ------------------------------------------------------------------ validation, header


INVALID = [
    ({"name": "rmsprop"}, "config.optimizer.name='rmsprop'", "adamw, adam, adafactor, sgd, lamb"),
    ({"schedule": "step"}, "config.optimizer.schedule='step'", "rsqrt, inverse_sqrt"),
    ({"weight_decay_mask": "vectors"}, "config.optimizer.weight_decay_mask", "matrices, all"),
    ({"name": "adam", "weight_decay": 0.01}, "config.optimizer.weight_decay=0.01", "adamw"),
    ({"weight_decay_mask": "none"}, "config.optimizer.weight_decay=0.01", 'mask="none"'),
    ({"schedule": "rsqrt", "warmup_steps": 0}, "config.optimizer.warmup_steps=0", ">= 1"),
    ({"name": "sgd", "momentum": 0.0, "nesterov": True}, "config.optimizer.nesterov", "momentum"),
    ({"momentum": 1.5}, "config.optimizer.momentum=1.5", "0 <= momentum < 1"),
    (
        {"name": "adafactor", "adafactor_decay_rate": 0.0},
        "config.optimizer.adafactor.decay_rate=0.0",
        "0 < rate <= 1",
    ),
]


@pytest.mark.parametrize("fields,field_text,valid_text", INVALID, ids=[str(c[0]) for c in INVALID])
def test_invalid_optimizer_fields_get_one_clear_message(fields, field_text, valid_text):
    config = ml_collections.ConfigDict({"optimizer": _opt(**fields)})
    errors = optim.validate_optimizer(config)
    assert len(errors) == 1, errors
    assert field_text in errors[0] and "valid:" in errors[0] and valid_text in errors[0], errors


def test_make_optimizer_refuses_an_invalid_block():
    """Scripts that build an optimizer without config_validation get the same message."""
    with pytest.raises(ValueError, match=r"config.optimizer.weight_decay=0.01.*adamw"):
        optim.make_optimizer(_opt(name="adam"), 10)


def test_config_validation_reports_optimizer_fields(helpers, corpus):
    config = helpers.tiny_config(corpus)
    config.optimizer.name = "adagrad"
    with pytest.raises(config_validation.ConfigError) as e:
        config_validation.validate(config, num_devices=1, process_count=1)
    assert "config.optimizer.name='adagrad'" in str(e.value)
    assert str(e.value).count("\n  - ") == 1


def test_valid_options_pass_validation():
    for name in optim.NAMES:
        for schedule in optim.SCHEDULES:
            fields = {"name": name, "schedule": schedule}
            if name == "adam":
                fields["weight_decay"] = 0.0
            config = ml_collections.ConfigDict({"optimizer": _opt(**fields)})
            assert optim.validate_optimizer(config) == [], fields


def test_configs_without_the_new_fields_build_the_default():
    """A config.json written before these fields existed still builds (AdamW, cosine)."""
    old = ml_collections.ConfigDict(
        {k: v for k, v in defaults.optimizer().items() if k in
         ("learning_rate", "warmup_steps", "min_lr_ratio", "b1", "b2", "eps", "weight_decay",
          "grad_clip_norm", "grad_accum_steps")}
    )  # fmt: skip
    tx_old, _ = optim.make_optimizer(old, 200)
    tx_new, _ = optim.make_optimizer(_opt(), 200)
    _assert_same(_updates(tx_old, _params()), _updates(tx_new, _params()))
    assert optim.validate_optimizer(ml_collections.ConfigDict({"optimizer": old})) == []


def test_describe_names_the_optimizer_schedule_and_mask(caplog):
    opt = _opt(name="lamb", schedule="rsqrt", learning_rate=0.05, warmup_steps=1000,
               weight_decay=0.1, weight_decay_mask="all")  # fmt: skip
    text = optim.describe(opt, 5000)
    assert text.startswith("lamb(") and "rsqrt(constant 0.05, warmup 1000" in text
    assert "weight_decay=0.1 on all" in text and "clip global norm 1" in text
    with caplog.at_level("INFO"):
        optim.make_optimizer(_opt(name="adam", weight_decay=0.0), 10)
    assert any("optimizer: adam(" in r.getMessage() for r in caplog.records)


# ------------------------------------------------------------------ real runs (issue 28)


def _run_steps(config, n: int = 3):
    """``n`` train steps of the job ``config`` (the real data, model, optimizer and mesh):
    the losses and the final state."""
    from seqjax import data as data_lib
    from seqjax.train import setup, sharding
    from seqjax.train import step as step_lib

    run = setup.build(config)
    fn = step_lib.make_train_step(
        run.model, run.task, run.tx, run.schedule, accum_steps=1, mesh=run.mesh
    )
    train_step = step_lib.jit_train_step(fn, run.shardings, run.mesh)
    it = data_lib.make(config.data, split="train", train=True)
    state_, losses = run.init(), []
    with sharding.rules_and_mesh(run.mesh):
        for _ in range(n):
            state_, metrics = train_step(state_, sharding.global_batch(next(it), run.mesh))
            losses.append(float(metrics["loss"]))
    it.close()
    return run, losses, state_


@pytest.mark.parametrize(
    "name",
    # ~12 s each on 2 cores: adafactor (the bug) in the fast set, the others slow.
    [n if n == "adafactor" else pytest.param(n, marks=pytest.mark.slow) for n in optim.NAMES],
)
def test_every_optimizer_trains_the_smoke_model_on_one_and_eight_fsdp_devices(
    helpers, corpus, name
):
    """Issue 28: adafactor ended in IndexError in sharding._mesh_spec (its factored moments
    inherited their matrix's rank-2 logical spec). Every optimizer runs real steps of the
    smoke model on one device and on fsdp=8 (Adafactor factoring every matrix), and both give
    the same finite losses."""
    extra = {"optimizer.name": name, "optimizer.weight_decay": 0.0 if name == "adam" else 0.01}
    if name == "adafactor":
        extra["optimizer.adafactor.min_dim_size_to_factor"] = 8  # factor every matrix here
    _, one, _ = _run_steps(helpers.tiny_config(corpus, **extra))
    run, eight, final = _run_steps(
        helpers.tiny_config(corpus, **extra, **{"mesh.data": 1, "mesh.fsdp": 8})
    )
    assert np.isfinite(one).all() and one[-1] < one[0]
    np.testing.assert_allclose(eight, one, rtol=2e-5)
    # Every optimizer-state leaf is placed with a spec of its own rank.
    for leaf in jax.tree.leaves(final["opt_state"]):
        assert len(leaf.sharding.spec) <= leaf.ndim


def test_factored_moments_are_sharded_along_the_dimension_they_keep(helpers, corpus):
    """Adafactor's row/column second moments of an ``(embed, mlp)`` kernel: the one that keeps
    ``embed`` is split over fsdp like its matrix; the placeholders are replicated."""
    from jax.sharding import PartitionSpec as P

    from seqjax.train import setup

    config = helpers.tiny_config(
        corpus,
        **{
            "optimizer.name": "adafactor",
            "optimizer.adafactor.min_dim_size_to_factor": 8,
            "mesh.data": 1,
            "mesh.fsdp": 8,
        },
    )
    run = setup.build(config)
    factored = run.abstract["opt_state"][-1][0]  # chain(clip, adafactor): its first state
    up = ("encoder", "block_0", "mlp", "core", "up", "kernel")

    def at(tree):
        for key in up:
            tree = tree[key]
        return tree

    kernel = at(run.abstract["params"])  # [embed=32, mlp=128]
    assert kernel.shape == (32, 128) and kernel.sharding.spec == P("fsdp", "tensor")
    v_row, v_col, v = at(factored.v_row), at(factored.v_col), at(factored.v)
    assert v_row.shape == (32,) and v_row.sharding.spec == P("fsdp")  # keeps embed
    assert v_col.shape == (128,) and v_col.sharding.spec == P("tensor")  # keeps mlp
    assert v.shape == (1,) and v.sharding.spec == P(None)  # unfactored placeholder


@pytest.mark.parametrize(
    "names,param_shape,shape,field,want",
    [
        (("embed", "mlp"), (32, 128), (32,), "v_row", ("embed",)),
        (("embed", "mlp"), (32, 128), (128,), "v_col", ("mlp",)),
        (("embed", "heads", "kv"), (64, 4, 16), (4, 16), "v_row", ("heads", "kv")),
        (("embed", "heads", "kv"), (64, 4, 16), (64, 4), "v_col", ("embed", "heads")),
        # Equal sizes: optax's rule (argsort: d1 = 0, d0 = 1) decides which one was dropped.
        (("embed", "mlp"), (64, 64), (64,), "v_row", ("embed",)),
        (("embed", "mlp"), (64, 64), (64,), "v_col", ("mlp",)),
        (("embed", "mlp"), (64, 64), (1,), "v", (None,)),
        (("embed", "mlp"), (64, 64), (64, 64), "mu", ("embed", "mlp")),
    ],
)
def test_fitted_names(names, param_shape, shape, field, want):
    assert state._fitted_names(names, param_shape, shape, field) == want
