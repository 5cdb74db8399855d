"""The pure train and eval steps (jitted once by the loop with explicit shardings).

Legend: B global batch, K accumulation micro-steps, T sequence length, V vocabulary,
C classes.

Loss: token-weighted cross-entropy, ``sum_i w_i * CE_i / sum_i w_i`` over the whole global
batch (``weights`` are 0 on padding), so gradient accumulation and any sharding give the
same mean as one big batch.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from seqjax.train import sharding


def _sums(model, task, params, batch, rng, train: bool):
    """Weighted sums of the loss and of correct predictions, and the weight total."""
    kwargs = {"deterministic": not train}
    rngs = {"dropout": rng} if train else {}
    logits = model.apply({"params": params}, batch["inputs"], rngs=rngs, **kwargs)
    # LM: logits [B, T, V] vs targets [B, T]; classifier: logits [B, C] vs targets [B].
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch["targets"])
    w = batch["weights"].astype(jnp.float32)
    correct = (jnp.argmax(logits, -1) == batch["targets"]).astype(jnp.float32)
    return {"loss_sum": (ce * w).sum(), "correct_sum": (correct * w).sum(), "weight_sum": w.sum()}


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


def make_train_step(model, task: str, tx, schedule, *, accum_steps: int, mesh):
    """Returns ``train_step(state, batch) -> (state, metrics)`` (pure; jit it).

    Metrics (float32 scalars): loss, accuracy, grad_norm, param_norm, learning_rate,
    weight_sum (tokens or examples that counted), and ``finite`` (1.0 when the loss, the
    gradients and the new parameters are all finite).
    """

    def train_step(state, batch):
        params, step = state["params"], state["step"]
        # Dropout key folded from the step: a resumed run draws the same masks.
        step_rng = jax.random.fold_in(state["rng"], step)
        total_w = jnp.maximum(batch["weights"].astype(jnp.float32).sum(), 1.0)

        def loss_of(p, mb, rng):
            sums = _sums(model, task, p, mb, rng, train=True)
            return sums["loss_sum"] / total_w, sums

        grad_fn = jax.value_and_grad(loss_of, has_aux=True)
        if accum_steps == 1:
            (_, sums), grads = grad_fn(params, batch, step_rng)
        else:

            def body(carry, xs):
                i, mb = xs
                (_, s), g = grad_fn(params, mb, jax.random.fold_in(step_rng, i))
                return jax.tree.map(jnp.add, carry, (g, s)), None

            zeros = (
                jax.tree.map(jnp.zeros_like, params),
                {k: jnp.zeros((), jnp.float32) for k in ("loss_sum", "correct_sum", "weight_sum")},
            )
            xs = (jnp.arange(accum_steps), _microbatches(batch, accum_steps, mesh))
            (grads, sums), _ = jax.lax.scan(body, zeros, xs)
        updates, opt_state = tx.update(grads, state["opt_state"], params)
        new_params = optax.apply_updates(params, updates)
        grad_norm = optax.tree.norm(grads)
        param_norm = optax.tree.norm(new_params)
        loss = sums["loss_sum"] / total_w
        metrics = {
            "loss": loss,
            "accuracy": sums["correct_sum"] / total_w,
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
        return new_state, metrics

    return train_step


def make_eval_step(model, task: str):
    """Returns ``eval_step(params, batch) -> sums`` (loss_sum, correct_sum, weight_sum)."""

    def eval_step(params, batch):
        return _sums(model, task, params, batch, None, train=False)

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


def jit_eval_step(eval_step, params_shardings, mesh):
    batch_sh = sharding.batch_sharding(mesh)
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    return jax.jit(eval_step, in_shardings=(params_shardings, batch_sh), out_shardings=replicated)
