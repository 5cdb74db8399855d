"""DistilBERT as a Hugging Face architecture (Sanh et al. 2019): ``DistilBertForMaskedLM`` /
``DistilBertModel`` <-> ``TransformerLM`` with BERT's layout minus token types (and with no
pooler): post-LN blocks, biases, exact GELU, learned positions, an embedding LayerNorm,
epsilon 1e-12, and the masked-LM head (``vocab_transform``, GELU, ``vocab_layer_norm``, the
tied ``vocab_projector`` and its bias: ``heads.MLMHead``)."""

from __future__ import annotations

from seqjax.convert import encoders, registry
from seqjax.convert import mapping as m
from seqjax.models.transformer import TransformerConfig


def distilbert_config(hf: dict, max_len: int | None = None) -> TransformerConfig:
    """The ``TransformerConfig`` of a DistilBERT ``config.json``."""
    del max_len
    act = encoders.activation(hf.get("activation", "gelu"), "activation")
    if act != "gelu":
        raise ValueError(
            f"config.json activation={hf['activation']!r} is not supported for the masked-LM "
            "head (seqjax's MLMHead uses the exact GELU); valid: ['gelu']"
        )
    return TransformerConfig(
        vocab_size=hf["vocab_size"],
        num_layers=hf.get("n_layers", 6),
        num_heads=hf.get("n_heads", 12),
        d_model=hf.get("dim", 768),
        d_ff=hf.get("hidden_dim", 3072),
        max_len=hf.get("max_position_embeddings", 512),
        positional="learned",
        tie_embeddings=hf.get("tie_word_embeddings", True),
        causal=False,
        mlm_head_transform=True,
        pad_id=hf.get("pad_token_id", 0),
        norm_position="post",
        norm_eps=1e-12,
        activation=act,
        attention_bias=True,
        embed_scale=False,
        embed_norm=True,
        type_vocab_size=0,
        dropout_rate=hf.get("dropout", encoders.HF_DROPOUT),
        attention_dropout_rate=hf.get("attention_dropout", encoders.HF_DROPOUT),
    )


def distilbert_hf_config(cfg: TransformerConfig) -> dict:
    """The ``config.json`` of a DistilBERT-layout ``TransformerConfig``."""
    return {
        "architectures": ["DistilBertForMaskedLM"],
        "model_type": "distilbert",
        "vocab_size": cfg.vocab_size,
        "dim": cfg.d_model,
        "n_layers": cfg.num_layers,
        "n_heads": cfg.num_heads,
        "hidden_dim": cfg.dim_ff,
        "activation": encoders.SX_ACTIVATIONS[cfg.activation],
        "max_position_embeddings": cfg.max_len,
        "sinusoidal_pos_embds": False,
        "pad_token_id": cfg.pad_id if cfg.pad_id is not None else 0,
        "tie_word_embeddings": cfg.tie_embeddings,
        "dropout": cfg.dropout_rate,
        "attention_dropout": cfg.attention_dropout_rate,
        "initializer_range": 0.02,
    }


def _ln(sx, hf):
    return [m.copy((*sx, "scale"), hf + ".weight"), m.copy((*sx, "bias"), hf + ".bias")]


def _dense(sx, hf):
    return [m.linear((*sx, "kernel"), hf + ".weight"), m.copy((*sx, "bias"), hf + ".bias")]


def distilbert_rules(cfg: TransformerConfig, prefix: str | None = None, tensors=None) -> list:
    """The rules of ``DistilBertForMaskedLM`` (``prefix``: the encoder's, ``distilbert.``)."""
    del tensors
    p, h, enc = ("distilbert." if prefix is None else prefix), cfg.num_heads, ("encoder",)
    rules = [
        m.copy((*enc, "embed", "embedding"), p + "embeddings.word_embeddings.weight"),
        m.copy((*enc, "pos_embed"), p + "embeddings.position_embeddings.weight"),
        *_ln((*enc, "ln_embed"), p + "embeddings.LayerNorm"),
    ]
    for i in range(cfg.num_layers):
        lay, b = f"{p}transformer.layer.{i}.", (*enc, f"block_{i}")
        for q, name in (("query", "q_lin"), ("key", "k_lin"), ("value", "v_lin")):
            hf = f"{lay}attention.{name}"
            rules.append(
                m.heads_in((*b, "attn", q, "kernel"), hf + ".weight", h, torch_linear=True)
            )
            rules.append(m.heads_bias((*b, "attn", q, "bias"), hf + ".bias", h))
        rules += [
            m.heads_out(
                (*b, "attn", "out", "kernel"),
                lay + "attention.out_lin.weight",
                h,
                torch_linear=True,
            ),  # fmt: skip
            m.copy((*b, "attn", "out", "bias"), lay + "attention.out_lin.bias"),
            *_ln((*b, "ln_attn"), lay + "sa_layer_norm"),
            *_dense((*b, "mlp", "core", "up"), lay + "ffn.lin1"),
            *_dense((*b, "mlp", "core", "down"), lay + "ffn.lin2"),
            *_ln((*b, "ln_mlp"), lay + "output_layer_norm"),
        ]
    rules += [
        *_dense(("mlm_head", "transform"), "vocab_transform"),
        *_ln(("mlm_head", "ln"), "vocab_layer_norm"),
        m.copy(("mlm_head", "bias"), "vocab_projector.bias"),
    ]
    if not cfg.tie_embeddings:
        rules.append(m.linear(("mlm_head", "decoder", "kernel"), "vocab_projector.weight"))
    return rules


DISTILBERT = registry.register(
    registry.Architecture(
        name="distilbert",
        architectures=("DistilBertForMaskedLM", "DistilBertModel"),
        model_type="distilbert",
        config=distilbert_config,
        hf_config=distilbert_hf_config,
        rules=distilbert_rules,
        make_model=encoders.make_model,
        prefix_anchor="embeddings.word_embeddings.weight",
        optional=("mlm_head",),
        family="transformer",
    )
)
