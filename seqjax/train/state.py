"""The train state, created already sharded.

The train state is a plain dict ``{'params', 'opt_state', 'step', 'rng'}`` (big_vision /
nanodo style): ``step`` is the number of optimizer updates applied, ``rng`` the run's base
key from which every step folds its dropout key (so a resumed run draws the same masks).
A recurrent model's state also holds ``'memory'`` (``seqjax.models.memory``; for
Transformer-XL ``(mems, valid_BM)``, the ``num_layers + 1`` hidden-state memories
``[B, M, E]`` and their validity mask, Dai et al. 2019 §3.2), sharded over the batch like
the batches, so checkpoints save it and a resumed run continues with it.

Model construction is ``seqjax.tasks.model_build`` (the task's ``model_config`` /
``build_model``); optimizer and schedule ``seqjax.train.optim``.

Legend: B global batch, M memory length, E model width.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from seqjax.train import sharding
from seqjax.train.optim import make_optimizer, make_schedule  # noqa: F401 (re-exported)


def init_fn(model, tx, input_shape, seed: int, memory_batch: int = 0):
    """A function ``() -> state`` whose parameters (and Adam moments) are logically boxed.

    ``input_shape``: the shape of the int32 dummy input of ``model.init``, or a tuple of
    such shapes, one per positional input (an encoder-decoder's source and target).
    ``memory_batch`` > 0 (a recurrent model): the state also holds the empty memory of
    that many rows (``model.init_memory``).
    """

    def init():
        params_rng, train_rng = jax.random.split(jax.random.PRNGKey(seed))
        shapes = input_shape if isinstance(input_shape[0], tuple | list) else (input_shape,)
        inputs = [jnp.zeros(tuple(shape), jnp.int32) for shape in shapes]
        params = model.init({"params": params_rng}, *inputs)["params"]
        state = {
            "params": params,
            "opt_state": tx.init(params),
            "step": jnp.zeros((), jnp.int32),
            "rng": train_rng,
        }
        if memory_batch:
            state["memory"] = model.init_memory(memory_batch)
        return state

    return init


def _is_box(x) -> bool:
    return isinstance(x, nn.LogicallyPartitioned)


def _param_path(path) -> tuple:
    """The parameter path inside an optimizer-state path: its trailing dict keys."""
    keys = []
    for entry in reversed(path):
        if not isinstance(entry, jax.tree_util.DictKey):
            break
        keys.append(entry.key)
    return tuple(reversed(keys))


def _fitted_names(names: tuple, param_shape: tuple, shape: tuple, field: str | None) -> tuple:
    """Logical names for an optimizer-state leaf of ``shape`` derived from a parameter.

    * same rank as the parameter: the parameter's names;
    * one dimension fewer (a factored second moment, Shazeer & Stern 2018 §3): the names of
      the dimensions it keeps. Which dimension was reduced is read off the shapes; when two
      dimensions have the same size, ``optax.adafactor``'s rule decides (the two largest
      dimensions ``d1, d0 = argsort(shape)[-2:]``; ``v_row`` drops ``d0``, ``v_col``
      drops ``d1``);
    * anything else (the ``[1]`` placeholders of unfactored leaves): replicated.
    """
    if len(shape) == len(names):
        return names
    if len(shape) == len(param_shape) - 1:
        fits = [
            i for i in range(len(param_shape)) if param_shape[:i] + param_shape[i + 1 :] == shape
        ]
        kept = {i: names[:i] + names[i + 1 :] for i in fits}
        if len(set(kept.values())) == 1:
            return next(iter(kept.values()))
        if field in ("v_row", "v_col") and len(param_shape) >= 2:
            d1, d0 = (int(x) for x in np.argsort(param_shape)[-2:])
            dropped = d0 if field == "v_row" else d1
            if dropped in kept:
                return kept[dropped]
    return (None,) * len(shape)


def fit_optimizer_specs(abstract_boxed: dict) -> dict:
    """``abstract_boxed`` with every optimizer-state box's logical names fitted to its shape.

    Optimizers copy their parameter's box onto every state leaf they derive from it, so a
    factored Adafactor moment (a row or column vector of a matrix) arrived with the
    matrix's rank-2 names, which no sharding rule can place. Each leaf now gets names of
    its own rank (``_fitted_names``): a factored moment is sharded along the dimension it
    keeps, a placeholder is replicated, and a full-shape moment keeps its parameter's names.
    """
    if "opt_state" not in abstract_boxed:
        return abstract_boxed
    params = {
        _param_path(path): box
        for path, box in jax.tree_util.tree_flatten_with_path(
            abstract_boxed["params"], is_leaf=_is_box
        )[0]
        if _is_box(box)
    }

    def fit(path, leaf):
        if not _is_box(leaf):
            return leaf
        names, shape = tuple(leaf.names), tuple(leaf.value.shape)
        param = params.get(_param_path(path))
        if len(names) == len(shape) or param is None:
            new = names if len(names) == len(shape) else (None,) * len(shape)
        else:
            fields = [p.name for p in path if isinstance(p, jax.tree_util.GetAttrKey)]
            field = fields[-1] if fields else None
            new = _fitted_names(names, tuple(param.value.shape), shape, field)
        return dataclasses.replace(leaf, names=new)

    opt_state = jax.tree_util.tree_map_with_path(fit, abstract_boxed["opt_state"], is_leaf=_is_box)
    return {**abstract_boxed, "opt_state": opt_state}


def memory_shardings(memory, mesh):
    """Every memory leaf (``[B, ...]``) split over the batch like a batch."""
    return jax.tree.map(lambda _: sharding.batch_sharding(mesh), memory)


def create_state(model, tx, input_shape, seed: int, mesh, memory_batch: int = 0):
    """Creates the train state already sharded: ``eval_shape`` -> shardings -> jitted init.

    Returns:
      ``(abstract_state, shardings, init)``: the unboxed abstract state (ShapeDtypeStructs
      carrying their shardings, for restoring), its NamedShardings, and a jitted
      ``init() -> state`` whose outputs are born on their devices.
    """
    boxed_init = init_fn(model, tx, input_shape, seed, memory_batch)
    # Outside the rules context: Flax would constrain DenseGeneral's flat kernel mid-init.
    abstract_boxed = fit_optimizer_specs(jax.eval_shape(boxed_init))
    shardings = sharding.state_shardings(abstract_boxed, mesh)
    if memory_batch:
        shardings["memory"] = memory_shardings(abstract_boxed["memory"], mesh)
    abstract = jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
        nn.unbox(abstract_boxed),
        shardings,
    )
    init = jax.jit(lambda: nn.unbox(boxed_init()), out_shardings=shardings)
    return abstract, shardings, init
