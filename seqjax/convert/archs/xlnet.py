"""XLNet as a Hugging Face architecture: ``XLNetLMHeadModel`` folders <-> ``seqjax.models.xlnet``
(Yang et al. 2019; names and layouts of ``transformers``' port of zihangdai/xlnet).

Read: ``XLNetLMHeadModel`` and ``XLNetModel`` (a bare encoder: the LM bias is initialised;
the output layer is always the tied token table). Written: ``XLNetLMHeadModel``.
``XLNetForSequenceClassification`` (read and written, architecture ``xlnet_classifier``) <->
``XLNetClassifier``: the sequence summary of XLNet's §3.3 (``summary_type="last"``, a
projection to ``d_model`` and tanh: ``sequence_summary.summary`` -> ``summary``) and
``logits_proj``; ``num_labels`` is the length of ``id2label``.
Layouts: XLNet already stores its attention kernels ``[E, H, D]`` (``o`` included, used as
``[E, H, D]`` on the way out), as seqjax's module does; ``mask_emb`` is ``[1, 1, E]`` there
and ``[E]`` here. Only ``attn_type="bi"`` without ``bi_data`` is read.
"""

from __future__ import annotations

from seqjax.convert import mapping, registry

HF_NAMES = ("XLNetLMHeadModel", "XLNetModel")
CLS_NAME = "XLNetForSequenceClassification"


