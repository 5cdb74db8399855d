"""XLNet as a model family (``config.model.family = "xlnet"``; ``seqjax.models.xlnet``):
``XLNet`` for permutation language modelling (task ``plm``, ``seqjax.tasks.plm``) and
``XLNetClassifier`` for classification (the last token's summary), both with their network
under ``encoder`` so that ``config.init_from`` fine-tunes a pre-trained one."""

from __future__ import annotations

from seqjax.models import registry
from seqjax.models.xlnet import ACTIVATIONS, XLNetConfig


def build_config(config, info, needs) -> XLNetConfig:
    return registry.dataclass_from_block(
        XLNetConfig, config.model, vocab_size=int(info.vocab_size),
        num_labels=int(needs.num_classes or 0), pad_id=info.pad_id,
    )  # fmt: skip


def _plm(cfg, *, task, decode=False):
    del task
    from seqjax.models.xlnet import XLNet

    if decode:
        raise ValueError("the XLNet family has no cached decoding mode")
    return XLNet(cfg)


def _classifier(cfg, *, task, decode=False):
    del task
    from seqjax.models.xlnet import XLNetClassifier

    if decode:
        raise ValueError("the XLNet classifier has no decoding mode")
    return XLNetClassifier(cfg)


def _train_module(config, cfg, *, task):
    """With ``model.kind = "xlnet"`` the model with memory across batches
    (``seqjax.models.xlnet_memory``), else the task's module."""
    from seqjax.models import memory

    rec = memory.recurrence(config)
    if rec is not None:
        return rec.train_model(cfg, config)
    return task.make_model(cfg)


def validate(config, bad) -> None:
    """Field checks of ``config.model`` (one call of ``bad`` per wrong field)."""
    m = config.model
    for name in ("num_layers", "num_heads", "d_model", "d_inner"):
        v = m.get(name)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            bad(f"model.{name}", v, "an integer >= 1")
    if isinstance(m.get("d_model"), int) and isinstance(m.get("num_heads"), int):
        if m.num_heads > 0 and m.d_model % m.num_heads:
            bad("model.d_model", m.d_model, f"a multiple of model.num_heads={m.num_heads}")
    if m.get("ff_activation") not in ACTIVATIONS:
        bad("model.ff_activation", m.get("ff_activation"), f"one of {ACTIVATIONS}")
    if m.get("implementation") not in ("reference", "blockwise", "auto"):
        bad("model.implementation", m.get("implementation"), "'reference', 'blockwise' or 'auto'")
    if m.get("generate_order", "prefix") not in ("prefix", "causal"):
        bad("model.generate_order", m.get("generate_order"), "'prefix' or 'causal'")
    rate = m.get("dropout_rate")
    if not isinstance(rate, (int, float)) or not 0 <= rate < 1:
        bad("model.dropout_rate", rate, "a number in [0, 1)")


XLNET = registry.register(
    registry.Family(
        name="xlnet",
        doc="XLNet (Yang et al. 2019): two-stream relative attention, permutation LM, "
        "last-token classifier",
        config_class=XLNetConfig,
        build_config=build_config,
        modules={"plm": _plm, "classification": _classifier},
        train_module=_train_module,
        validate=validate,
        from_data=("vocab_size", "num_labels", "pad_id"),
        common_checks=False,
        hf_architectures=("XLNetLMHeadModel", "XLNetModel", "XLNetForSequenceClassification"),
    )
)
