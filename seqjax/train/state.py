"""The train state, created already sharded.

The train state is a plain dict ``{'params', 'opt_state', 'step', 'rng'}`` (big_vision /
nanodo style): ``step`` is the number of optimizer updates applied, ``rng`` the run's base
key from which every step folds its dropout key (so a resumed run draws the same masks).
A recurrent model's state also holds ``'memory'`` (``seqjax.models.memory``; for
Transformer-XL ``(mems, valid_BM)``, the ``num_layers + 1`` hidden-state memories
``[B, M, E]`` and their validity mask, Dai et al. 2019 §3.2), sharded over the batch like
the batches, so checkpoints save it and a resumed run continues with it.

Model construction is ``seqjax.models.from_config``; optimizer and schedule
``seqjax.train.optim``.

Legend: B global batch, M memory length, E model width.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from seqjax.models.from_config import make_model, model_config  # noqa: F401 (re-exported)
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
    abstract_boxed = jax.eval_shape(boxed_init)
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