def xlnet_config(hf: dict, max_len=None):
    """``config.json`` dict -> ``XLNetConfig`` (one-sentence error for what it cannot hold)."""
    del max_len  # relative positions: any length
    from seqjax.models.xlnet import XLNetConfig

    if hf.get("attn_type", "bi") != "bi":
        raise ValueError(f"config.json attn_type={hf.get('attn_type')!r}: only 'bi' is read")
    if hf.get("bi_data", False):
        raise ValueError("config.json bi_data=True is not supported; valid: false")
    d_head = hf.get("d_head", hf["d_model"] // hf["n_head"])
    if d_head * hf["n_head"] != hf["d_model"]:
        raise ValueError(
            f"config.json d_head={d_head} must equal d_model / n_head = "
            f"{hf['d_model']} / {hf['n_head']}"
        )
    return XLNetConfig(
        vocab_size=hf["vocab_size"],
        d_model=hf["d_model"],
        num_layers=hf["n_layer"],
        num_heads=hf["n_head"],
        d_inner=hf["d_inner"],
        ff_activation=hf.get("ff_activation", "gelu"),
        layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
        dropout_rate=hf.get("dropout", 0.1),
        mem_len=hf.get("mem_len") or 0,
        reuse_len=hf.get("reuse_len") or 0,
        clamp_len=hf.get("clamp_len", -1),
    )


def xlnet_hf_config(cfg) -> dict:
    """``XLNetConfig`` -> ``config.json`` dict of an ``XLNetLMHeadModel``."""
    return {
        "architectures": [HF_NAMES[0]],
        "model_type": "xlnet",
        "vocab_size": cfg.vocab_size,
        "d_model": cfg.d_model,
        "n_layer": cfg.num_layers,
        "n_head": cfg.num_heads,
        "d_head": cfg.dim_head,
        "d_inner": cfg.d_inner,
        "ff_activation": cfg.ff_activation,
        "layer_norm_eps": cfg.layer_norm_eps,
        "dropout": cfg.dropout_rate,
        "mem_len": cfg.mem_len or None,
        "reuse_len": cfg.reuse_len or None,
        "clamp_len": cfg.clamp_len,
        "attn_type": "bi",
        "bi_data": False,
        "untie_r": True,
        "same_length": False,
        "initializer_range": 0.02,
        "tie_word_embeddings": True,
    }


def _mask_emb(sx, hf):
    return mapping.Rule((sx,), (hf,), lambda w: (w.reshape(-1),), lambda w: (w.reshape(1, 1, -1),))


def xlnet_rules(cfg, prefix=None, tensors=None) -> list:
    """Name/layout rules for ``cfg`` (``prefix``: ``"transformer."`` in an LM head model,
    ``""`` in a bare ``XLNetModel``)."""
    del tensors
    p = "transformer." if prefix is None else prefix
    rs = [
        mapping.copy(("encoder", "embed", "embedding"), f"{p}word_embedding.weight"),
        _mask_emb(("encoder", "mask_emb"), f"{p}mask_emb"),
        mapping.copy(("lm_loss_bias",), "lm_loss.bias"),
    ]
    for i in range(cfg.num_layers):
        sx, hf = ("encoder", f"layer_{i}"), f"{p}layer.{i}"
        for n in ("q", "k", "v", "o", "r", "r_r_bias", "r_s_bias", "r_w_bias", "seg_embed"):
            rs.append(mapping.copy((*sx, "rel_attn", n), f"{hf}.rel_attn.{n}"))
        for mod in ("rel_attn", "ff"):
            rs.append(
                mapping.copy((*sx, mod, "layer_norm", "scale"), f"{hf}.{mod}.layer_norm.weight")
            )
            rs.append(mapping.copy((*sx, mod, "layer_norm", "bias"), f"{hf}.{mod}.layer_norm.bias"))
        for lin in ("layer_1", "layer_2"):
            rs.append(mapping.linear((*sx, "ff", lin, "kernel"), f"{hf}.ff.{lin}.weight"))
            rs.append(mapping.copy((*sx, "ff", lin, "bias"), f"{hf}.ff.{lin}.bias"))
    return rs


def classifier_config(hf: dict, max_len=None):
    """``config.json`` of an ``XLNetForSequenceClassification`` -> ``XLNetConfig`` with
    ``num_labels`` (one sentence for a summary other than XLNet's own)."""
    import dataclasses

    want = {"summary_type": "last", "summary_use_proj": True, "summary_activation": "tanh"}
    for key, value in want.items():
        if hf.get(key, value) != value:
            raise ValueError(
                f"config.json {key}={hf.get(key)!r} is not supported; valid: {value!r}"
            )
    if hf.get("summary_proj_to_labels", False):
        raise ValueError("config.json summary_proj_to_labels=True is not supported; valid: false")
    labels = hf.get("id2label") or {}
    num_labels = len(labels) or int(hf.get("num_labels", 2))
    return dataclasses.replace(xlnet_config(hf, max_len), num_labels=num_labels)


def classifier_hf_config(cfg) -> dict:
    """``XLNetConfig`` (``num_labels > 0``) -> ``config.json`` of an
    ``XLNetForSequenceClassification``."""
    labels = {str(i): f"LABEL_{i}" for i in range(cfg.num_labels)}
    return {
        **xlnet_hf_config(cfg), "architectures": [CLS_NAME], "id2label": labels,
        "label2id": {v: int(k) for k, v in labels.items()}, "summary_type": "last",
        "summary_use_proj": True, "summary_activation": "tanh",
        "summary_last_dropout": cfg.dropout_rate,
    }  # fmt: skip


def classifier_rules(cfg, prefix=None, tensors=None) -> list:
    """The encoder's rules (no LM bias) and the summary and output projections."""
    rs = [r for r in xlnet_rules(cfg, prefix, tensors) if r.sx[0][0] == "encoder"]
    for sx, hf in (("summary", "sequence_summary.summary"), ("logits_proj", "logits_proj")):
        rs.append(mapping.linear((sx, "kernel"), f"{hf}.weight"))
        rs.append(mapping.copy((sx, "bias"), f"{hf}.bias"))
    return rs


def make_classifier(cfg):
    from seqjax.models.xlnet import XLNetClassifier

    return XLNetClassifier(cfg)


def make_model(cfg):
    from seqjax.models.xlnet import XLNet

    return XLNet(cfg)


XLNET = registry.register(
    registry.Architecture(
        name="xlnet",
        architectures=HF_NAMES,
        model_type="xlnet",
        config=xlnet_config,
        hf_config=xlnet_hf_config,
        rules=xlnet_rules,
        make_model=make_model,
        prefix_anchor="word_embedding.weight",
        optional=("lm_loss_bias",),
        export_ignores=(
            "implementation",
            "num_labels",
            "summary_activation",
            "pad_id",
            "generate_order",
        ),
        family="xlnet",
    )
)


XLNET_CLASSIFIER = registry.register(
    registry.Architecture(
        name="xlnet_classifier",
        architectures=(CLS_NAME,),
        model_type="xlnet",
        config=classifier_config,
        hf_config=classifier_hf_config,
        rules=classifier_rules,
        make_model=make_classifier,
        prefix_anchor="word_embedding.weight",
        export_ignores=("implementation", "summary_activation", "pad_id", "generate_order"),
        family="xlnet",
    )
)
