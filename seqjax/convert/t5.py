"""T5 (Raffel et al. 2020) <-> ``EncoderDecoder``.

T5's layers are pre-norm with RMSNorm (a scale, no mean and no bias; §2.1 "a simplified
version of layer normalization"), attention has no biases and no 1/sqrt(D) scaling (folded
into the query initialization: ``attention_scale=1.0``), positions are only the bucketed
relative bias of each stack's self-attention (``positional="t5_bias"``; cross-attention has
none), embeddings are shared and unscaled, and the feed-forward is ReLU (T5 1.0) or gated
GELU (T5 1.1, ``feed_forward_proj="gated-gelu"``: Shazeer 2020 eq. 6), bias-free. With tied
embeddings the decoder output is scaled by E^-1/2 before the logits
(``rescale_tied_output``).

T5 keeps one relative-bias table per stack (in its first layer) shared by all layers;
seqjax gives each self-attention layer its own, so the import copies the table into every
layer (the same function) and the export requires the layers' tables to be equal.
"""

from __future__ import annotations

import numpy as np

from seqjax.convert import mapping as m
from seqjax.convert.encoders import HF_DROPOUT, SX_ACTIVATIONS, activation
from seqjax.models.encoder_decoder import EncoderDecoder
from seqjax.models.encoder_decoder_config import EncoderDecoderConfig


def t5_config(hf: dict, max_len: int | None = None) -> EncoderDecoderConfig:
    """The ``EncoderDecoderConfig`` of a T5 ``config.json``."""
    proj = hf.get("feed_forward_proj", "relu")
    gated = proj.startswith("gated-")
    act_name = hf.get("dense_act_fn", proj.split("-")[-1])
    if act_name == "gelu" and gated:  # Hugging Face's T5 1.1 "gated-gelu" means gelu_new
        act_name = "gelu_new"
    length = max_len or hf.get("n_positions", 512)
    tied = hf.get("tie_word_embeddings", True)
    dropout = hf.get("dropout_rate", HF_DROPOUT)  # T5 drops attention probabilities with it too
    return EncoderDecoderConfig(
        vocab_size=hf["vocab_size"],
        encoder_layers=hf["num_layers"],
        decoder_layers=hf.get("num_decoder_layers") or hf["num_layers"],
        num_heads=hf["num_heads"],
        d_model=hf["d_model"],
        head_dim=hf["d_kv"],
        d_ff=hf["d_ff"],
        max_source_len=length,
        max_target_len=length,
        share_embeddings=True,
        tie_embeddings=tied,
        norm_position="pre",
        positional="t5_bias",
        t5_buckets=hf.get("relative_attention_num_buckets", 32),
        t5_max_distance=hf.get("relative_attention_max_distance", 128),
        norm_type="rmsnorm",
        norm_eps=hf.get("layer_norm_epsilon", 1e-6),
        activation=activation(act_name, "dense_act_fn"),
        mlp_gated=gated,
        mlp_bias=False,
        attention_scale=1.0,
        embed_scale=False,
        rescale_tied_output=hf.get("scale_decoder_outputs", tied),
        dropout_rate=dropout,
        attention_dropout_rate=dropout,
        pad_id=int(hf.get("pad_token_id", 0) or 0),
        decoder_start_id=int(hf.get("decoder_start_token_id", 0) or 0),
    )


def t5_hf_config(cfg: EncoderDecoderConfig) -> dict:
    """The ``config.json`` of a T5-layout ``EncoderDecoderConfig``."""
    act = SX_ACTIVATIONS[cfg.activation]
    return {
        "architectures": ["T5ForConditionalGeneration"],
        "model_type": "t5",
        "vocab_size": cfg.vocab_size,
        "d_model": cfg.d_model,
        "d_kv": cfg.head_dim or cfg.d_model // cfg.num_heads,
        "d_ff": cfg.d_ff or 4 * cfg.d_model,
        "num_layers": cfg.encoder_layers,
        "num_decoder_layers": cfg.decoder_layers,
        "num_heads": cfg.num_heads,
        "relative_attention_num_buckets": cfg.t5_buckets,
        "relative_attention_max_distance": cfg.t5_max_distance,
        "layer_norm_epsilon": cfg.norm_eps,
        "feed_forward_proj": ("gated-" if cfg.mlp_gated else "") + act.replace("gelu_new", "gelu"),
        "dense_act_fn": act,
        "is_gated_act": cfg.mlp_gated,
        "tie_word_embeddings": cfg.tie_embeddings,
        "scale_decoder_outputs": cfg.rescale_tied_output,
        "n_positions": cfg.max_source_len,
        "dropout_rate": cfg.dropout_rate,
        "is_encoder_decoder": True,
        "pad_token_id": cfg.pad_id,
        "eos_token_id": 1,
        "decoder_start_token_id": cfg.decoder_start_id,
    }


