"""ALBERT as a Hugging Face architecture: ``AlbertForPreTraining`` / ``AlbertForMaskedLM`` /
``AlbertModel`` <-> ``seqjax.models.albert.AlbertLM`` (Lan et al. 2020).

Layout: ``albert.embeddings.*`` (word / position / token-type tables ``[*, W]`` and their
LayerNorm), ``albert.encoder.embedding_hidden_mapping_in`` (``W -> E``), then
``albert.encoder.albert_layer_groups.{g}.albert_layers.{j}`` (attention ``query/key/value/
dense/LayerNorm``, ``ffn``, ``ffn_output``, ``full_layer_layer_norm``: one post-LN block per
group layer, however often the stack applies it), ``albert.pooler`` and
``sop_classifier.classifier`` (``AlbertForPreTraining``: ``heads.PairHead``), and
``predictions.{dense, LayerNorm, bias}`` (the masked-LM head on the tied ``[V, W]`` table).
"""

from __future__ import annotations

from seqjax.convert import encoders, registry
from seqjax.convert import mapping as m
from seqjax.models.albert import AlbertConfig, AlbertLM

PRETRAINING, MASKED_LM, BARE = "AlbertForPreTraining", "AlbertForMaskedLM", "AlbertModel"


def albert_config(hf: dict, max_len: int | None = None) -> AlbertConfig:
    """The ``AlbertConfig`` of an ALBERT ``config.json`` (``max_len`` unused: the learned
    position table keeps all its rows)."""
    del max_len
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(
            f"config.json position_embedding_type={hf['position_embedding_type']!r} is not "
            "supported; valid: ['absolute']"
        )
    archs = list(hf.get("architectures") or [MASKED_LM])
    return AlbertConfig(
        vocab_size=hf["vocab_size"],
        num_layers=hf.get("num_hidden_layers", 12),
        num_heads=hf.get("num_attention_heads", 64),
        d_model=hf.get("hidden_size", 4096),
        d_ff=hf.get("intermediate_size", 16384),
        max_len=hf.get("max_position_embeddings", 512),
        tie_embeddings=hf.get("tie_word_embeddings", True),
        pad_id=hf.get("pad_token_id", 0),
        norm_eps=hf.get("layer_norm_eps", 1e-12),
        activation=encoders.activation(hf.get("hidden_act", "gelu_new"), "hidden_act"),
        type_vocab_size=hf.get("type_vocab_size", 2),
        embed_dim=hf.get("embedding_size", 128),
        num_hidden_groups=hf.get("num_hidden_groups", 1),
        inner_group_num=hf.get("inner_group_num", 1),
        dropout_rate=hf.get("hidden_dropout_prob", 0.0),  # AlbertConfig's defaults: 0
        attention_dropout_rate=hf.get("attention_probs_dropout_prob", 0.0),
        pair_head=archs[0] == PRETRAINING,
        pair_classes=len(hf.get("id2label") or {0: 0, 1: 1}) if archs[0] == PRETRAINING else 2,
    )


def albert_hf_config(cfg: AlbertConfig) -> dict:
    """The ``config.json`` of an ``AlbertConfig`` (``AlbertForPreTraining`` with the
    sentence-order head, else ``AlbertForMaskedLM``)."""
    return {
        "architectures": [PRETRAINING if cfg.pair_head else MASKED_LM],
        "model_type": "albert",
        "vocab_size": cfg.vocab_size,
        "embedding_size": cfg.embed_dim,
        "hidden_size": cfg.d_model,
        "num_hidden_layers": cfg.num_layers,
        "num_hidden_groups": cfg.num_hidden_groups,
        "inner_group_num": cfg.inner_group_num,
        "num_attention_heads": cfg.num_heads,
        "intermediate_size": cfg.dim_ff,
        "hidden_act": encoders.SX_ACTIVATIONS[cfg.activation],
        "max_position_embeddings": cfg.max_len,
        "type_vocab_size": cfg.type_vocab_size,
        "layer_norm_eps": cfg.norm_eps,
        "pad_token_id": cfg.pad_id if cfg.pad_id is not None else 0,
        "tie_word_embeddings": cfg.tie_embeddings,
        "position_embedding_type": "absolute",
        "hidden_dropout_prob": cfg.dropout_rate,
        "attention_probs_dropout_prob": cfg.attention_dropout_rate,
        "classifier_dropout_prob": cfg.dropout_rate,
        "num_labels": cfg.pair_classes,
        "initializer_range": 0.02,
    }


