"""The pure train and eval steps (jitted once by the loop with explicit shardings).

Legend: B global batch, K accumulation micro-steps.

What a batch holds, how the model is applied to it and which sums it gives are the task's
(``seqjax.tasks``: ``check_batch``, ``batch_sums``, ``train_metrics``); the steps here only
accumulate, differentiate and update, the same for every task.

Recurrent models (``seqjax.models.memory``; Transformer-XL, Dai et al. 2019, §3.2): the
state's ``memory`` goes into the model with the segment and the model's new memory replaces
it in the new state; the memory is reset (emptied) whenever the contiguous training streams
start over, since the text before the new segment is then not the text the memory holds.
A model without memory takes the same path with ``memory=None``.

Loss: the task's weighted sum over the whole global batch divided by the total weight,
``sum_i w_i * loss_i / sum_i w_i`` (``weights`` are 0 on padding), so gradient
accumulation and any sharding give the same mean as one big batch.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from seqjax import tasks
from seqjax.models import memory as memory_lib
from seqjax.train import sharding


def _microbatches(batch, k: int, mesh):
    """``[B, ...]`` -> ``[K, B/K, ...]`` with micro-batch i = rows i, i+K, i+2K, ...

    Taking strided rows keeps every micro-batch spread over all data-parallel devices (each
    device already holds a contiguous block of B / dp rows).
    """

    def split(x):
        x = x.reshape((x.shape[0] // k, k) + x.shape[1:]).swapaxes(0, 1)
        spec = jax.sharding.PartitionSpec(None, ("data", "fsdp"))
        return jax.lax.with_sharding_constraint(x, jax.sharding.NamedSharding(mesh, spec))

    return jax.tree.map(split, batch)


def make_train_step(
    model, task, tx, schedule, *, accum_steps: int, mesh, epoch_steps: int | None = None
):
    """Returns ``train_step(state, batch) -> (state, metrics)`` (pure; jit it).

    ``task`` is a ``seqjax.tasks.Task`` or a registered name. Metrics (float32 scalars): the
    task's ``train_metrics`` (loss, accuracy for the LM and the classifier), grad_norm,
    param_norm, learning_rate, weight_sum (tokens or examples that counted), and ``finite``
    (1.0 when the loss, the gradients and the new parameters are all finite).

    A state with ``'memory'`` (a recurrent model) is threaded through ``model.apply``; the
    memory is emptied at steps that are multiples of ``epoch_steps`` (the streams restart).
    """

    task = tasks.get(task)

    def train_step(state, batch):
        task.check_batch(batch)  # at trace time: before anything compiles
        params, step = state["params"], state["step"]
        # Dropout key folded from the step: a resumed run draws the same masks.
        step_rng = jax.random.fold_in(state["rng"], step)
        total_w = jnp.maximum(batch["weights"].astype(jnp.float32).sum(), 1.0)
        memory = state.get("memory")
        if memory is not None:
            if accum_steps != 1:
                raise ValueError("a model with memory needs optimizer.grad_accum_steps=1")
            if epoch_steps:
                memory = memory_lib.reset(memory, step % epoch_steps == 0)

        def loss_of(p, mb, rng):
            sums, new_memory = task.batch_sums(model, p, mb, rng=rng, train=True, memory=memory)
            return sums["loss_sum"] / total_w, (sums, new_memory)

        grad_fn = jax.value_and_grad(loss_of, has_aux=True)
        if accum_steps == 1:
            (_, (sums, new_memory)), grads = grad_fn(params, batch, step_rng)
        else:
            new_memory = None

            def body(carry, xs):
                i, mb = xs
                (_, (s, _)), g = grad_fn(params, mb, jax.random.fold_in(step_rng, i))
                return jax.tree.map(jnp.add, carry, (g, s)), None

            zeros = (jax.tree.map(jnp.zeros_like, params), task.zero_sums())
            xs = (jnp.arange(accum_steps), _microbatches(batch, accum_steps, mesh))
            (grads, sums), _ = jax.lax.scan(body, zeros, xs)
        with jax.named_scope("optimizer"):
            updates, opt_state = tx.update(grads, state["opt_state"], params)
            new_params = optax.apply_updates(params, updates)
        with jax.named_scope("metrics"):
            grad_norm = optax.tree.norm(grads)
            param_norm = optax.tree.norm(new_params)
        loss = sums["loss_sum"] / total_w
        metrics = {
            **task.train_metrics(sums, total_w),
            "grad_norm": grad_norm,
            "param_norm": param_norm,
            "learning_rate": jnp.asarray(schedule(step), jnp.float32),
            "weight_sum": sums["weight_sum"],
            "finite": jnp.isfinite(loss + grad_norm + param_norm).astype(jnp.float32),
        }
        new_state = {
            "params": new_params,
            "opt_state": opt_state,
            "step": step + 1,
            "rng": state["rng"],
        }
        if new_memory is not None:
            new_state["memory"] = new_memory
        return new_state, metrics

    return train_step


def make_eval_step(model, task):
    """Returns ``eval_step(params, sums, memory, batch) -> (sums, new_memory)``: the task's
    sums (``seqjax.tasks.Task.sum_keys``) added to the running ``sums``; ``memory`` is None
    for a model without memory, else carried by the caller from batch to batch (a stream).

    The running sums go through the jitted step, so an evaluation is one identical program
    per batch on every process: no eager array op between steps that one process could run
    while another is already inside the next step's collectives.
    """
    task = tasks.get(task)

    def eval_step(params, sums, memory, batch):
        task.check_batch(batch)  # at trace time
        new, new_memory = task.batch_sums(model, params, batch, rng=None, train=False,
                                          memory=memory)  # fmt: skip
        return {k: sums[k] + new[k] for k in task.sum_keys}, new_memory

    return eval_step


def jit_train_step(train_step, state_shardings, mesh):
    """``jax.jit`` with explicit in/out shardings; the input state is donated."""
    batch_sh = sharding.batch_sharding(mesh)
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    return jax.jit(
        train_step,
        in_shardings=(state_shardings, batch_sh),
        out_shardings=(state_shardings, replicated),
        donate_argnums=0,
    )


def jit_eval_step(eval_step, params_shardings, memory_shardings, mesh):
    """Jits ``make_eval_step``'s function; the running sums (replicated) and the memory
    (``memory_shardings``, None without memory) are donated."""
    batch_sh = sharding.batch_sharding(mesh)
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    return jax.jit(
        eval_step,
        in_shardings=(params_shardings, replicated, memory_shardings, batch_sh),
        out_shardings=(replicated, memory_shardings),
        donate_argnums=(1, 2),
    )
