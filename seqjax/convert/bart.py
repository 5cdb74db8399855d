"""BART (Lewis et al. 2020, §2.1) <-> ``EncoderDecoder`` with BART's layout options.

BART is the Transformer encoder-decoder of Vaswani et al. 2017 with post-LN layers, GELU
(exact), biases on every projection, one shared token table (tied output), learned
positions in tables ``max_position_embeddings + 2`` long read from row ``position + 2``
(fairseq's padding offset: ``position_offset=2``), a LayerNorm on each stack's embedding
sum (``embed_norm``), token lookups scaled by sqrt(E) only with ``scale_embedding``
(``embed_scale``; off in the released models) and a bias on the output logits
(``final_logits_bias``, zeros in the released models, kept for exactness).

Hugging Face names: ``model.shared`` (also written as ``model.{encoder,decoder}.
embed_tokens``), ``model.{encoder,decoder}.embed_positions``, ``layernorm_embedding``,
``layers.{i}.self_attn.{q,k,v,out}_proj``, ``self_attn_layer_norm``, the decoder's
``encoder_attn`` and ``encoder_attn_layer_norm``, ``fc1``, ``fc2``, ``final_layer_norm``, and
``final_logits_bias`` ``[1, V]``. seqjax masks source padding by id 0 (BART's pad id is 1:
pass unpadded sources, or remap ids).
"""

from __future__ import annotations

from seqjax.convert import mapping as m
from seqjax.convert.encoders import HF_DROPOUT, SX_ACTIVATIONS, activation
from seqjax.models.encoder_decoder import EncoderDecoder
from seqjax.models.encoder_decoder_config import EncoderDecoderConfig

OFFSET = 2  # BartLearnedPositionalEmbedding's offset


def bart_config(hf: dict, max_len: int | None = None) -> EncoderDecoderConfig:
    """The ``EncoderDecoderConfig`` of a BART ``config.json`` (``max_len`` unused: the
    position tables keep all their rows)."""
    del max_len
    if hf.get("d_model", 1024) % hf.get("encoder_attention_heads", 16):
        raise ValueError("config.json d_model must be divisible by encoder_attention_heads")
    for field in ("decoder_attention_heads", "decoder_ffn_dim"):
        enc = field.replace("decoder", "encoder")
        if hf.get(field, 0) != hf.get(enc, 0):
            raise ValueError(
                f"config.json {field}={hf.get(field)} differs from {enc}={hf.get(enc)}; "
                "seqjax's encoder-decoder has one value for both stacks"
            )
    positions = hf.get("max_position_embeddings", 1024)
    return EncoderDecoderConfig(
        vocab_size=hf["vocab_size"],
        encoder_layers=hf.get("encoder_layers", 12),
        decoder_layers=hf.get("decoder_layers", 12),
        num_heads=hf.get("encoder_attention_heads", 16),
        d_model=hf.get("d_model", 1024),
        d_ff=hf.get("encoder_ffn_dim", 4096),
        max_source_len=positions,
        max_target_len=positions,
        share_embeddings=True,
        tie_embeddings=hf.get("tie_word_embeddings", True),
        norm_position="post",
        positional="learned",
        norm_eps=1e-5,
        activation=activation(hf.get("activation_function", "gelu"), "activation_function"),
        attention_bias=True,
        embed_scale=bool(hf.get("scale_embedding", False)),
        embed_norm=True,
        position_offset=OFFSET,
        final_logits_bias=True,
        dropout_rate=hf.get("dropout", HF_DROPOUT),
        attention_dropout_rate=hf.get("attention_dropout", 0.0),
        # BART's <s> is id 0 (the first token of every input): padding is the folder's (1)
        pad_id=int(hf.get("pad_token_id", 1)),
        decoder_start_id=int(hf.get("decoder_start_token_id", 2)),
    )


