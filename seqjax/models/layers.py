"""Flax Linen building blocks: multi-head attention over any registered mechanism, MLP,
positional embeddings, and the sublayers every model builds from its config (``norm``,
``attention_sublayer``, ``feed_forward_sublayer``, ``token_embedding``).

Legend: B batch, T query length, S key length, H heads, D head dim, E model width (embed),
F feed-forward width (mlp), L max length, M memory length (Transformer-XL).

Logical axis names on parameters (mapped to mesh axes by ``seqjax.models.sharding_rules``):
``vocab``, ``embed``, ``heads``, ``kv``, ``mlp``, ``length``.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from seqjax import attention as attention_lib

Dtype = Any

# The attention layer and its decoding caches live in attention_layer.py (re-exported).
from seqjax.models.attention_layer import (  # noqa: E402, F401
    HeadsOutput,
    HeadsProjection,
    MultiHeadAttention,
    check_decodable,
    decodes_with_cache,
)


def freeze_options(options) -> tuple[tuple[str, Any], ...]:
    """Turns an options mapping into a hashable, sorted tuple (Flax module fields)."""
    if options is None:
        return ()
    if isinstance(options, tuple):
        return options
    items = options.items() if hasattr(options, "items") else options

    def _freeze(v):
        if isinstance(v, (list, tuple)):
            return tuple(_freeze(x) for x in v)
        return v

    return tuple(sorted((str(k), _freeze(v)) for k, v in items))


def dense_init(scale: float = 1.0):
    """Fan-in truncated-normal initializer with a variance multiplier.

    ``scale = 1 / (2 N)`` gives the Sparse Transformer / GPT-2 residual scaling
    (Child et al. 2019, §5.2: W2 and output projections scaled by 1/sqrt(2N)).
    """
    return nn.initializers.variance_scaling(scale, "fan_in", "truncated_normal")


def sinusoidal_positions(length: int, width: int) -> np.ndarray:
    """Vaswani et al. 2017, §3.5: PE[p, 2i] = sin(p / 10000^(2i/E)), PE[p, 2i+1] = cos(...).

    Returns:
      float32 ``[length, width]``.
    """
    pos = np.arange(length, dtype=np.float64)[:, None]
    i = np.arange(0, width, 2, dtype=np.float64)[None, :]
    angle = pos / np.power(10000.0, i / width)
    pe = np.zeros((length, width), np.float32)
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle[:, : width // 2])
    return pe


class AxialPositions(nn.Module):
    """Learned axial positional embeddings of a raster-order image sequence: position
    ``p`` of an ``[H, W, C]`` image (channels innermost) gets ``row[r] + col[c] + chan[k]``
    with ``k = p mod C``, ``r, c = divmod(p // C, W)`` (Ho et al. 2019, "Axial Attention",
    §3.1; the Reformer's axial embeddings factor positions the same way, Kitaev et al.
    2020 §5). ``H + W + C`` vectors of width E instead of ``H W C``.

    Legend: B batch, T positions, E model width.
    """

    shape: tuple  # (H, W, C)
    width: int

    @nn.compact
    def __call__(self, positions_BT):
        h, w, c = self.shape
        init = nn.with_logical_partitioning(nn.initializers.normal(0.02), ("length", "embed"))
        row_HE = self.param("row", init, (h, self.width))
        col_WE = self.param("col", init, (w, self.width))
        pixel_BT, chan_BT = jnp.divmod(positions_BT, c)
        r_BT, c_BT = jnp.divmod(pixel_BT, w)
        out_BTE = row_HE[r_BT] + col_WE[c_BT]
        if c > 1:
            out_BTE = out_BTE + self.param("chan", init, (c, self.width))[chan_BT]
        return out_BTE


ACTIVATIONS = ("gelu_tanh", "gelu", "relu", "silu")


def activation_fn(name: str):
    """The feed-forward nonlinearity ``name``: "gelu_tanh" (GELU's tanh approximation,
    Hendrycks & Gimpel 2016 §2; GPT-2's ``gelu_new``; the default), "gelu" (the exact erf
    form, BERT's), "relu" (Vaswani et al. 2017 eq. 2; T5's) or "silu"."""
    if name not in ACTIVATIONS:
        raise ValueError(f"model.activation={name!r} is not one of {ACTIVATIONS}")
    if name == "gelu_tanh":
        return nn.gelu
    if name == "gelu":
        return lambda x: nn.gelu(x, approximate=False)
    return nn.relu if name == "relu" else nn.silu


class _MlpCore(nn.Module):
    """Dense(F) -> GELU -> dropout -> Dense(E) on ``[B, T, E]`` (Vaswani et al. 2017, §3.3,
    eq. 2, with GELU for ReLU as in Child et al. 2019, §5.2). ``gated``: ``act(x W_gate) *
    (x W_up)`` before the dropout (GLU variants, Shazeer 2020 eq. 5-6; T5 v1.1's gated-GELU);
    ``use_bias=False``: no biases (T5)."""

    hidden: int
    dropout_rate: float = 0.0
    out_init_scale: float = 1.0
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32
    activation: str = "gelu_tanh"
    gated: bool = False
    use_bias: bool = True

    def _dense(self, features, axes, scale, name):
        return nn.Dense(
            features,
            use_bias=self.use_bias,
            dtype=self.dtype,
            param_dtype=self.param_dtype,
            kernel_init=nn.with_logical_partitioning(dense_init(scale), axes),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, axes[1:]),
            name=name,
        )

    @nn.compact
    def __call__(self, x_BTE, deterministic: bool = True):
        act = activation_fn(self.activation)
        h_BTF = self._dense(self.hidden, ("embed", "mlp"), 1.0, "up")(x_BTE)
        if self.gated:
            h_BTF = act(self._dense(self.hidden, ("embed", "mlp"), 1.0, "gate")(x_BTE)) * h_BTF
        else:
            h_BTF = act(h_BTF)
        h_BTF = nn.Dropout(self.dropout_rate)(h_BTF, deterministic=deterministic)
        return self._dense(x_BTE.shape[-1], ("mlp", "embed"), self.out_init_scale, "down")(h_BTF)


class Mlp(nn.Module):
    """Position-wise feed-forward: Dense(F) -> GELU -> dropout -> Dense(E) (``_MlpCore``:
    also gated, bias-free or another activation).

    ``chunk_size`` applies it to pieces of ``chunk_size`` positions at a time, each
    rematerialized in the backward pass (Kitaev et al. 2020, §3 "Chunking"), so the
    ``[B, T, F]`` hidden activation never exists for the whole sequence at once.
    """

    hidden: int
    dropout_rate: float = 0.0
    out_init_scale: float = 1.0
    chunk_size: int = 0
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32
    activation: str = "gelu_tanh"
    gated: bool = False
    use_bias: bool = True

    @nn.compact
    def __call__(self, x_BTE, *, deterministic: bool = True):
        t = x_BTE.shape[1]
        chunked = 0 < self.chunk_size < t
        core_cls = nn.remat(_MlpCore, static_argnums=(2,)) if chunked else _MlpCore
        core = core_cls(
            self.hidden,
            self.dropout_rate,
            self.out_init_scale,
            self.dtype,
            self.param_dtype,
            self.activation,
            self.gated,
            self.use_bias,
            name="core",
        )
        if not chunked:
            return core(x_BTE, deterministic)
        if t % self.chunk_size:
            raise ValueError(
                f"model.ff_chunk_size={self.chunk_size} must divide the sequence length {t}"
            )
        pieces = jnp.split(x_BTE, t // self.chunk_size, axis=1)
        return jnp.concatenate([core(p, deterministic) for p in pieces], axis=1)


# --- The sublayers every model builds from its ``TransformerConfig`` -------------------
#
# ``TransformerLM`` / ``TransformerClassifier`` (``transformer.Block``), Transformer-XL
# (``transformer_xl.XLBlock``) and the reversible stack (``reversible.AttentionHalf`` /
# ``FeedForwardHalf``) create their normalization, attention, feed-forward and token
# embedding only through the functions below, so an ablation (RMSNorm for LayerNorm, a
# gated MLP for GELU) is one edit here that reaches every model. The functions create their
# modules in the calling module's scope (under the names given), so a block's parameter
# tree is ``{ln_attn, attn, ln_mlp, mlp}`` and a reversible half's ``{ln, attn}`` /
# ``{ln, mlp}``, as checkpoints expect.


NORM_TYPES = ("layernorm", "rmsnorm")


def norm(name: str | None = None, cfg=None):
    """The sublayers' normalization, computed in float32 with logical axis names on its
    parameters: LayerNorm (Ba et al. 2016, eq. 4), or with ``cfg.norm_type == "rmsnorm"``
    RMSNorm (Zhang & Sennrich 2019, eq. 4: no mean subtraction, no bias; T5's layer norm);
    epsilon ``cfg.norm_eps`` (1e-6 without a config)."""
    eps = getattr(cfg, "norm_eps", 1e-6)
    if getattr(cfg, "norm_type", "layernorm") == "rmsnorm":
        return nn.RMSNorm(
            epsilon=eps,
            dtype=jnp.float32,
            param_dtype=jnp.float32,
            scale_init=nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
            name=name,
        )
    return nn.LayerNorm(
        epsilon=eps,
        dtype=jnp.float32,
        param_dtype=jnp.float32,
        scale_init=nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
        name=name,
    )


def residual_init_scale(cfg) -> float:
    """Variance multiplier 1/(2N) of the projections that end a residual branch (Child et
    al. 2019, §5.2)."""
    return 1.0 / (2.0 * cfg.num_layers)


NORM_POSITIONS = ("pre", "post")


def with_layer_index(mechanism: str, options: tuple, layer: int) -> tuple[str, tuple]:
    """``(mechanism, options)`` with ``layer`` added for mechanisms that take a ``layer``
    option (``flex``: BigBird's random blocks are drawn per layer, as google-research/
    bigbird seeds layer i with ``seed=i``), unless the options set it already."""
    opts = dict(options)
    if "layer" in attention_lib.spec(mechanism).options and "layer" not in opts:
        opts["layer"] = int(layer)
        return mechanism, freeze_options(opts)
    return mechanism, options


def attention_sublayer(
    cfg,
    layer: int,
    x_BTE,
    *,
    causal: bool,
    decode: bool = False,
    memory_BME=None,
    context_BSE=None,
    attention: tuple[str, tuple] | None = None,
    mask_BS=None,
    segment_ids=None,
    deterministic: bool = True,
    extra: dict | None = None,
    norm_position: str = "pre",
    norm_name: str = "ln_attn",
    name: str = "attn",
):
    """The attention branch of a residual layer: ``Dropout(MHA(Norm(x)))`` (pre-LN, Vaswani
    et al. 2017, §3.2.2 and §5.4, normalization moved in front as in Child et al. 2019,
    §5.2) or ``Dropout(MHA(x))`` (post-LN, ``norm_position="post"``: ``residual`` then
    normalizes the sum, Vaswani et al. 2017, §3.1); the caller adds the residual.

    Layer ``layer`` uses ``cfg.layer_attention(layer)`` unless ``attention`` (``(mechanism,
    options)``) overrides it; mechanisms with a ``layer`` option get ``layer``
    (``with_layer_index``). With ``memory_BME`` (``[B, M, E]``, Transformer-XL, Dai et al.
    2019, §3.2) queries come from ``x`` and keys/values from ``Norm([memory; x])``;
    ``mask_BS`` then covers the ``M + T`` keys. With ``context_BSE`` (``[B, S, E]``, an
    encoder's output) it is cross-attention (Vaswani et al. 2017, §3.2.3): queries from
    ``x``, keys/values from the context as it is, ``mask_BS`` its padding; with ``decode``
    the context's keys/values are projected once per source (``MultiHeadAttention``).

    Returns:
      ``[B, T, E]`` in ``cfg.compute_dtype``.
    """
    mechanism, options = with_layer_index(*(attention or cfg.layer_attention(layer)), layer)
    _check_norm_position(norm_position)
    pre = norm_position == "pre"
    h_kv_BSE = None
    if memory_BME is not None:
        if not pre:
            raise ValueError("Transformer-XL memory attention is pre-LN only")
        m = memory_BME.shape[1]
        h_kv_BSE = norm(name=norm_name, cfg=cfg)(
            jnp.concatenate([memory_BME.astype(x_BTE.dtype), x_BTE], axis=1)
        )
        h_kv_BSE = h_kv_BSE.astype(cfg.compute_dtype)
        h_BTE = h_kv_BSE[:, m:]
    else:
        h_BTE = (norm(name=norm_name, cfg=cfg)(x_BTE) if pre else x_BTE).astype(cfg.compute_dtype)
    if context_BSE is not None:
        h_kv_BSE = context_BSE.astype(cfg.compute_dtype)
    h_BTE = MultiHeadAttention(
        num_heads=cfg.num_heads,
        head_dim=cfg.dim_head,
        mechanism=mechanism,
        options=options,
        causal=causal,
        dropout_rate=cfg.attention_dropout_rate,
        out_init_scale=residual_init_scale(cfg),
        dtype=cfg.compute_dtype,
        decode=decode,
        max_len=cfg.max_len,
        cross_attention=context_BSE is not None,
        positional=getattr(cfg, "positional", "none"),
        rope_base=getattr(cfg, "rope_base", 10000.0),
        t5_buckets=getattr(cfg, "t5_buckets", 32),
        t5_max_distance=getattr(cfg, "t5_max_distance", 128),
        use_bias=getattr(cfg, "attention_bias", False),
        qkv_bias=getattr(cfg, "attention_qkv_bias", True),
        scale=getattr(cfg, "attention_scale", 0.0),
        name=name,
    )(
        h_BTE,
        h_kv_BSE,
        mask_BS=mask_BS,
        segment_ids=segment_ids,
        deterministic=deterministic,
        extra=extra,
    )
    return nn.Dropout(cfg.dropout_rate)(h_BTE, deterministic=deterministic)


def feed_forward_sublayer(
    cfg,
    x_BTE,
    *,
    deterministic: bool = True,
    norm_position: str = "pre",
    norm_name: str = "ln_mlp",
    name: str = "mlp",
):
    """The feed-forward branch of a residual layer, ``Dropout(MLP(Norm(x)))`` (pre-LN) or
    ``Dropout(MLP(x))`` (post-LN, see ``residual``) (Vaswani et al. 2017, §3.3), applied in
    chunks of ``cfg.ff_chunk_size`` positions (Kitaev et al. 2020, §3); the caller adds the
    residual.

    Returns:
      ``[B, T, E]`` in ``cfg.compute_dtype``.
    """
    _check_norm_position(norm_position)
    h_BTE = norm(name=norm_name, cfg=cfg)(x_BTE) if norm_position == "pre" else x_BTE
    h_BTE = Mlp(
        cfg.dim_ff,
        dropout_rate=cfg.dropout_rate,
        out_init_scale=residual_init_scale(cfg),
        chunk_size=cfg.ff_chunk_size,
        dtype=cfg.compute_dtype,
        activation=getattr(cfg, "activation", "gelu_tanh"),
        gated=getattr(cfg, "mlp_gated", False),
        use_bias=getattr(cfg, "mlp_bias", True),
        name=name,
    )(h_BTE.astype(cfg.compute_dtype), deterministic=deterministic)
    return nn.Dropout(cfg.dropout_rate)(h_BTE, deterministic=deterministic)


def residual(x_BTE, h_BTE, *, norm_position: str = "pre", norm_name: str | None = None, cfg=None):
    """Adds a branch to the residual stream: ``x + h`` (pre-LN; the branch normalized its
    input) or ``LayerNorm(x + h)`` (post-LN, Vaswani et al. 2017, §3.1: "LayerNorm(x +
    Sublayer(x))"; the norm is created here under ``norm_name``, the name the pre-LN
    branch gives its own norm, so both layouts have the same parameter tree)."""
    _check_norm_position(norm_position)
    if norm_position == "pre":
        return x_BTE + h_BTE
    return norm(name=norm_name, cfg=cfg)(x_BTE + h_BTE)


def _check_norm_position(norm_position: str) -> None:
    if norm_position not in NORM_POSITIONS:
        raise ValueError(f"model.norm_position={norm_position!r} is not one of {NORM_POSITIONS}")


class ScaledEmbed(nn.Embed):
    """Token embedding whose lookup is multiplied by sqrt(E) (Vaswani et al. 2017, §3.4);
    ``attend`` (tied output logits) uses the unscaled table."""

    def __call__(self, tokens_BT):
        return super().__call__(tokens_BT) * jnp.sqrt(float(self.features))


def token_embedding(cfg, name: str | None = "embed") -> nn.Embed:
    """The models' token embedding ``[V, E]``: std E^-1/2 and inputs scaled by sqrt(E)
    (Vaswani et al. 2017, §3.4), i.e. unit-size inputs and unit-size tied output logits at
    initialization; ``cfg.embed_scale=False``: the lookup as it is (BERT, GPT-2, T5)."""
    cls = ScaledEmbed if getattr(cfg, "embed_scale", True) else nn.Embed
    return cls(
        cfg.vocab_size,
        cfg.d_model,
        embedding_init=nn.with_logical_partitioning(
            nn.initializers.normal(stddev=cfg.d_model**-0.5), ("vocab", "embed")
        ),
        name=name,
    )


def shared_attention_params(module: nn.Module, cfg) -> dict:
    """Parameters owned by a model and shared by its layers (``Mechanism.model_params``).

    Called in the model's scope (``Encoder``, ``ReversibleStack``, ``TransformerXL``), so the
    parameters live there once (e.g. layerwise Linformer's single E, Transformer-XL's u/v).

    Returns:
      ``{(name, options): kwargs}`` for each distinct per-layer attention with a hook.
    """
    shared = {}
    for name, options in dict.fromkeys(cfg.attention):
        hook = attention_lib.spec(name).model_params
        if hook is not None:
            shared[(name, options)] = hook(module, cfg=cfg, options=dict(options))
    return shared
