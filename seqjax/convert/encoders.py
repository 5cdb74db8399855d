"""BERT / RoBERTa (masked-LM encoders) and GPT-2 (decoder LM) <-> ``TransformerLM``.

BERT (Devlin et al. 2019, §3 and App. A): post-LN blocks (Vaswani et al. 2017 §3.1:
LayerNorm(x + Sublayer(x))), word + learned position + token-type embeddings summed and
normalized, biases on every projection, exact-erf GELU, and the masked-LM head (dense,
GELU, LayerNorm, tied decoder plus a bias: ``seqjax.models.heads.MLMHead``). RoBERTa (Liu
et al. 2019) is the same network; its positions start at ``pad_token_id + 1``
(``position_offset``). GPT-2 (Radford et al. 2019, §2.3): pre-LN blocks with a final
LayerNorm, learned positions, GELU's tanh form, fused Q/K/V in a ``Conv1D`` (``[in, out]``
weights), tied output embedding. Neither scales token lookups by sqrt(E)
(``embed_scale=False``).
"""

from __future__ import annotations

import logging

from seqjax.convert import mapping as m
from seqjax.models.transformer import TransformerConfig, TransformerLM

# transformers' default dropout (BertConfig, GPT2Config, T5Config) when config.json omits it.
HF_DROPOUT = 0.1

# Hugging Face ``hidden_act`` / ``activation_function`` -> ``TransformerConfig.activation``.
HF_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}
SX_ACTIVATIONS = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu", "silu": "silu"}


def activation(hf_name: str, field: str) -> str:
    """The seqjax activation of a Hugging Face one (one-sentence error naming ``field``)."""
    if hf_name not in HF_ACTIVATIONS:
        raise ValueError(
            f"config.json {field}={hf_name!r} is not supported; valid: {sorted(HF_ACTIVATIONS)}"
        )
    return HF_ACTIVATIONS[hf_name]


def _ln(sx, hf):
    return [m.copy((*sx, "scale"), hf + ".weight"), m.copy((*sx, "bias"), hf + ".bias")]


def _dense(sx, hf, *, torch_linear=True):
    kernel = m.linear if torch_linear else m.copy
    return [kernel((*sx, "kernel"), hf + ".weight"), m.copy((*sx, "bias"), hf + ".bias")]


# --- BERT / RoBERTa ----------------------------------------------------------------------


def bert_config(hf: dict, roberta: bool, max_len: int | None = None) -> TransformerConfig:
    """The ``TransformerConfig`` of a BERT / RoBERTa ``config.json`` (``max_len`` is unused:
    the learned position table keeps all its rows)."""
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(
            f"config.json position_embedding_type={hf['position_embedding_type']!r} is not "
            "supported; valid: ['absolute']"
        )
    act = activation(hf.get("hidden_act", "gelu"), "hidden_act")
    if act != "gelu":
        raise ValueError(
            f"config.json hidden_act={hf['hidden_act']!r} is not supported for the masked-LM "
            "head (seqjax's MLMHead uses the exact GELU); valid: ['gelu']"
        )
    positions = hf.get("max_position_embeddings", 512)
    pad = hf.get("pad_token_id", 1 if roberta else 0)
    return TransformerConfig(
        vocab_size=hf["vocab_size"],
        num_layers=hf["num_hidden_layers"],
        num_heads=hf["num_attention_heads"],
        d_model=hf["hidden_size"],
        d_ff=hf.get("intermediate_size", 4 * hf["hidden_size"]),
        max_len=positions,
        positional="learned",
        tie_embeddings=hf.get("tie_word_embeddings", True),
        causal=False,
        mlm_head_transform=True,
        pad_id=pad,
        norm_position="post",
        norm_eps=hf.get("layer_norm_eps", 1e-12),
        activation=act,
        attention_bias=True,
        embed_scale=False,
        embed_norm=True,
        type_vocab_size=hf.get("type_vocab_size", 2),
        position_offset=pad + 1 if roberta else 0,
        dropout_rate=hf.get("hidden_dropout_prob", HF_DROPOUT),
        attention_dropout_rate=hf.get("attention_probs_dropout_prob", HF_DROPOUT),
    )


