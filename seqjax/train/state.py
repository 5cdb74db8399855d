"""Model, optimizer and the train state, created already sharded.

The train state is a plain dict ``{'params', 'opt_state', 'step', 'rng'}`` (big_vision /
nanodo style): ``step`` is the number of optimizer updates applied, ``rng`` the run's base
key from which every step folds its dropout key (so a resumed run draws the same masks).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from seqjax.models import TransformerClassifier, TransformerConfig, TransformerLM
from seqjax.models.transformer import attention_cycle
from seqjax.train import sharding


def model_config(config, info) -> TransformerConfig:
    """``TransformerConfig`` from ``config.model`` and the data's ``DataInfo``."""
    m = config.model
    lm = info.task == "lm"
    return TransformerConfig(
        vocab_size=info.vocab_size,
        num_layers=m.num_layers,
        num_heads=m.num_heads,
        d_model=m.d_model,
        head_dim=m.head_dim,
        d_ff=m.d_ff,
        max_len=m.max_len,
        dropout_rate=m.dropout_rate,
        attention_dropout_rate=m.attention_dropout_rate,
        attention=attention_cycle(m.attention, m.attention_options),
        positional=m.positional,
        tie_embeddings=m.tie_embeddings,
        dtype=m.dtype,
        ff_chunk_size=m.ff_chunk_size,
        remat=m.remat,
        reversible=m.reversible,
        causal=lm,
        num_classes=0 if lm else int(info.num_classes),
        pooling=m.pooling,
        pad_id=info.pad_id,
    )


def make_model(cfg: TransformerConfig, task: str, *, decode: bool = False) -> nn.Module:
    """``TransformerLM`` for task 'lm', ``TransformerClassifier`` for 'classification'."""
    if task == "lm":
        return TransformerLM(cfg, decode=decode)
    return TransformerClassifier(cfg)


def make_schedule(opt, num_steps: int):
    """Linear warm-up from 0 to ``learning_rate`` then cosine decay to
    ``learning_rate * min_lr_ratio`` at ``num_steps`` (Loshchilov & Hutter 2017)."""
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=opt.learning_rate,
        warmup_steps=opt.warmup_steps,
        decay_steps=max(num_steps, opt.warmup_steps + 1),
        end_value=opt.learning_rate * opt.min_lr_ratio,
    )


def _decay_mask(params):
    """Weight decay on matrices only (not biases, LayerNorm scales or the CLS vector)."""
    return jax.tree.map(lambda x: x.ndim >= 2, params)


def make_optimizer(opt, num_steps: int):
    """Global-norm clipping followed by AdamW (Loshchilov & Hutter 2019) on the schedule.

    Returns:
      ``(optax.GradientTransformation, schedule)``.
    """
    schedule = make_schedule(opt, num_steps)
    adamw = optax.adamw(
        schedule,
        b1=opt.b1,
        b2=opt.b2,
        eps=opt.eps,
        weight_decay=opt.weight_decay,
        mask=_decay_mask,
    )
    clip = optax.clip_by_global_norm(opt.grad_clip_norm) if opt.grad_clip_norm > 0 else None
    tx = optax.chain(clip, adamw) if clip is not None else adamw
    return tx, schedule


def init_fn(model, tx, input_shape, seed: int):
    """A function ``() -> state`` whose parameters (and Adam moments) are logically boxed."""

    def init():
        params_rng, train_rng = jax.random.split(jax.random.PRNGKey(seed))
        tokens = jnp.zeros(input_shape, jnp.int32)
        params = model.init({"params": params_rng}, tokens)["params"]
        return {
            "params": params,
            "opt_state": tx.init(params),
            "step": jnp.zeros((), jnp.int32),
            "rng": train_rng,
        }

    return init


def create_state(model, tx, input_shape, seed: int, mesh):
    """Creates the train state already sharded: ``eval_shape`` -> shardings -> jitted init.

    Returns:
      ``(abstract_state, shardings, init)``: the unboxed abstract state (ShapeDtypeStructs
      carrying their shardings, for restoring), its NamedShardings, and a jitted
      ``init() -> state`` whose outputs are born on their devices.
    """
    boxed_init = init_fn(model, tx, input_shape, seed)
    # Outside the rules context: Flax would constrain DenseGeneral's flat kernel mid-init.
    abstract_boxed = jax.eval_shape(boxed_init)
    shardings = sharding.state_shardings(abstract_boxed, mesh)
    abstract = jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
        nn.unbox(abstract_boxed),
        shardings,
    )
    init = jax.jit(lambda: nn.unbox(boxed_init()), out_shardings=shardings)
    return abstract, shardings, init


def count_params(params) -> int:
    return sum(int(x.size) for x in jax.tree.leaves(params))
