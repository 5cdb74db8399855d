"""Model, optimizer and the train state, created already sharded.

The train state is a plain dict ``{'params', 'opt_state', 'step', 'rng'}`` (big_vision /
nanodo style): ``step`` is the number of optimizer updates applied, ``rng`` the run's base
key from which every step folds its dropout key (so a resumed run draws the same masks).
A Transformer-XL state also holds ``'memory'``: ``(mems, valid_BM)``, the ``num_layers + 1``
hidden-state memories ``[B, M, E]`` and their validity mask (Dai et al. 2019, §3.2), sharded
over the batch like the batches, so checkpoints save it and a resumed run continues with it.

Legend: B global batch, M memory length, E model width.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from seqjax.models import TransformerClassifier, TransformerConfig, TransformerLM
from seqjax.models.transformer import attention_cycle
from seqjax.models.transformer_xl import TransformerXL
from seqjax.train import sharding
from seqjax.train.optim import make_optimizer, make_schedule  # noqa: F401 (re-exported)

XL = "transformer_xl"


def is_xl(config) -> bool:
    """Whether ``config.model.kind`` is "transformer_xl" (configs older than the field: no)."""
    return config.model.get("kind", "transformer") == XL


def _attention_options(config) -> dict:
    """``config.model.attention_options`` as dicts; for Transformer-XL the relative
    mechanism's ``mem_len`` (its ``same_length`` window) is ``config.model.mem_len``."""
    raw = config.model.get("attention_options") or {}
    opts = {k: dict(v.to_dict() if hasattr(v, "to_dict") else v or {}) for k, v in raw.items()}
    if is_xl(config):
        opts.setdefault("relative", {})["mem_len"] = int(config.model.mem_len)
    return opts


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
        attention=attention_cycle(m.attention, _attention_options(config)),
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


def eval_lengths(config) -> dict:
    """Transformer-XL evaluation lengths: ``config.eval`` with None -> the training value.

    Returns:
      ``{'tgt_len', 'mem_len', 'clamp_len', 'same_length'}`` (Dai et al. 2019 evaluate enwik8
      with 80 / 2100 / 820 / True after training with 512 / 512 / -1 / False).
    """
    ev = config.get("eval") or {}
    rel = _attention_options(config).get("relative", {})

    def pick(field, default):
        value = ev.get(field) if hasattr(ev, "get") else None
        return default if value is None else value

    return {
        "tgt_len": int(pick("tgt_len", config.data.seq_len)),
        "mem_len": int(pick("mem_len", config.model.mem_len)),
        "clamp_len": int(pick("clamp_len", rel.get("clamp_len", -1))),
        "same_length": bool(pick("same_length", rel.get("same_length", False))),
    }


def with_xl_lengths(cfg: TransformerConfig, *, mem_len: int, clamp_len: int, same_length: bool):
    """``cfg`` whose "relative" layers use other lengths (evaluation, sampling).

    The parameters do not depend on them (``W_R`` maps the sinusoids of any distance), so a
    model built from the result applies the trained parameters unchanged.
    """
    new = {"mem_len": int(mem_len), "clamp_len": int(clamp_len), "same_length": bool(same_length)}
    attention = tuple(
        (name, tuple(sorted({**dict(opts), **new}.items())) if name == "relative" else opts)
        for name, opts in cfg.attention
    )
    return dataclasses.replace(cfg, attention=attention)


def make_model(
    cfg: TransformerConfig, task: str, *, decode: bool = False, mem_len: int | None = None
) -> nn.Module:
    """``TransformerLM`` for task 'lm', ``TransformerClassifier`` for 'classification';
    ``TransformerXL(cfg, mem_len)`` when ``mem_len`` is given."""
    if mem_len is not None:
        return TransformerXL(cfg, mem_len=int(mem_len))
    if task == "lm":
        return TransformerLM(cfg, decode=decode)
    return TransformerClassifier(cfg)


def init_fn(model, tx, input_shape, seed: int, memory_batch: int = 0):
    """A function ``() -> state`` whose parameters (and Adam moments) are logically boxed.

    ``memory_batch`` > 0 (Transformer-XL): the state also holds the empty memory of that
    many rows (``model.init_memory``).
    """

    def init():
        params_rng, train_rng = jax.random.split(jax.random.PRNGKey(seed))
        tokens = jnp.zeros(input_shape, jnp.int32)
        params = model.init({"params": params_rng}, tokens)["params"]
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
    """Every memory leaf (``[B, M, E]`` and ``[B, M]``) split over the batch like a batch."""
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


def count_params(params) -> int:
    return sum(int(x.size) for x in jax.tree.leaves(params))
