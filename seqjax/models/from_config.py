"""The model a job config describes: ``TransformerConfig`` and the Flax module.

``config.model`` (an ``ml_collections.ConfigDict``) and the data's ``DataInfo`` (vocabulary,
task, classes) give a ``TransformerConfig``; ``config.model.kind`` picks the module: the LM
or the classifier, or a recurrent model (``seqjax.models.memory``) that declares how it is
built.
"""

from __future__ import annotations

import flax.linen as nn

from seqjax.models import memory
from seqjax.models.transformer import (
    TransformerClassifier,
    TransformerConfig,
    TransformerLM,
    attention_cycle,
)


def attention_options(config) -> dict:
    """``config.model.attention_options`` as dicts, with what a recurrent kind sets."""
    raw = config.model.get("attention_options") or {}
    opts = {k: dict(v.to_dict() if hasattr(v, "to_dict") else v or {}) for k, v in raw.items()}
    rec = memory.recurrence(config)
    return rec.attention_options(config, opts) if rec else opts


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
        attention=attention_cycle(m.attention, attention_options(config)),
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


def build_model(config, cfg: TransformerConfig, task: str) -> nn.Module:
    """The module that trains: the kind's recurrent model, else ``make_model``."""
    rec = memory.recurrence(config)
    return rec.train_model(cfg, config) if rec else make_model(cfg, task)
