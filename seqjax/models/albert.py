"""ALBERT (Lan et al. 2020): BERT with a factorized embedding and cross-layer parameter
sharing, and its sentence-order prediction head.

Legend: B batch, T sequence length, W the embedding width (ALBERT's E), E the hidden width
(ALBERT's H), V vocabulary, C pair classes.

* Factorized embedding parameterization (§3.1): tokens, positions and segments are looked up
  in ``[*, W]`` tables (W < E), normalized, then projected ``W -> E`` (``embed_proj``):
  ``V W + W E`` parameters instead of ``V E``.
* Cross-layer parameter sharing (§3.1): ``num_hidden_groups`` groups of ``inner_group_num``
  post-LN layers (``transformer.Block``); the ``num_layers`` steps of the stack apply group
  ``floor(i G / N)`` (all its layers in turn), so one set of weights runs ``N / G`` times.
  Sharing saves parameters, not activations or FLOPs: every application computes (and, for
  the backward pass, keeps) its own activations, exactly as an unshared stack of the same
  depth does; the gradient of a shared weight is the sum of its applications' gradients.
* The masked-LM head projects back to W (``heads.MLMHead(width=W)``) and uses the tied
  ``[V, W]`` table; the sentence-order head (§4.1: A,B in order vs swapped) is the pooler and
  a two-way classifier on [CLS] (``heads.PairHead``), present with ``pair_head=True``.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax.numpy as jnp

from seqjax.models import layers
from seqjax.models.heads import MLMHead, PairHead
from seqjax.models.transformer import Block, TransformerConfig, attention_cycle


@dataclasses.dataclass(frozen=True)
class AlbertConfig(TransformerConfig):
    """``TransformerConfig`` with ALBERT's layout as defaults (post-LN, biases, learned
    positions, segments, embedding LayerNorm, GELU's tanh form, the masked-LM head) and:

    Attributes:
      embed_dim: W, the width of the token/position/segment tables (ALBERT's
        ``embedding_size``; 128 in every released model).
      num_hidden_groups: G, the number of distinct parameter sets (1: all layers shared).
      inner_group_num: layers in each group, applied in turn at every step of the stack.
      pair_head: the pooler and the sentence-order classifier (``heads.PairHead``).
      pair_classes: that classifier's outputs (2).
    """

    causal: bool = False
    positional: str = "learned"
    norm_position: str = "post"
    norm_eps: float = 1e-12
    activation: str = "gelu_tanh"
    attention_bias: bool = True
    embed_scale: bool = False
    embed_norm: bool = True
    type_vocab_size: int = 2
    mlm_head_transform: bool = True
    embed_dim: int = 128
    num_hidden_groups: int = 1
    inner_group_num: int = 1
    pair_head: bool = False
    pair_classes: int = 2

    def __post_init__(self):
        super().__post_init__()
        for field in ("embed_dim", "num_hidden_groups", "inner_group_num"):
            if int(getattr(self, field)) < 1:
                raise ValueError(f"model.{field}={getattr(self, field)!r} must be >= 1")
        if self.num_hidden_groups > self.num_layers:
            raise ValueError(
                f"model.num_hidden_groups={self.num_hidden_groups} exceeds model.num_layers="
                f"{self.num_layers}; valid: 1..num_layers (groups share the layers)"
            )
        layout = {"norm_position": "post", "reversible": False, "adaptive": False}
        for field, want in layout.items():
            if getattr(self, field) != want:
                raise ValueError(
                    f"model.{field}={getattr(self, field)!r} is not ALBERT's layout; valid: "
                    f"{want!r} (the albert family)"
                )

    def group_of(self, step: int) -> int:
        """The group step ``step`` of the stack applies (Hugging Face's
        ``int(i / (num_hidden_layers / num_hidden_groups))``)."""
        return step * self.num_hidden_groups // self.num_layers


class AlbertEncoder(nn.Module):
    """Factorized embeddings and the shared stack: tokens ``[B, T]`` -> ``([B, T, E], the
    ``[V, W]`` token table, the hidden states after the embedding and each step)``."""

    cfg: AlbertConfig

    @nn.compact
    def __call__(
        self, tokens_BT, *, mask_BS=None, segment_ids=None, positions_BT=None,
        token_types_BT=None, deterministic=True,
    ):  # fmt: skip
        cfg = self.cfg
        init = nn.initializers.normal(0.02)
        embed = nn.Embed(cfg.vocab_size, cfg.embed_dim, embedding_init=init, name="embed")
        x_BTW = embed(tokens_BT)
        if positions_BT is None:
            positions_BT = jnp.arange(tokens_BT.shape[1])[None, :]
        pos_LW = self.param("pos_embed", init, (cfg.max_len, cfg.embed_dim))
        x_BTW = x_BTW + pos_LW[positions_BT + cfg.position_offset]
        if cfg.type_vocab_size:
            types_W = self.param("type_embed", init, (cfg.type_vocab_size, cfg.embed_dim))
            if token_types_BT is None:
                token_types_BT = jnp.zeros(tokens_BT.shape, jnp.int32)
            x_BTW = x_BTW + types_W[token_types_BT]
        if cfg.embed_norm:
            x_BTW = layers.norm(name="ln_embed", cfg=cfg)(x_BTW)
        x_BTW = nn.Dropout(cfg.dropout_rate)(x_BTW, deterministic=deterministic)
        x_BTE = nn.Dense(cfg.d_model, kernel_init=layers.dense_init(), name="embed_proj")(x_BTW)
        x_BTE = x_BTE.astype(cfg.compute_dtype)
        shared = layers.shared_attention_params(self, cfg)
        groups = [
            [Block(cfg, j, False, name=f"group_{g}_layer_{j}") for j in range(cfg.inner_group_num)]
            for g in range(cfg.num_hidden_groups)
        ]
        hidden = [x_BTE]
        for i in range(cfg.num_layers):
            for j, block in enumerate(groups[cfg.group_of(i)]):
                x_BTE = block(
                    x_BTE, mask_BS, segment_ids, deterministic, shared.get(cfg.layer_attention(j))
                )
            hidden.append(x_BTE)
        return x_BTE, embed, tuple(hidden)


class AlbertLM(nn.Module):
    """ALBERT's masked LM: tokens ``[B, T]`` -> float32 logits ``[B, T, V]`` (the mlm task's
    calling convention, as ``TransformerLM``'s).

    ``outputs="pretraining"``: ``(mlm logits [B, T, V], sentence-order logits [B, C])``
    (``cfg.pair_head``); ``outputs="hidden"``: the hidden states ``[B, T, E]`` after the
    embedding projection and after each of the ``num_layers`` steps (feature-based
    transfer).
    """

    cfg: AlbertConfig
    decode: bool = False

    @nn.compact
    def __call__(
        self, tokens_BT, *, segment_ids=None, positions_BT=None, deterministic=True, mask_BT=None,
        token_types_BT=None, outputs: str = "mlm",
    ):  # fmt: skip
        if outputs not in ("mlm", "pretraining", "hidden"):
            raise ValueError(f"outputs={outputs!r} is not one of ('mlm', 'pretraining', 'hidden')")
        cfg = self.cfg
        x_BTE, embed, hidden = AlbertEncoder(cfg, name="encoder")(
            tokens_BT, mask_BS=mask_BT, segment_ids=segment_ids, positions_BT=positions_BT,
            token_types_BT=token_types_BT, deterministic=deterministic,
        )  # fmt: skip
        logits_BTV = MLMHead(cfg, width=cfg.embed_dim, activation=cfg.activation, name="mlm_head")(
            x_BTE, embed
        )
        pair_BC = None
        if cfg.pair_head:
            _, pair_BC = PairHead(cfg.pair_classes, name="pair_head")(x_BTE)
        if outputs == "hidden":
            return hidden
        if outputs == "pretraining":
            if pair_BC is None:
                raise ValueError("outputs='pretraining' needs model.pair_head=True")
            return logits_BTV, pair_BC
        return logits_BTV


def albert_from_needs(config, info, needs) -> AlbertConfig:
    """The ``albert`` family's ``build_config``: ``config.model`` (``model_block("albert")``)
    with the data's vocabulary and padding id; a masked LM (the mlm task), with the
    sentence-order head for the ``mlm_pair`` task (``data.objective='sop'``)."""
    from seqjax.models import from_config, registry

    m = config.model
    pair = {"pair_head": True} if getattr(needs, "task", None) == "mlm_pair" else {}
    return registry.dataclass_from_block(
        AlbertConfig, m, vocab_size=int(info.vocab_size), pad_id=info.pad_id, causal=False,
        **pair,
        adaptive=False,  # config.model.adaptive is the shared block (enabled=False)
        attention=attention_cycle(m.attention, from_config.attention_options(config)),
    )  # fmt: skip


FROM_DATA = ("vocab_size", "pad_id", "axial_shape", "causal", "num_classes")


def albert_block(cfg: AlbertConfig) -> dict:
    """The ``config.model`` fields that rebuild ``cfg`` with ``albert_from_needs`` (the
    family's ``block_of``: ``config.init_from=hf:<an ALBERT folder>``)."""
    skip = set(FROM_DATA) | {"attention", "adaptive"}
    block = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in skip}
    block["attention"] = ",".join(name for name, _ in cfg.attention)
    return block


def _masked_lm(cfg, *, task, decode=False):
    del task
    if decode:
        raise ValueError("the ALBERT masked-LM encoder has no decoding mode")
    return AlbertLM(cfg)


def _register():
    from seqjax.models import registry

    return registry.register(
        registry.Family(
            name="albert",
            doc="ALBERT: factorized embeddings, cross-layer sharing, sentence-order head",
            config_class=AlbertConfig,
            build_config=albert_from_needs,
            modules={"mlm": _masked_lm, "mlm_pair": _masked_lm},
            from_data=FROM_DATA,
            hf_architectures=("AlbertForPreTraining", "AlbertForMaskedLM", "AlbertModel"),
            block_of=albert_block,
        )
    )


ALBERT = _register()
