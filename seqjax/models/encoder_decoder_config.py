"""``EncoderDecoderConfig``: the static hyper-parameters of the encoder-decoder of Vaswani et
al. 2017 (``encoder_decoder.py``), validated on construction, and the two stacks' views of it
as the ``TransformerConfig`` their sublayers read.
"""

from __future__ import annotations

import dataclasses

from seqjax import attention as attention_lib
from seqjax.attention import dense as dense_lib
from seqjax.models import layers
from seqjax.models.transformer import DTYPES, TransformerConfig, attention_cycle

PAD_ID = 0
# "t5_bias": no absolute positions, T5's relative bias in every self-attention layer.
POSITIONALS = ("sinusoidal", "learned", "t5_bias")


def _refusal(field: str, name: str) -> str | None:
    """Why stack ``field`` ("encoder_attention" / "decoder_attention") cannot use mechanism
    ``name``, from its declared capabilities (``attention.registry.Mechanism``); None: it can."""
    mech = attention_lib.spec(name)
    if mech.memory_model is not None:  # needs a recurrent memory model, not this one
        return mech.memory_model
    if field == "encoder_attention" and mech.always_causal:
        return "it masks the future, and the encoder is bidirectional (use 'dense')"
    if field == "decoder_attention" and mech.causal_form is not True:
        return mech.causal_form
    return None


