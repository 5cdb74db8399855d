"""GPT-1 as Hugging Face architectures (Radford et al. 2018): ``OpenAIGPTLMHeadModel`` /
``OpenAIGPTModel`` <-> ``TransformerLM`` and ``OpenAIGPTDoubleHeadsModel`` <->
``seqjax.models.gpt1.DoubleHeadsLM`` (``multiple_choice_head.summary``: the choice head).

Layout: ``transformer.tokens_embed``, ``transformer.positions_embed``, ``transformer.h.{i}``
with ``attn.c_attn`` (fused Q/K/V, ``Conv1D`` ``[in, out]``), ``attn.c_proj``, ``ln_1`` (after
attention), ``mlp.c_fc``, ``mlp.c_proj``, ``ln_2``; no final LayerNorm; a tied output layer.
"""

from __future__ import annotations

import jax.numpy as jnp

from seqjax.convert import encoders, registry
from seqjax.convert import mapping as m
from seqjax.models.gpt1 import DoubleHeadsLM, gpt1_config
from seqjax.models.transformer import TransformerLM

LM, BARE, DOUBLE = "OpenAIGPTLMHeadModel", "OpenAIGPTModel", "OpenAIGPTDoubleHeadsModel"


def openai_gpt_config(hf: dict, max_len: int | None = None):
    """The ``TransformerConfig`` of an OpenAI GPT ``config.json``."""
    del max_len
    return gpt1_config(
        vocab_size=hf["vocab_size"],
        num_layers=hf.get("n_layer", 12),
        num_heads=hf.get("n_head", 12),
        d_model=hf.get("n_embd", 768),
        max_len=hf.get("n_positions", 512),
        norm_eps=hf.get("layer_norm_epsilon", 1e-5),
        dropout_rate=hf.get("resid_pdrop", encoders.HF_DROPOUT),
        attention_dropout_rate=hf.get("attn_pdrop", encoders.HF_DROPOUT),
        activation=encoders.activation(
            {"gelu": "gelu_new"}.get(hf.get("afn", "gelu"), hf.get("afn")), "afn"
        ),
    )


def _hf_config(arch: str):
    def hf_config(cfg) -> dict:
        act = encoders.SX_ACTIVATIONS[cfg.activation]
        return {
            "architectures": [arch],
            "model_type": "openai-gpt",
            "vocab_size": cfg.vocab_size,
            "n_embd": cfg.d_model,
            "n_layer": cfg.num_layers,
            "n_head": cfg.num_heads,
            "n_positions": cfg.max_len,
            "afn": "gelu" if act == "gelu_new" else act,
            "layer_norm_epsilon": cfg.norm_eps,
            "resid_pdrop": cfg.dropout_rate,
            "embd_pdrop": cfg.dropout_rate,
            "attn_pdrop": cfg.attention_dropout_rate,
            "summary_type": "cls_index",
            "summary_use_proj": True,
            "summary_proj_to_labels": True,
            "summary_first_dropout": cfg.dropout_rate,
            "num_labels": 1,
        }

    return hf_config


def _rules(double: bool):
    def rules(cfg, prefix=None, tensors=None) -> list:
        p = "transformer." if prefix is None else prefix
        h, enc = cfg.num_heads, ("encoder",)
        # The tied table: saved as the embedding, the output layer, or both; written as both.
        names, table = (p + "tokens_embed.weight", "lm_head.weight"), (*enc, "embed", "embedding")
        if tensors is None or all(n in tensors for n in names):
            out = [m.Rule((table,), names, lambda a, b: (a,), lambda x: (x, x))]
        else:
            out = [m.copy(table, next((n for n in names if n in tensors), names[0]))]
        out.append(m.copy((*enc, "pos_embed"), p + "positions_embed.weight"))
        for i in range(cfg.num_layers):
            lay, b = f"{p}h.{i}.", (*enc, f"block_{i}")
            qkv = [(*b, "attn", q) for q in ("query", "key", "value")]
            out += [
                m.fused_qkv(
                    tuple((*a, "kernel") for a in qkv), lay + "attn.c_attn.weight", h, bias=False
                ),  # fmt: skip
                m.fused_qkv(
                    tuple((*a, "bias") for a in qkv), lay + "attn.c_attn.bias", h, bias=True
                ),  # fmt: skip
                m.heads_out(
                    (*b, "attn", "out", "kernel"), lay + "attn.c_proj.weight", h, torch_linear=False
                ),  # fmt: skip
                m.copy((*b, "attn", "out", "bias"), lay + "attn.c_proj.bias"),
                m.copy((*b, "ln_attn", "scale"), lay + "ln_1.weight"),
                m.copy((*b, "ln_attn", "bias"), lay + "ln_1.bias"),
                m.copy((*b, "mlp", "core", "up", "kernel"), lay + "mlp.c_fc.weight"),
                m.copy((*b, "mlp", "core", "up", "bias"), lay + "mlp.c_fc.bias"),
                m.copy((*b, "mlp", "core", "down", "kernel"), lay + "mlp.c_proj.weight"),
                m.copy((*b, "mlp", "core", "down", "bias"), lay + "mlp.c_proj.bias"),
                m.copy((*b, "ln_mlp", "scale"), lay + "ln_2.weight"),
                m.copy((*b, "ln_mlp", "bias"), lay + "ln_2.bias"),
            ]
        if double:
            out += [m.linear(("mc_head", "kernel"), "multiple_choice_head.summary.weight"),
                    m.copy(("mc_head", "bias"), "multiple_choice_head.summary.bias")]  # fmt: skip
        return out

    return rules


def _double_inputs(cfg) -> tuple:
    return jnp.ones((1, 2, 4), jnp.int32), jnp.zeros((1, 2), jnp.int32)


def _arch(name, architectures, double):
    return registry.Architecture(
        name=name,
        architectures=architectures,
        model_type="openai-gpt",
        config=openai_gpt_config,
        hf_config=_hf_config(architectures[0]),
        rules=_rules(double),
        make_model=DoubleHeadsLM if double else TransformerLM,
        example_inputs=_double_inputs if double else registry.token_ids,
        prefix_anchor="positions_embed.weight",
    )


OPENAI_GPT = registry.register(_arch("openai_gpt", (LM, BARE), False))
OPENAI_GPT_DOUBLE = registry.register(_arch("openai_gpt_double", (DOUBLE,), True))