def bert_hf_config(cfg: TransformerConfig, roberta: bool) -> dict:
    """The ``config.json`` of a BERT / RoBERTa-layout ``TransformerConfig``."""
    name = "Roberta" if roberta else "Bert"
    return {
        "architectures": [f"{name}ForMaskedLM"],
        "model_type": name.lower(),
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "intermediate_size": cfg.dim_ff,
        "hidden_act": SX_ACTIVATIONS[cfg.activation],
        "max_position_embeddings": cfg.max_len,
        "type_vocab_size": cfg.type_vocab_size,
        "layer_norm_eps": cfg.norm_eps,
        "pad_token_id": cfg.pad_id if cfg.pad_id is not None else 0,
        "tie_word_embeddings": cfg.tie_embeddings,
        "position_embedding_type": "absolute",
        "hidden_dropout_prob": cfg.dropout_rate,
        "attention_probs_dropout_prob": cfg.attention_dropout_rate,
        "initializer_range": 0.02,
    }


def bert_rules(
    cfg: TransformerConfig, roberta: bool, prefix: str | None = None, tensors=None
) -> list:
    """The rules of a BERT / RoBERTa masked-LM (``prefix``: the encoder's, default
    ``bert.`` / ``roberta.``; ``tensors``: the names in the file being imported, None when
    exporting)."""
    p = prefix if prefix is not None else ("roberta." if roberta else "bert.")
    h, enc = cfg.num_heads, ("encoder",)
    rules = [
        m.copy((*enc, "embed", "embedding"), p + "embeddings.word_embeddings.weight"),
        m.copy((*enc, "pos_embed"), p + "embeddings.position_embeddings.weight"),
        *_ln((*enc, "ln_embed"), p + "embeddings.LayerNorm"),
    ]
    if cfg.type_vocab_size:
        rules.append(m.copy((*enc, "type_embed"), p + "embeddings.token_type_embeddings.weight"))
    for i in range(cfg.num_layers):
        lay, b = f"{p}encoder.layer.{i}.", (*enc, f"block_{i}")
        for q in ("query", "key", "value"):
            hf = f"{lay}attention.self.{q}"
            rules.append(
                m.heads_in((*b, "attn", q, "kernel"), hf + ".weight", h, torch_linear=True)
            )
            rules.append(m.heads_bias((*b, "attn", q, "bias"), hf + ".bias", h))
        out = lay + "attention.output.dense"
        rules += [
            m.heads_out((*b, "attn", "out", "kernel"), out + ".weight", h, torch_linear=True),
            m.copy((*b, "attn", "out", "bias"), out + ".bias"),
            *_ln((*b, "ln_attn"), lay + "attention.output.LayerNorm"),
            *_dense((*b, "mlp", "core", "up"), lay + "intermediate.dense"),
            *_dense((*b, "mlp", "core", "down"), lay + "output.dense"),
            *_ln((*b, "ln_mlp"), lay + "output.LayerNorm"),
        ]
    head = "lm_head." if roberta else "cls.predictions."
    transform, ln = (
        ("dense", "layer_norm") if roberta else ("transform.dense", "transform.LayerNorm")
    )
    rules += [
        *_dense(("mlm_head", "transform"), head + transform),
        *_ln(("mlm_head", "ln"), head + ln),
    ]
    # The output bias: ``decoder.bias`` (what the forward pass adds) where saved, else the
    # head's ``bias`` (tied to it when the embeddings are); the export writes both.
    both = (head + "bias", head + "decoder.bias")
    if tensors is None or all(n in tensors for n in both):
        rules.append(m.Rule((("mlm_head", "bias"),), both, lambda a, b: (b,), lambda x: (x, x)))
    else:
        name = both[1] if both[1] in tensors else both[0]
        rules.append(m.copy(("mlm_head", "bias"), name))
    if not cfg.tie_embeddings:
        rules.append(m.linear(("mlm_head", "decoder", "kernel"), head + "decoder.weight"))
    return rules


# --- GPT-2 -------------------------------------------------------------------------------


