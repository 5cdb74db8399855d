"""The recurrent model families, registered with ``seqjax.models.registry``.

* ``rnn``: Elman / GRU / LSTM stacks of Flax's cells (``seqjax.models.rnn``): the language
  model (``config.model.kind="rnn"`` carries the state across batches: truncated BPTT) and
  the classifier (``seqjax.models.rnn_classifier``).
"""

from __future__ import annotations

from seqjax.models import memory, registry, rnn

POOLINGS = ("last", "mean", "max")


def _lm(cfg, *, task, decode=False):
    del task, decode  # the state is the decoding cache (seqjax.models.memory)
    return rnn.RNNLM(cfg)


def _classifier(cfg, *, task, decode=False):
    del task
    from seqjax.models.rnn_classifier import RNNClassifier

    if decode:
        raise ValueError("the classifier has no decoding mode")
    return RNNClassifier(cfg)


def _rnn_config(config, info, needs) -> rnn.RNNConfig:
    return registry.dataclass_from_block(
        rnn.RNNConfig, config.model, vocab_size=int(info.vocab_size),
        num_classes=int(needs.num_classes), pad_id=info.pad_id,
    )  # fmt: skip


def _train_module(config, cfg, *, task):
    rec = memory.recurrence(config)
    if rec is not None:
        return rec.train_model(cfg, config)
    return RNN.module(cfg, task=task)


def _is_int(x, low: int) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= low


def _validate(config, bad) -> None:
    m = config.model
    if m.get("cell") not in rnn.CELLS:
        bad("model.cell", m.get("cell"), ", ".join(rnn.CELLS))
    for field, low in (("num_layers", 1), ("hidden_dim", 1), ("embed_dim", 0)):
        if not _is_int(m.get(field), low):
            bad(f"model.{field}", m.get(field), f"an integer >= {low}")
    rate = m.get("dropout_rate")
    if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not 0 <= rate < 1:
        bad("model.dropout_rate", rate, "a number in [0, 1)")
    if m.get("pooling") not in POOLINGS:
        bad("model.pooling", m.get("pooling"), ", ".join(POOLINGS))
    if config.data.get("packing"):
        bad("data.packing", True, 'False with model.family="rnn" (a state crosses examples)')
    kinds = [k for k in memory.kinds() if k in (memory.NON_RECURRENT, rnn.KIND)]
    if memory.kind(config) not in kinds:
        bad("model.kind", memory.kind(config), " or ".join(f'"{k}"' for k in kinds)
            + ' with model.family="rnn" ("rnn": the state carried across batches)')  # fmt: skip


RNN = registry.register(
    registry.Family(
        name="rnn",
        doc="Elman/GRU/LSTM stacks of Flax's cells: LM (carried state) and classifier",
        config_class=rnn.RNNConfig,
        build_config=_rnn_config,
        modules={"lm": _lm, "classification": _classifier},
        validate=_validate,
        from_data=("vocab_size", "num_classes", "pad_id", "max_len"),  # max_len: no window
        common_checks=False,
        train_module=_train_module,
    )
)