def bart_hf_config(cfg: EncoderDecoderConfig) -> dict:
    """The ``config.json`` of a BART-layout ``EncoderDecoderConfig``."""
    return {
        "architectures": ["BartForConditionalGeneration"],
        "model_type": "bart",
        "vocab_size": cfg.vocab_size,
        "d_model": cfg.d_model,
        "encoder_layers": cfg.encoder_layers,
        "decoder_layers": cfg.decoder_layers,
        "encoder_attention_heads": cfg.num_heads,
        "decoder_attention_heads": cfg.num_heads,
        "encoder_ffn_dim": cfg.d_ff or 4 * cfg.d_model,
        "decoder_ffn_dim": cfg.d_ff or 4 * cfg.d_model,
        "max_position_embeddings": cfg.max_source_len,
        "activation_function": SX_ACTIVATIONS[cfg.activation],
        "scale_embedding": cfg.embed_scale,
        "tie_word_embeddings": cfg.tie_embeddings,
        "dropout": cfg.dropout_rate,
        "attention_dropout": cfg.attention_dropout_rate,
        "activation_dropout": 0.0,
        "is_encoder_decoder": True,
        "pad_token_id": cfg.pad_id,
        "bos_token_id": 0,
        "eos_token_id": 2,
        "decoder_start_token_id": cfg.decoder_start_id,
        "forced_eos_token_id": 2,
    }


def _ln(sx, hf):
    return [m.copy((*sx, "scale"), hf + ".weight"), m.copy((*sx, "bias"), hf + ".bias")]


def _dense(sx, hf):
    return [m.linear((*sx, "kernel"), hf + ".weight"), m.copy((*sx, "bias"), hf + ".bias")]


def _attention(sx, hf, h):
    rules = []
    for q, name in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj")):
        rules.append(m.heads_in((*sx, q, "kernel"), f"{hf}.{name}.weight", h, torch_linear=True))
        rules.append(m.heads_bias((*sx, q, "bias"), f"{hf}.{name}.bias", h))
    return rules + [
        m.heads_out((*sx, "out", "kernel"), hf + ".out_proj.weight", h, torch_linear=True),
        m.copy((*sx, "out", "bias"), hf + ".out_proj.bias"),
    ]


def _tokens(tensors) -> m.Rule:
    """``model.shared`` (and the stacks' ``embed_tokens`` where the file has them; the
    export writes all three, as tied copies)."""
    names = ("model.shared.weight", "model.encoder.embed_tokens.weight",
             "model.decoder.embed_tokens.weight")  # fmt: skip
    sx = ("embed", "embedding")
    if tensors is None or all(n in tensors for n in names):
        return m.Rule((sx,), names, lambda a, b, c: (a,), lambda x: (x, x, x))
    return m.copy(sx, next(n for n in names if n in tensors))


def bart_rules(cfg: EncoderDecoderConfig, prefix=None, tensors=None) -> list:
    """The rules of ``BartForConditionalGeneration``."""
    del prefix
    h = cfg.num_heads
    rules = [
        _tokens(tensors),
        m.Rule((("final_logits_bias",),), ("final_logits_bias",),
               lambda b: (b.reshape(-1),), lambda b: (b.reshape(1, -1),)),
    ]  # fmt: skip
    for stack, n, side in (("encoder", cfg.encoder_layers, "source"),
                           ("decoder", cfg.decoder_layers, "target")):  # fmt: skip
        p = f"model.{stack}."
        rules.append(m.copy((f"{side}_pos_embed",), p + "embed_positions.weight"))
        rules += _ln((f"ln_{side}_embed",), p + "layernorm_embedding")
        for i in range(n):
            lay, b = f"{p}layers.{i}.", (stack, f"layer_{i}")
            rules += _attention((*b, "attn"), lay + "self_attn", h)
            rules += _ln((*b, "ln_attn"), lay + "self_attn_layer_norm")
            if stack == "decoder":
                rules += _attention((*b, "cross_attn"), lay + "encoder_attn", h)
                rules += _ln((*b, "ln_cross"), lay + "encoder_attn_layer_norm")
            rules += _dense((*b, "mlp", "core", "up"), lay + "fc1")
            rules += _dense((*b, "mlp", "core", "down"), lay + "fc2")
            rules += _ln((*b, "ln_mlp"), lay + "final_layer_norm")
    if not cfg.tie_embeddings:
        rules.append(m.linear(("head", "kernel"), "lm_head.weight"))
    return rules


def make_model(cfg: EncoderDecoderConfig) -> EncoderDecoder:
    return EncoderDecoder(cfg)
