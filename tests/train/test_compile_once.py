"""Guard rails: the train step compiles once, Transformer-XL's included while its memory
fills from empty and when it is reset, and it runs under ``jax.transfer_guard("disallow")``
(no implicit host <-> device transfer in the loop body) on 8 fake CPU devices.

Legend: B batch, M memory length.
"""

from __future__ import annotations

import chex
import jax
import numpy as np
import pytest

from seqjax import data as data_lib
from seqjax.train import setup, sharding
from seqjax.train import step as step_lib

XL = {
    "model.kind": "transformer_xl",
    "model.mem_len": 32,  # two 16-token segments to fill
    "model.attention": "relative",
    "model.positional": "none",
    "data.lm_batching": "stream",
    "data.seq_len": 16,
}


def _steps(config, n: int):
    """``n`` train steps traced at most once, under the transfer guard: the states after
    each step and the jitted step."""
    run = setup.build(config)
    fn = step_lib.make_train_step(
        run.model, run.task, run.tx, run.schedule, accum_steps=1, mesh=run.mesh,
        epoch_steps=run.epoch_steps,
    )  # fmt: skip
    train_step = step_lib.jit_train_step(chex.assert_max_traces(fn, n=1), run.shardings, run.mesh)
    it = data_lib.make(config.data, split="train", train=True)
    state, states = run.init(), []
    with sharding.rules_and_mesh(run.mesh), jax.transfer_guard("disallow"):
        for _ in range(n):
            state, _ = train_step(state, sharding.global_batch(next(it), run.mesh))
            states.append(jax.device_get(state.get("memory")))
    it.close()
    return run, states, train_step


@pytest.mark.parametrize(
    "mesh",
    [
        {"mesh.data": 1},
        # The sharded case takes ~35 s on 2 cores: in the slow set.
        pytest.param({"mesh.data": 4, "mesh.tensor": 2}, marks=pytest.mark.slow),
    ],
)
def test_xl_train_step_compiles_once_while_memory_fills_and_resets(helpers, corpus, mesh):
    chex.clear_trace_counter()
    config = helpers.tiny_config(corpus, **{**XL, **mesh})
    config.model.attention_options = {"relative": {}}
    run, memories, train_step = _steps(config, 4)
    assert run.epoch_steps and run.epoch_steps > 4
    valid_BM = [np.asarray(m[1]) for m in memories]  # after steps 1..4
    assert valid_BM[0].mean() == 0.5 and valid_BM[1].all()  # half full, then full
    assert train_step._cache_size() == 1  # one executable for empty, filling and full
    # A reset (the streams start over) is the same program too.
    fn_reset = step_lib.make_train_step(
        run.model, run.task, run.tx, run.schedule, accum_steps=1, mesh=run.mesh, epoch_steps=2
    )
    chex.clear_trace_counter()
    jitted = step_lib.jit_train_step(chex.assert_max_traces(fn_reset, n=1), run.shardings, run.mesh)
    it = data_lib.make(config.data, split="train", train=True)
    state = run.init()
    with sharding.rules_and_mesh(run.mesh), jax.transfer_guard("disallow"):
        for _ in range(3):
            state, _ = jitted(state, sharding.global_batch(next(it), run.mesh))
    it.close()
    # Steps 0 and 2 reset: after step 3 the memory holds one segment (half valid).
    assert np.asarray(jax.device_get(state["memory"][1])).mean() == 0.5
    assert jitted._cache_size() == 1


def test_lm_train_step_compiles_once(helpers, corpus):
    chex.clear_trace_counter()
    config = helpers.tiny_config(corpus, **{"mesh.data": 8})
    _, _, train_step = _steps(config, 3)
    assert train_step._cache_size() == 1
