"""The ``TransformerConfig`` a job config describes.

``config.model`` (an ``ml_collections.ConfigDict``) and the data's ``DataInfo`` (vocabulary,
padding id, image shape) give a ``TransformerConfig``; the caller (the data's task,
``seqjax.tasks``) passes what is its own (causal or not, the classes) and picks the module
(``seqjax.tasks.model_build``).
"""

from __future__ import annotations

import dataclasses

from seqjax.models import memory
from seqjax.models.encoder_decoder_config import EncoderDecoderConfig
from seqjax.models.transformer import TransformerConfig, attention_cycle


def attention_options(config) -> dict:
    """``config.model.attention_options`` as dicts, with what a recurrent kind sets."""
    raw = config.model.get("attention_options") or {}
    opts = {k: dict(v.to_dict() if hasattr(v, "to_dict") else v or {}) for k, v in raw.items()}
    rec = memory.recurrence(config)
    return rec.attention_options(config, opts) if rec else opts


def transformer_config(config, info, *, causal: bool, num_classes: int = 0) -> TransformerConfig:
    """``TransformerConfig`` from ``config.model``, the data's vocabulary and padding id, and
    what the task sets: ``causal`` attention, ``num_classes`` (0: no classifier head)."""
    m = config.model
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
        causal=causal,
        num_classes=num_classes,
        pooling=m.pooling,
        pad_id=info.pad_id,
        axial_shape=tuple(getattr(info, "image_shape", None) or ()),
        **_positional_and_adaptive(m),
        **layout_options(m),
    )


# ``TransformerConfig``'s options for imported checkpoints, read from ``config.model.layout``
# (``seqjax.train.hf_start`` writes it from a Hugging Face folder; absent: seqjax's layout).
LAYOUT_FIELDS = ("norm_position", "norm_type", "norm_eps", "activation", "mlp_gated",
                 "mlp_bias", "attention_bias", "attention_scale", "embed_scale", "embed_norm",
                 "type_vocab_size", "position_offset", "attention_qkv_bias")  # fmt: skip


def layout_options(m) -> dict:
    """``config.model.layout`` as ``TransformerConfig`` keyword arguments (unknown keys are
    one sentence listing ``LAYOUT_FIELDS``)."""
    layout = m.get("layout") or {}
    layout = dict(layout.to_dict() if hasattr(layout, "to_dict") else layout)
    unknown = sorted(set(layout) - set(LAYOUT_FIELDS))
    if unknown:
        raise ValueError(
            f"model.layout.{unknown[0]} is not a layout option; valid: {', '.join(LAYOUT_FIELDS)}"
        )
    return layout


def transformer_block(cfg: TransformerConfig) -> dict:
    """The ``config.model`` fields that rebuild ``cfg`` with ``transformer_config`` (the
    ``transformer`` family's ``block_of``): sizes, positions, output layer, dropout and
    the layout options that differ from seqjax's own in ``layout``."""
    block = {f: getattr(cfg, f) for f in ("num_layers", "num_heads", "d_model", "head_dim",
             "d_ff", "max_len", "positional", "tie_embeddings", "dropout_rate",
             "attention_dropout_rate")}  # fmt: skip
    default = TransformerConfig(vocab_size=1)
    block["layout"] = {f: getattr(cfg, f) for f in LAYOUT_FIELDS
                       if getattr(cfg, f) != getattr(default, f)}  # fmt: skip
    names = [name for name, _ in cfg.attention]
    block["attention"] = ",".join(names)
    options = {name: dict(opts) for name, opts in cfg.attention if opts}
    if options:  # e.g. an imported GPT-Neo's local layers: flex sliding_window, its window
        block["attention_options"] = options
    return block


def _positional_and_adaptive(m) -> dict:
    """The RoPE/T5 hyper-parameters and ``model.adaptive`` fields, when the config has them."""
    out = {k: m[k] for k in ("rope_base", "t5_buckets", "t5_max_distance") if k in m}
    a = m.get("adaptive")
    if a is not None and a.get("enabled", False):
        out.update(
            adaptive=True,
            adaptive_cutoffs=tuple(int(c) for c in a.cutoffs),
            adaptive_div_val=a.div_val,
            adaptive_tie_projs=a.tie_projs,
        )
    return out


def transformer_from_needs(config, info, needs) -> TransformerConfig:
    """The ``transformer`` family's ``build_config`` (``seqjax.models.families``): the task's
    causality and classes, BERT's masked-LM head transform for a masked LM unless
    ``model.mlm_head_transform=False`` (``seqjax.models.heads.MLMHead``)."""
    cfg = transformer_config(config, info, causal=needs.causal, num_classes=needs.num_classes)
    if needs.masked_lm and bool(config.model.get("mlm_head_transform", True)):
        cfg = dataclasses.replace(cfg, mlm_head_transform=True)
    return cfg