def _attention(sx, hf, h):
    return [
        m.heads_in((*sx, "query", "kernel"), hf + ".q.weight", h, torch_linear=True),
        m.heads_in((*sx, "key", "kernel"), hf + ".k.weight", h, torch_linear=True),
        m.heads_in((*sx, "value", "kernel"), hf + ".v.weight", h, torch_linear=True),
        m.heads_out((*sx, "out", "kernel"), hf + ".o.weight", h, torch_linear=True),
    ]


def _ffn(sx, hf, gated):
    if gated:  # act(x wi_0) * (x wi_1): wi_0 is seqjax's activated "gate", wi_1 its "up"
        up = [m.linear((*sx, "gate", "kernel"), hf + ".wi_0.weight"),
              m.linear((*sx, "up", "kernel"), hf + ".wi_1.weight")]  # fmt: skip
    else:
        up = [m.linear((*sx, "up", "kernel"), hf + ".wi.weight")]
    return [*up, m.linear((*sx, "down", "kernel"), hf + ".wo.weight")]


def _shared_bias(sx_layers, hf):
    """One Hugging Face relative-bias table ``[N, H]`` <-> every layer's ``t5_bias``."""
    n = len(sx_layers)

    def back(*tables):
        if all(isinstance(t, np.ndarray) for t in tables):
            for path, t in zip(sx_layers[1:], tables[1:]):
                if not np.array_equal(t, tables[0]):
                    raise ValueError(
                        f"seqjax parameter {'/'.join(path)} differs from layer 0's relative "
                        "bias; T5's layout shares one table per stack, so it cannot be exported"
                    )
        return (tables[0],)

    return m.Rule(tuple(sx_layers), (hf,), lambda t: (t,) * n, back)


def t5_rules(cfg: EncoderDecoderConfig) -> list:
    """The rules of a T5 encoder-decoder with its LM head."""
    h, gated = cfg.num_heads, cfg.mlp_gated
    rules = [m.copy(("embed", "embedding"), "shared.weight")]
    for stack, n in (("encoder", cfg.encoder_layers), ("decoder", cfg.decoder_layers)):
        biases = []
        for i in range(n):
            lay, b = f"{stack}.block.{i}.layer.", (stack, f"layer_{i}")
            rules += _attention((*b, "attn"), lay + "0.SelfAttention", h)
            rules.append(m.copy((*b, "ln_attn", "scale"), lay + "0.layer_norm.weight"))
            biases.append((*b, "attn", "t5_bias"))
            ffn = 1
            if stack == "decoder":
                rules += _attention((*b, "cross_attn"), lay + "1.EncDecAttention", h)
                rules.append(m.copy((*b, "ln_cross", "scale"), lay + "1.layer_norm.weight"))
                ffn = 2
            rules += _ffn((*b, "mlp", "core"), f"{lay}{ffn}.DenseReluDense", gated)
            rules.append(m.copy((*b, "ln_mlp", "scale"), f"{lay}{ffn}.layer_norm.weight"))
        hf_bias = f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
        rules.append(_shared_bias(biases, hf_bias))
        rules.append(m.copy((stack, "ln_final", "scale"), f"{stack}.final_layer_norm.weight"))
    if not cfg.tie_embeddings:
        rules.append(m.linear(("head", "kernel"), "lm_head.weight"))
    return rules


def make_model(cfg: EncoderDecoderConfig) -> EncoderDecoder:
    return EncoderDecoder(cfg)
