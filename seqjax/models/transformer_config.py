"""``TransformerConfig``: the static hyper-parameters of ``seqjax.models.transformer``'s
models (checked when built: one sentence naming the field and its valid values), and
``attention_cycle``, the per-layer attention cycle built from config fields."""

from __future__ import annotations

import dataclasses
from typing import Any

from seqjax import attention as attention_lib
from seqjax.attention import score_mod
from seqjax.models import adaptive as adaptive_lib
from seqjax.models import dtype as model_dtype
from seqjax.models import layers

DTYPES = model_dtype.DTYPES  # "auto" | "float32" | "bfloat16" | "float16" (models/dtype.py)
POSITIONALS = ("sinusoidal", "learned", "none")
POSITIONALS += ("axial",)  # row + column (+ channel) of image data (layers.AxialPositions)
POSITIONALS = POSITIONALS + score_mod.SCHEMES  # rope, alibi, t5_bias (in the attention)
POOLINGS = ("mean", "cls")


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Static hyper-parameters of ``TransformerLM`` / ``TransformerClassifier``.

    Attributes:
      vocab_size: V.
      num_layers, num_heads, d_model: N, H, E.
      head_dim: D; 0 means E // H.
      d_ff: feed-forward width; 0 means 4 E.
      max_len: longest sequence (learned positions, decode cache).
      dropout_rate: residual/embedding dropout; attention_dropout_rate: on probabilities.
      attention: per-layer cycle of ``(mechanism name, frozen options)``; layer i uses
        ``attention[i % len(attention)]``.
      positional: "sinusoidal" | "learned" | "none" | "axial" (images: ``axial_shape``).
      positional: "sinusoidal" | "learned" | "none", or a scheme applied in attention
        (``seqjax.attention.score_mod``): "rope" | "alibi" | "t5_bias".
      rope_base: RoPE's base (Su et al. 2021: 10000).
      t5_buckets, t5_max_distance: T5 relative-bias buckets and their range (32, 128).
      adaptive: adaptive input and adaptive softmax (``seqjax.models.adaptive``) with
        ``adaptive_cutoffs``, ``adaptive_div_val`` and ``adaptive_tie_projs``; the LM's
        "logits" are then its exact log-probabilities (tables always tied).
      tie_embeddings: output logits use the token embedding matrix.
      dtype: compute dtype name ("float32" | "bfloat16"); parameters stay float32.
      ff_chunk_size: apply the MLP to chunks of this many positions (0 = whole sequence).
      remat: rematerialize each block in the backward pass.
      reversible: reversible residual layers (Kitaev et al. 2020); see ``reversible.py``.
      causal: decoder attention (LM); the classifier is always bidirectional.
      num_classes, pooling, pad_id: classifier head ("mean" or "cls" pooling; token id
        ``pad_id`` marks padding, None = no padding).

    Options for imported checkpoints (``seqjax.convert``; the defaults are seqjax's own
    model, unchanged):
      norm_position: "pre" (Child et al. 2019 §5.2, with a final norm) or "post" (Vaswani et
        al. 2017 §3.1, BERT: LayerNorm(x + Sublayer(x)), no final norm).
      norm_type, norm_eps: "layernorm" or "rmsnorm" (``layers.norm``) and its epsilon.
      activation, mlp_gated, mlp_bias: the feed-forward's nonlinearity
        (``layers.ACTIVATIONS``), GLU gating and biases (``layers._MlpCore``).
      attention_bias, attention_scale: biases on the Q/K/V/output projections; the logits'
        scale (0: 1/sqrt(D); GPT-Neo: 1.0, no scaling).
      attention_qkv_bias: with ``attention_bias``, whether the Q/K/V projections have biases
        too (GPT-Neo: False, only the output projection has one).
      embed_scale: token lookups times sqrt(E) (Vaswani et al. 2017 §3.4); BERT/GPT-2 off.
      embed_norm: a norm (``ln_embed``) on the embedding sum (BERT, Devlin et al. 2019 §3).
      type_vocab_size: BERT's token-type (segment) embeddings (``type_embed``), 0 = none;
        the ids come from ``token_types_BT`` (default all 0).
      position_offset: learned positions start at this row (RoBERTa: pad id + 1); with a
        ``pad_id`` the positions count the row's non-pad tokens and pads take row
        ``position_offset - 1`` (RoBERTa's, fairseq ``make_positions``), so left or right
        padding leaves the real tokens' positions as they are alone.
      pair_head, pair_classes: BERT's pooler and next-sentence classifier on [CLS]
        (``heads.PairHead``; ``TransformerLM(outputs="pretraining")``), ``pair_classes``
        outputs (2).
    """

    vocab_size: int
    num_layers: int = 2
    num_heads: int = 4
    d_model: int = 128
    head_dim: int = 0
    d_ff: int = 0
    max_len: int = 256
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
    attention: tuple = (("dense", ()),)
    positional: str = "sinusoidal"
    tie_embeddings: bool = True
    dtype: str = "float32"
    ff_chunk_size: int = 0
    remat: bool = False
    reversible: bool = False
    causal: bool = True
    num_classes: int = 0
    pooling: str = "mean"
    pad_id: int | None = 0
    axial_shape: tuple = ()  # positional="axial": the data's image (H, W, C)
    rope_base: float = 10000.0
    t5_buckets: int = 32
    t5_max_distance: int = 128
    adaptive: bool = False
    adaptive_cutoffs: tuple = ()
    adaptive_div_val: float = 1
    adaptive_tie_projs: bool = True
    # BERT's masked-LM head transform before the output layer (``MLMHead``; mlm task only).
    mlm_head_transform: bool = False
    norm_position: str = "pre"
    norm_type: str = "layernorm"
    norm_eps: float = 1e-6
    activation: str = "gelu_tanh"
    mlp_gated: bool = False
    mlp_bias: bool = True
    attention_bias: bool = False
    attention_scale: float = 0.0
    attention_qkv_bias: bool = True
    embed_scale: bool = True
    embed_norm: bool = False
    type_vocab_size: int = 0
    position_offset: int = 0
    pair_head: bool = False
    pair_classes: int = 2

    def __post_init__(self):
        checks = {
            "positional": (self.positional, POSITIONALS),
            "norm_position": (self.norm_position, layers.NORM_POSITIONS),
            "norm_type": (self.norm_type, layers.NORM_TYPES),
            "activation": (self.activation, layers.ACTIVATIONS),
            "dtype": (self.dtype, tuple(DTYPES)),
            "pooling": (self.pooling, POOLINGS),
        }
        for field, (value, valid) in checks.items():
            if value not in valid:
                raise ValueError(f"model.{field}={value!r} is not one of {valid}")
        if self.positional == "axial" and len(self.axial_shape) != 3:
            raise ValueError(
                "model.positional='axial' needs image data (config.data.name one of the image "
                "sets, which give the (height, width, channels) shape); use 'sinusoidal' or "
                "'learned' for other data"
            )
        if self.reversible and self.norm_position == "post":
            raise ValueError(
                "model.norm_position='post' cannot be reversible (model.reversible=True); "
                "valid: norm_position='pre' with reversible"
            )
        for name, opts in self.attention:
            attention_lib.check_options(name, dict(opts))
        score_mod.check_supported(self.positional, self.attention)
        if self.adaptive:
            adaptive_lib.check_cutoffs(
                self.adaptive_cutoffs, self.vocab_size, self.adaptive_div_val
            )
        if self.d_model % self.num_heads and not self.head_dim:
            raise ValueError(
                f"model.d_model={self.d_model} is not divisible by model.num_heads="
                f"{self.num_heads}; set model.head_dim explicitly"
            )

    @property
    def dim_head(self) -> int:
        return self.head_dim or self.d_model // self.num_heads

    @property
    def dim_ff(self) -> int:
        return self.d_ff or 4 * self.d_model

    @property
    def compute_dtype(self):
        return DTYPES[self.dtype]

    def layer_attention(self, i: int) -> tuple[str, tuple]:
        return self.attention[i % len(self.attention)]


def attention_cycle(names: str, options_by_name: Any = None) -> tuple:
    """Builds ``TransformerConfig.attention`` from config fields.

    Args:
      names: a mechanism name or a comma-separated per-layer cycle, e.g. ``"lsh,dense"``.
      options_by_name: mapping mechanism name -> options mapping (``config.model.
        attention_options``); mechanisms without an entry use their defaults.
    """
    options_by_name = options_by_name or {}
    cycle = []
    for name in attention_lib.registry.parse(names):
        attention_lib.spec(name)  # clear error for unknown names
        opts = options_by_name.get(name) if hasattr(options_by_name, "get") else None
        cycle.append(
            (name, layers.freeze_options(opts.to_dict() if hasattr(opts, "to_dict") else opts))
        )
    if not cycle:
        raise ValueError(
            f"model.attention={names!r} names no mechanism; valid: {attention_lib.names()}"
        )
    return tuple(cycle)
