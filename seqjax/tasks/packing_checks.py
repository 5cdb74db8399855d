"""Packing (``config.data.packing``, ``seqjax.data.packing``) against the model: the
mechanisms that cannot honour segments refuse it, and the ones whose pattern sits at absolute
positions need the examples aligned to their period. The tasks' ``validate`` call
``model_problems``.
"""

from __future__ import annotations

import numpy as np

from seqjax.attention import registry as attention_registry
from seqjax.data import registry as data_registry
from seqjax.models import memory
from seqjax.tasks import registry


def refusal(config) -> str | None:
    """What ``config.data.packing`` must be when the model cannot honour segments (the
    ``valid`` clause of config validation's message), else None."""
    kind = memory.kind(config)
    if memory.kinds().get(kind) is not None:
        return (f"False with model.kind={kind!r} (the recurrent memory crosses example "
                "boundaries)")  # fmt: skip
    for name in _names(config):
        why = attention_registry.packing_refusal(name, _options(config, name))
        if why:
            return f"False with {why}"
    return None


def _names(config) -> list[str]:
    """The mechanisms of the model's attention (and a seq2seq decoder's self-attention)."""
    names = attention_registry.parse(config.model.attention)
    if data_registry.task_of(config.data) == "seq2seq":  # the decoder's self-attention too
        names += attention_registry.parse(config.model.get("decoder_attention") or "")
    return names


def _options(config, name: str) -> dict:
    opts = (config.model.get("attention_options") or {}).get(name) or {}
    return dict(opts.to_dict() if hasattr(opts, "to_dict") else opts)


def alignment(config) -> int:
    """The period packed examples must start at a multiple of for the model's mechanisms to
    see each example as if alone (1: translation-invariant mechanisms)."""
    period = 1
    for name in _names(config):
        p = attention_registry.packing_period(
            name, _options(config, name), lambda: _row_len(config)
        )
        period = int(np.lcm(period, p))
    return period


def _row_len(config) -> int:
    task = registry.for_data_config(config.data)
    return int(task.input_length(config)) if task else int(config.data.seq_len)


def model_problems(config, bad) -> None:
    """``bad(field, value, valid)`` for a packed config the model cannot serve exactly."""
    if not config.data.get("packing"):
        return
    refused = refusal(config)
    if refused:
        bad("data.packing", True, refused)
        return
    need, align = alignment(config), config.data.get("packing_align", 1)
    if isinstance(align, int) and align % need:
        bad("data.packing_align", align, f"a multiple of {need} with model.attention="
            f"{config.model.attention!r} (its blocks start at multiples of {need}; packed "
            "examples must too to see the pattern they see alone)")  # fmt: skip