@dataclasses.dataclass(frozen=True)
class EncoderDecoderConfig:
    """Static hyper-parameters of ``EncoderDecoder`` (validated on construction).

    Attributes:
      vocab_size: V, one vocabulary for source and target.
      pad_id: the padding id (masked as keys in the source): the data's (seqjax's: 0; a
        Hugging Face tokenizer's ``pad_token``).
      decoder_start_id: the decoder's first input (``shift_right``; the beam search's start):
        seqjax's 0 (the pad id), a checkpoint's ``decoder_start_token_id`` (T5: 0).
      encoder_layers, decoder_layers: N of each stack.
      num_heads, d_model: H, E. head_dim: D, 0 means E // H. d_ff: 0 means 4 E.
      max_source_len, max_target_len: longest source / target (positions, decode cache).
      dropout_rate: P_drop on sublayer outputs and embedding sums (§5.4);
        attention_dropout_rate: on attention probabilities.
      encoder_attention: per-layer cycle ``((mechanism, options), ...)`` (``attention_cycle``;
        a comma-separated string is accepted) of any registered mechanism but 'causal' and
        'relative'.
      decoder_attention: the decoder self-attention's cycle: causal mechanisms only (not
        'linformer'); decoding uses the layer's cache where it has one
        (``attention_layer.cache_kind``: KV, recurrent state, ring buffer / summary store,
        LSH) and recomputes the prefix otherwise.
      cross_attention_implementation: dense cross-attention's implementation (``auto`` ...).
      share_embeddings: source and target share one embedding (``embed``); else
        ``source_embed`` and ``target_embed``.
      tie_embeddings: output logits use the target embedding (§3.4), else a ``head`` matrix.
      norm_position: "post" (the paper's LayerNorm(x + Sublayer(x))) or "pre".
      positional: "sinusoidal" (§3.5), "learned", or "t5_bias" (no absolute positions; T5's
        bucketed relative bias in the self-attention, Raffel et al. 2020 §2.1, with
        ``t5_buckets`` and ``t5_max_distance``).
      reversible: reversible layers in both stacks (pre-LN only).
      ff_chunk_size: feed-forward over chunks of this many positions (0 = all).
      dtype: compute dtype name; parameters stay float32.

    Options for imported checkpoints (``seqjax.convert``; the defaults are the paper's
    model, unchanged): ``norm_type``, ``norm_eps``, ``activation``, ``mlp_gated``,
    ``mlp_bias``, ``attention_bias``, ``attention_scale``, ``embed_scale`` as in
    ``TransformerConfig``; ``rescale_tied_output``: the decoder output times E^-1/2 before
    the tied output layer (T5, Raffel et al. 2020: the Mesh TensorFlow code's rescaling).
    BART's (Lewis et al. 2020, §2.1; fairseq's ``bart`` architecture): ``embed_norm``, a
    LayerNorm on each stack's embedding sum (``ln_source_embed``, ``ln_target_embed``);
    ``position_offset``, learned positions read from row ``position + offset`` of tables
    ``max_len + offset`` long (BART: 2, fairseq's padding offset); ``final_logits_bias``, a
    bias ``[V]`` on the output logits.
    """

    vocab_size: int
    encoder_layers: int = 2
    decoder_layers: int = 2
    num_heads: int = 4
    d_model: int = 128
    head_dim: int = 0
    d_ff: int = 0
    max_source_len: int = 256
    max_target_len: int = 256
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
    encoder_attention: tuple = (("dense", ()),)
    decoder_attention: tuple = (("dense", ()),)
    cross_attention_implementation: str = "auto"
    share_embeddings: bool = True
    tie_embeddings: bool = True
    norm_position: str = "post"
    positional: str = "sinusoidal"
    reversible: bool = False
    ff_chunk_size: int = 0
    dtype: str = "float32"
    t5_buckets: int = 32
    t5_max_distance: int = 128
    norm_type: str = "layernorm"
    norm_eps: float = 1e-6
    activation: str = "gelu_tanh"
    mlp_gated: bool = False
    mlp_bias: bool = True
    attention_bias: bool = False
    attention_scale: float = 0.0
    embed_scale: bool = True
    rescale_tied_output: bool = False
    embed_norm: bool = False
    position_offset: int = 0
    final_logits_bias: bool = False
    pad_id: int = PAD_ID
    decoder_start_id: int = PAD_ID

    def __post_init__(self):
        for field in ("encoder_attention", "decoder_attention"):
            if isinstance(getattr(self, field), str):
                object.__setattr__(self, field, attention_cycle(getattr(self, field)))
        checks = {
            "positional": (self.positional, POSITIONALS),
            "norm_position": (self.norm_position, layers.NORM_POSITIONS),
            "norm_type": (self.norm_type, layers.NORM_TYPES),
            "activation": (self.activation, layers.ACTIVATIONS),
            "dtype": (self.dtype, tuple(DTYPES)),
            "cross_attention_implementation": (
                self.cross_attention_implementation,
                dense_lib.IMPLEMENTATIONS,
            ),
        }
        for field, (value, valid) in checks.items():
            if value not in valid:
                raise ValueError(f"model.{field}={value!r} is not one of {valid}")
        positive = ("vocab_size", "encoder_layers", "decoder_layers", "num_heads", "d_model",
                    "max_source_len", "max_target_len")  # fmt: skip
        for field in positive:
            if getattr(self, field) < 1:
                raise ValueError(f"model.{field}={getattr(self, field)} must be >= 1")
        if self.d_model % self.num_heads and not self.head_dim:
            raise ValueError(
                f"model.d_model={self.d_model} is not divisible by model.num_heads="
                f"{self.num_heads}; set model.head_dim explicitly"
            )
        if self.position_offset < 0 or (self.position_offset and self.positional != "learned"):
            raise ValueError(
                f"model.position_offset={self.position_offset} needs positional='learned' "
                "and >= 0; valid: 0, or an offset with learned positions (BART: 2)"
            )
        if self.reversible and self.norm_position == "post":
            raise ValueError(
                "model.norm_position='post' cannot be reversible (model.reversible=True): a "
                "reversible layer adds F(x2) to x1 outside the sublayer, so LayerNorm(x + "
                "Sublayer(x)) has no inverse; valid: norm_position='pre' with reversible"
            )
        stacks = (
            ("encoder_attention", self.max_source_len),
            ("decoder_attention", self.max_target_len),
        )
        for field, length in stacks:
            cycle = getattr(self, field)
            if not cycle:
                raise ValueError(f"model.{field} names no mechanism")
            valid = [n for n in attention_lib.names() if _refusal(field, n) is None]
            for name, options in cycle:
                mech = attention_lib.spec(name)
                why = _refusal(field, name)
                if why is not None:
                    raise ValueError(
                        f"model.{field}: {name!r} cannot be used here: {why}; "
                        f"valid mechanisms: {valid}"
                    )
                try:
                    attention_lib.check_options(name, dict(options))
                    if mech.validate is not None:
                        mech.validate(dict(options), length)
                except ValueError as e:
                    raise ValueError(f"model.{field}: {e}") from e

    def _stack(self, **kw) -> TransformerConfig:
        return TransformerConfig(
            vocab_size=self.vocab_size,
            num_heads=self.num_heads,
            d_model=self.d_model,
            head_dim=self.head_dim,
            d_ff=self.d_ff,
            dropout_rate=self.dropout_rate,
            attention_dropout_rate=self.attention_dropout_rate,
            positional=self.positional,
            tie_embeddings=self.tie_embeddings,
            dtype=self.dtype,
            ff_chunk_size=self.ff_chunk_size,
            reversible=self.reversible,
            pad_id=self.pad_id,
            t5_buckets=self.t5_buckets,
            t5_max_distance=self.t5_max_distance,
            norm_type=self.norm_type,
            norm_eps=self.norm_eps,
            activation=self.activation,
            mlp_gated=self.mlp_gated,
            mlp_bias=self.mlp_bias,
            attention_bias=self.attention_bias,
            attention_scale=self.attention_scale,
            embed_scale=self.embed_scale,
            **kw,
        )

    def encoder_config(self) -> TransformerConfig:
        """The encoder stack's view as the ``TransformerConfig`` the sublayers read."""
        return self._stack(
            num_layers=self.encoder_layers,
            max_len=self.max_source_len,
            attention=self.encoder_attention,
            causal=False,
        )

    def decoder_config(self) -> TransformerConfig:
        """The decoder stack's view (its self-attention cycle, target length)."""
        return self._stack(
            num_layers=self.decoder_layers,
            max_len=self.max_target_len,
            attention=self.decoder_attention,
            causal=True,
        )

    @property
    def cross_attention(self) -> tuple[str, tuple]:
        """Cross-attention's ``(mechanism, options)``: dense (Vaswani et al. 2017, eq. 1)."""
        return ("dense", (("implementation", self.cross_attention_implementation),))

    @property
    def compute_dtype(self):
        return DTYPES[self.dtype]