def gpt2_config(hf: dict, max_len: int | None = None) -> TransformerConfig:
    """The ``TransformerConfig`` of a GPT-2 ``config.json`` (``max_len`` unused, as BERT's)."""
    for field, ok in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False)):
        if hf.get(field, ok) != ok:
            raise ValueError(f"config.json {field}={hf[field]!r} is not supported; valid: [{ok}]")
    e = hf.get("n_embd", 768)
    resid = hf.get("resid_pdrop", HF_DROPOUT)
    embd = hf.get("embd_pdrop", HF_DROPOUT)
    if embd != resid:  # seqjax has one rate for both
        logging.warning("convert: GPT-2 embd_pdrop=%s is not carried; seqjax drops the "
                        "embeddings at resid_pdrop=%s", embd, resid)  # fmt: skip
    return TransformerConfig(
        vocab_size=hf["vocab_size"],
        num_layers=hf.get("n_layer", 12),
        num_heads=hf.get("n_head", 12),
        d_model=e,
        d_ff=hf.get("n_inner") or 4 * e,
        max_len=hf.get("n_positions", 1024),
        positional="learned",
        tie_embeddings=hf.get("tie_word_embeddings", True),
        causal=True,
        norm_eps=hf.get("layer_norm_epsilon", 1e-5),
        activation=activation(hf.get("activation_function", "gelu_new"), "activation_function"),
        attention_bias=True,
        embed_scale=False,
        dropout_rate=resid,
        attention_dropout_rate=hf.get("attn_pdrop", HF_DROPOUT),
    )


def gpt2_hf_config(cfg: TransformerConfig) -> dict:
    """The ``config.json`` of a GPT-2-layout ``TransformerConfig``."""
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": cfg.vocab_size,
        "n_embd": cfg.d_model,
        "n_layer": cfg.num_layers,
        "n_head": cfg.num_heads,
        "n_inner": cfg.dim_ff,
        "n_positions": cfg.max_len,
        "activation_function": SX_ACTIVATIONS[cfg.activation],
        "layer_norm_epsilon": cfg.norm_eps,
        "tie_word_embeddings": cfg.tie_embeddings,
        "resid_pdrop": cfg.dropout_rate,
        "embd_pdrop": cfg.dropout_rate,
        "attn_pdrop": cfg.attention_dropout_rate,
        # GPT-2's <|endoftext|> is its last id; an exported source's own ids replace these
        # (``convert.save(..., source=folder)``).
        "bos_token_id": cfg.vocab_size - 1,
        "eos_token_id": cfg.vocab_size - 1,
    }


def gpt2_rules(cfg: TransformerConfig, prefix: str = "transformer.") -> list:
    """The rules of a GPT-2 LM (``Conv1D`` weights are ``[in, out]``: no transposes)."""
    p, h, enc = prefix, cfg.num_heads, ("encoder",)
    rules = [
        m.copy((*enc, "embed", "embedding"), p + "wte.weight"),
        m.copy((*enc, "pos_embed"), p + "wpe.weight"),
    ]
    for i in range(cfg.num_layers):
        lay, b = f"{p}h.{i}.", (*enc, f"block_{i}")
        attn = [(*b, "attn", q) for q in ("query", "key", "value")]
        rules += [
            *_ln((*b, "ln_attn"), lay + "ln_1"),
            m.fused_qkv(
                tuple((*a, "kernel") for a in attn), lay + "attn.c_attn.weight", h, bias=False
            ),  # fmt: skip
            m.fused_qkv(
                tuple((*a, "bias") for a in attn), lay + "attn.c_attn.bias", h, bias=True
            ),  # fmt: skip
            m.heads_out(
                (*b, "attn", "out", "kernel"), lay + "attn.c_proj.weight", h, torch_linear=False
            ),  # fmt: skip
            m.copy((*b, "attn", "out", "bias"), lay + "attn.c_proj.bias"),
            *_ln((*b, "ln_mlp"), lay + "ln_2"),
            *_dense((*b, "mlp", "core", "up"), lay + "mlp.c_fc", torch_linear=False),
            *_dense((*b, "mlp", "core", "down"), lay + "mlp.c_proj", torch_linear=False),
        ]
    rules += _ln((*enc, "ln_final"), p + "ln_f")
    if not cfg.tie_embeddings:
        rules.append(m.linear(("head", "kernel"), "lm_head.weight"))
    return rules


def make_model(cfg: TransformerConfig) -> TransformerLM:
    return TransformerLM(cfg)