def encoder_decoder_from_needs(config, info, needs) -> EncoderDecoderConfig:
    """The ``encoder_decoder`` family's ``build_config``: ``model.attention``/``num_layers``
    are the encoder's, ``decoder_attention``/``decoder_layers`` the decoder's (Vaswani et al.
    2017 §3.1), one vocabulary (the data's) for both sides."""
    del needs
    m = config.model
    options = attention_options(config)
    decoder_attention = m.get("decoder_attention") or "dense"
    pad = getattr(info, "pad_id", None)
    return EncoderDecoderConfig(
        pad_id=0 if pad is None else int(pad),
        **{k: m[k] for k in ("t5_buckets", "t5_max_distance") if k in m},
        **encoder_decoder_layout(m),
        vocab_size=int(info.vocab_size),
        encoder_layers=int(m.num_layers),
        decoder_layers=int(m.get("decoder_layers") or m.num_layers),
        num_heads=m.num_heads,
        d_model=m.d_model,
        head_dim=m.head_dim,
        d_ff=m.d_ff,
        max_source_len=int(m.max_len),
        max_target_len=int(m.max_len),
        dropout_rate=m.dropout_rate,
        attention_dropout_rate=m.attention_dropout_rate,
        encoder_attention=attention_cycle(m.attention, options),
        decoder_attention=attention_cycle(decoder_attention, options),
        share_embeddings=bool(m.get("share_embeddings", True)),
        tie_embeddings=m.tie_embeddings,
        norm_position=m.get("norm_position", "post"),
        positional=m.positional,
        reversible=m.reversible,
        ff_chunk_size=m.ff_chunk_size,
        dtype=m.dtype,
    )


# ``EncoderDecoderConfig``'s options for imported checkpoints (T5's layout), read from
# ``config.model.layout`` (``seqjax.train.hf_start`` writes it from a Hugging Face folder).
ENCODER_DECODER_LAYOUT = ("norm_type", "norm_eps", "activation", "mlp_gated", "mlp_bias",
                          "attention_bias", "attention_scale", "embed_scale",
                          "rescale_tied_output", "embed_norm", "position_offset",
                          "final_logits_bias", "decoder_start_id")  # fmt: skip


def encoder_decoder_layout(m) -> dict:
    """``config.model.layout`` as ``EncoderDecoderConfig`` keyword arguments (unknown keys
    are one sentence listing ``ENCODER_DECODER_LAYOUT``)."""
    layout = m.get("layout") or {}
    layout = dict(layout.to_dict() if hasattr(layout, "to_dict") else layout)
    unknown = sorted(set(layout) - set(ENCODER_DECODER_LAYOUT))
    if unknown:
        raise ValueError(
            f"model.layout.{unknown[0]} is not an encoder-decoder layout option; valid: "
            f"{', '.join(ENCODER_DECODER_LAYOUT)}"
        )
    return layout


def encoder_decoder_block(cfg: EncoderDecoderConfig) -> dict:
    """The ``config.model`` fields that rebuild ``cfg`` with ``encoder_decoder_from_needs``
    (the ``encoder_decoder`` family's ``block_of``; the pad id comes from the data)."""
    if cfg.max_source_len != cfg.max_target_len:
        raise ValueError(
            f"model max_source_len={cfg.max_source_len} and max_target_len="
            f"{cfg.max_target_len} differ; config.model.max_len is one length for both"
        )
    block = {"num_layers": cfg.encoder_layers, "decoder_layers": cfg.decoder_layers,
             "num_heads": cfg.num_heads, "d_model": cfg.d_model, "head_dim": cfg.head_dim,
             "d_ff": cfg.d_ff, "max_len": cfg.max_source_len, "positional": cfg.positional,
             "tie_embeddings": cfg.tie_embeddings, "share_embeddings": cfg.share_embeddings,
             "norm_position": cfg.norm_position, "reversible": cfg.reversible,
             "dropout_rate": cfg.dropout_rate,
             "attention_dropout_rate": cfg.attention_dropout_rate,
             "t5_buckets": cfg.t5_buckets, "t5_max_distance": cfg.t5_max_distance}  # fmt: skip
    for field, stack in (("attention", cfg.encoder_attention),
                         ("decoder_attention", cfg.decoder_attention)):  # fmt: skip
        block[field] = ",".join(name for name, _ in stack)
        if any(opts for _, opts in stack):
            raise ValueError(f"an imported {field} with options cannot start a run: {stack}")
    default = EncoderDecoderConfig(vocab_size=1)
    block["layout"] = {f: getattr(cfg, f) for f in ENCODER_DECODER_LAYOUT
                       if getattr(cfg, f) != getattr(default, f)}  # fmt: skip
    return block
