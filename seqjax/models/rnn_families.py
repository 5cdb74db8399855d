"""The recurrent model families, registered with ``seqjax.models.registry``.

* ``rnn``: Elman / GRU / LSTM stacks of Flax's cells (``seqjax.models.rnn``): the language
  model (``config.model.kind="rnn"`` carries the state across batches: truncated BPTT) and
  the classifier (``seqjax.models.rnn_classifier``).
* ``rnn_seq2seq``: the RNN encoder-decoder without attention, with Bahdanau's additive or
  Luong's dot/general attention (``seqjax.models.rnn_seq2seq``) for the seq2seq task.
* ``baselines``: bag of words, CBOW, deep CBOW, DAN and Kim's CNN for classification
  (``seqjax.models.baselines``).
"""

from __future__ import annotations

from seqjax.models import baselines, memory, registry, rnn, rnn_seq2seq

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


def _check_rates(m, bad, *fields) -> None:
    """Each of ``model.<field>`` a number in [0, 1) (dropout rates)."""
    for field in fields:
        rate = m.get(field)
        if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not 0 <= rate < 1:
            bad(f"model.{field}", rate, "a number in [0, 1)")


def _validate(config, bad) -> None:
    m = config.model
    if m.get("cell") not in rnn.CELLS:
        bad("model.cell", m.get("cell"), ", ".join(rnn.CELLS))
    for field, low in (("num_layers", 1), ("hidden_dim", 1), ("embed_dim", 0)):
        if not _is_int(m.get(field), low):
            bad(f"model.{field}", m.get(field), f"an integer >= {low}")
    _check_rates(m, bad, "dropout_rate")
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


def _seq2seq(cfg, *, task, decode=False):
    del task
    return rnn_seq2seq.RNNEncoderDecoder(cfg, decode=decode)


def _seq2seq_config(config, info, needs) -> rnn_seq2seq.RNNSeq2SeqConfig:
    del needs
    return registry.dataclass_from_block(
        rnn_seq2seq.RNNSeq2SeqConfig, config.model, vocab_size=int(info.vocab_size)
    )


def _validate_seq2seq(config, bad) -> None:
    m, d = config.model, config.data
    if m.get("cell") not in rnn.CELLS:
        bad("model.cell", m.get("cell"), ", ".join(rnn.CELLS))
    if m.get("attention_type") not in rnn_seq2seq.ATTENTIONS:
        bad("model.attention_type", m.get("attention_type"), ", ".join(rnn_seq2seq.ATTENTIONS))
    for field, low in (("num_layers", 1), ("hidden_dim", 2), ("embed_dim", 0), ("max_len", 1)):
        if not _is_int(m.get(field), low):
            bad(f"model.{field}", m.get(field), f"an integer >= {low}")
    if m.get("bidirectional_encoder") and _is_int(m.get("hidden_dim"), 2) and m.hidden_dim % 2:
        bad("model.hidden_dim", m.hidden_dim,
            "an even number with model.bidirectional_encoder (H/2 per direction)")  # fmt: skip
    _check_rates(m, bad, "dropout_rate")
    if _is_int(m.get("max_len"), 1) and int(d.get("max_source_len") or 0) > m.max_len:
        bad("data.max_source_len", d.max_source_len, f"<= model.max_len={m.max_len}")
    if d.get("packing"):
        bad("data.packing", True, 'False with model.family="rnn_seq2seq"')


RNN_SEQ2SEQ = registry.register(
    registry.Family(
        name="rnn_seq2seq",
        doc="RNN encoder-decoder: fixed vector, Bahdanau or Luong attention (input feeding)",
        config_class=rnn_seq2seq.RNNSeq2SeqConfig,
        build_config=_seq2seq_config,
        modules={"seq2seq": _seq2seq},
        validate=_validate_seq2seq,
        common_checks=False,
    )
)


def _baseline(cfg, *, task, decode=False):
    del task
    if decode:
        raise ValueError("the classifier has no decoding mode")
    return baselines.BaselineClassifier(cfg)


def _baseline_config(config, info, needs) -> baselines.BaselineConfig:
    return registry.dataclass_from_block(
        baselines.BaselineConfig, config.model, vocab_size=int(info.vocab_size),
        num_classes=int(needs.num_classes), pad_id=info.pad_id,
    )  # fmt: skip


def _validate_baselines(config, bad) -> None:
    m = config.model
    if m.get("architecture") not in baselines.ARCHITECTURES:
        bad("model.architecture", m.get("architecture"), ", ".join(baselines.ARCHITECTURES))
    for field, low in (("embed_dim", 1), ("hidden_dim", 1), ("num_layers", 0),
                       ("num_filters", 1)):  # fmt: skip
        if not _is_int(m.get(field), low):
            bad(f"model.{field}", m.get(field), f"an integer >= {low}")
    _check_rates(m, bad, "word_dropout", "dropout_rate")
    widths = m.get("filter_widths")
    if not widths or not all(_is_int(w, 1) for w in widths):
        bad("model.filter_widths", widths, "a non-empty tuple of integers >= 1 (Kim: 3, 4, 5)")
    if config.data.get("packing"):
        bad("data.packing", True, 'False with model.family="baselines"')


BASELINES = registry.register(
    registry.Family(
        name="baselines",
        doc="bag of words, CBOW, deep CBOW, DAN (Iyyer et al. 2015), Kim's CNN (2014)",
        config_class=baselines.BaselineConfig,
        build_config=_baseline_config,
        modules={"classification": _baseline},
        validate=_validate_baselines,
        from_data=("vocab_size", "num_classes", "pad_id"),
        common_checks=False,
    )
)