def _ln(sx, hf):
    return [m.copy((*sx, "scale"), hf + ".weight"), m.copy((*sx, "bias"), hf + ".bias")]


def _dense(sx, hf):
    return [m.linear((*sx, "kernel"), hf + ".weight"), m.copy((*sx, "bias"), hf + ".bias")]


def block_rules(b: tuple, lay: str, heads: int) -> list:
    """One ALBERT layer (``lay``: its name prefix) <-> a post-LN ``transformer.Block`` at
    seqjax path ``b``."""
    rules = []
    for q in ("query", "key", "value"):
        hf = f"{lay}attention.{q}"
        rules.append(
            m.heads_in((*b, "attn", q, "kernel"), hf + ".weight", heads, torch_linear=True)
        )
        rules.append(m.heads_bias((*b, "attn", q, "bias"), hf + ".bias", heads))
    return rules + [
        m.heads_out(
            (*b, "attn", "out", "kernel"), lay + "attention.dense.weight", heads, torch_linear=True
        ),  # fmt: skip
        m.copy((*b, "attn", "out", "bias"), lay + "attention.dense.bias"),
        *_ln((*b, "ln_attn"), lay + "attention.LayerNorm"),
        *_dense((*b, "mlp", "core", "up"), lay + "ffn"),
        *_dense((*b, "mlp", "core", "down"), lay + "ffn_output"),
        *_ln((*b, "ln_mlp"), lay + "full_layer_layer_norm"),
    ]


def albert_rules(cfg: AlbertConfig, prefix: str | None = None, tensors=None) -> list:
    """The rules of an ALBERT model (``prefix``: the encoder's, default ``albert.``;
    ``tensors``: the file's, None when exporting)."""
    p, enc = ("albert." if prefix is None else prefix), ("encoder",)
    rules = [
        m.copy((*enc, "embed", "embedding"), p + "embeddings.word_embeddings.weight"),
        m.copy((*enc, "pos_embed"), p + "embeddings.position_embeddings.weight"),
        *_ln((*enc, "ln_embed"), p + "embeddings.LayerNorm"),
        *_dense((*enc, "embed_proj"), p + "encoder.embedding_hidden_mapping_in"),
    ]
    if cfg.type_vocab_size:
        rules.append(m.copy((*enc, "type_embed"), p + "embeddings.token_type_embeddings.weight"))
    for g in range(cfg.num_hidden_groups):
        for j in range(cfg.inner_group_num):
            lay = f"{p}encoder.albert_layer_groups.{g}.albert_layers.{j}."
            rules += block_rules((*enc, f"group_{g}_layer_{j}"), lay, cfg.num_heads)
    if cfg.pair_head:
        rules += _dense(("pair_head", "pooler"), p + "pooler")
        rules += _dense(("pair_head", "classifier"), "sop_classifier.classifier")
    rules += [*_dense(("mlm_head", "transform"), "predictions.dense"),
              *_ln(("mlm_head", "ln"), "predictions.LayerNorm")]  # fmt: skip
    both = ("predictions.bias", "predictions.decoder.bias")
    if tensors is None or all(n in tensors for n in both):
        rules.append(m.Rule((("mlm_head", "bias"),), both, lambda a, b: (b,), lambda x: (x, x)))
    else:
        rules.append(m.copy(("mlm_head", "bias"), both[1] if both[1] in tensors else both[0]))
    if not cfg.tie_embeddings:
        rules.append(m.linear(("mlm_head", "decoder", "kernel"), "predictions.decoder.weight"))
    return rules


def make_model(cfg: AlbertConfig) -> AlbertLM:
    return AlbertLM(cfg)


ALBERT = registry.register(
    registry.Architecture(
        name="albert",
        architectures=(PRETRAINING, MASKED_LM, BARE),
        model_type="albert",
        config=albert_config,
        hf_config=albert_hf_config,
        rules=albert_rules,
        make_model=make_model,
        prefix_anchor="embeddings.word_embeddings.weight",
        optional=("mlm_head",),
        family="albert",
    )
)
