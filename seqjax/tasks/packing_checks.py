"""Packing (``config.data.packing``, ``seqjax.data.packing``) against the model: the
mechanisms that cannot honour segments refuse it, and the ones whose pattern sits at absolute
positions need the examples aligned to their period. The tasks' ``validate`` call
``model_problems``.
"""

from __future__ import annotations

import numpy as np

from seqjax.attention import local, sparse
from seqjax.data import registry as data_registry
from seqjax.models import memory
from seqjax.tasks import registry

# Mechanisms (config.model.attention) that cannot honour segment_ids, and why.
NO_SEGMENTS = {
    "linformer": "its projections E K, F V mix every position of a row, so packed examples "
    "would attend to each other",
    "relative": "Transformer-XL's memory carries the previous segment's states into the next",
    "linear": "its running sums over the row would mix the examples",
    "performer": "its running sums over the row would mix the examples",
    "lsh": "its hash buckets are sorted and chunked over the whole row, so the other examples "
    "change which keys a query sees",
}


def refusal(config) -> str | None:
    """What ``config.data.packing`` must be when the model cannot honour segments (the
    ``valid`` clause of config validation's message), else None."""
    kind = memory.kind(config)
    if memory.kinds().get(kind) is not None:
        return (f"False with model.kind={kind!r} (the recurrent memory crosses example "
                "boundaries)")  # fmt: skip
    names = [n.strip() for n in str(config.model.attention).split(",") if n.strip()]
    if data_registry.task_of(config.data) == "seq2seq":  # the decoder's self-attention too
        names += [n.strip() for n in str(config.model.get("decoder_attention") or "").split(",")]
    for name in names:
        if name in NO_SEGMENTS:
            return f"False with model.attention={name!r} ({NO_SEGMENTS[name]})"
        if name == "flex":
            opts = _options(config, name)
            if opts.get("pattern") in (None, "bigbird", "global_tokens"):
                what = opts.get("pattern") or "a mask_fn/block_mask"
                return (f"False with flex {what!r} (its pattern is tied to absolute positions "
                        "of the row, so a packed example would see another pattern)")  # fmt: skip
    return None


def _options(config, name: str) -> dict:
    opts = (config.model.get("attention_options") or {}).get(name) or {}
    return dict(opts.to_dict() if hasattr(opts, "to_dict") else opts)


def alignment(config) -> int:
    """The period packed examples must start at a multiple of for the model's mechanisms to
    see each example as if alone (1: translation-invariant mechanisms)."""
    period = 1
    names = [n.strip() for n in str(config.model.attention).split(",") if n.strip()]
    if data_registry.task_of(config.data) == "seq2seq":  # the decoder's self-attention too
        names += [n.strip() for n in str(config.model.get("decoder_attention") or "").split(",")]
    for name in names:
        opts = _options(config, name)
        if name == "local":
            p = int(opts.get("block_len", local.DEFAULT_BLOCK_LEN))
        elif name == "sparse_fixed":
            p = int(opts.get("stride") or sparse.auto_stride(_row_len(config)))
        elif name == "flex" and opts.get("pattern") == "fixed":
            p = int(opts.get("stride", 1))
        else:
            p = 1
        period = int(np.lcm(period, max(p, 1)))
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
