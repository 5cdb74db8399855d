"""Flax Linen building blocks: multi-head attention over any registered mechanism, MLP,
positional embeddings, and the sublayers every model builds from its config (``norm``,
``attention_sublayer``, ``feed_forward_sublayer``, ``token_embedding``).

Legend: B batch, T query length, S key length, H heads, D head dim, E model width (embed),
F feed-forward width (mlp), L max length, M memory length (Transformer-XL).

Logical axis names on parameters (mapped to mesh axes by ``seqjax.train.sharding``):
``vocab``, ``embed``, ``heads``, ``kv``, ``mlp``, ``length``.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from seqjax import attention as attention_lib
from seqjax.attention import score_mod as score_mod_lib

Dtype = Any

# Mechanisms whose one-token-at-a-time KV-cache decoding equals the full causal forward.
KV_CACHE_MECHANISMS = ("dense", "causal")


def decodes_with_cache(mechanism: str) -> bool:
    """True when ``decode=True`` equals the full causal forward for this mechanism: a KV-cache
    mechanism, or one with a fixed-size recurrent state (its ``decode_state`` hook)."""
    if mechanism in KV_CACHE_MECHANISMS:
        return True
    return attention_lib.spec(mechanism).decode_state is not None


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


class HeadsProjection(nn.Module):
    """``[B, T, E] -> [B, T, H, D]`` with a kernel stored as ``[E, H, D]``.

    The kernel is created in its final shape (not flattened as ``nn.DenseGeneral`` does), so
    its logical axis names ``(embed, heads, kv)`` apply under ``nn.logical_axis_rules``.
    """

    num_heads: int
    head_dim: int
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x_BTE):
        kernel_EHD = self.param(
            "kernel",
            nn.with_logical_partitioning(
                nn.initializers.variance_scaling(
                    1.0, "fan_in", "truncated_normal", in_axis=0, out_axis=(1, 2)
                ),
                ("embed", "heads", "kv"),
            ),
            (x_BTE.shape[-1], self.num_heads, self.head_dim),
            self.param_dtype,
        )
        return jnp.einsum("bte,ehd->bthd", x_BTE.astype(self.dtype), kernel_EHD.astype(self.dtype))


class HeadsOutput(nn.Module):
    """``[B, T, H, D] -> [B, T, E]`` with a kernel stored as ``[H, D, E]``."""

    features: int
    init_scale: float = 1.0
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x_BTHD):
        h, d = x_BTHD.shape[-2:]
        kernel_HDE = self.param(
            "kernel",
            nn.with_logical_partitioning(
                nn.initializers.variance_scaling(
                    self.init_scale, "fan_in", "truncated_normal", in_axis=(0, 1), out_axis=2
                ),
                ("heads", "kv", "embed"),
            ),
            (h, d, self.features),
            self.param_dtype,
        )
        return jnp.einsum("bthd,hde->bte", x_BTHD.astype(self.dtype), kernel_HDE.astype(self.dtype))


class MultiHeadAttention(nn.Module):
    """Q/K/V/output projections around any registered attention mechanism.

    The mechanism is chosen by name (``seqjax.attention.names()``) with its options, so a
    model switches mechanism per layer by config alone. Mechanisms that own parameters
    create them through their ``module_params`` hook inside this module's scope; shared-QK
    mechanisms (LSH) get no key projection.

    Attributes:
      num_heads: H.
      head_dim: D.
      mechanism: registry name.
      options: the mechanism's options (a frozen tuple of items, see ``freeze_options``).
      causal: decoder (causal) attention.
      dropout_rate: dropout on attention probabilities.
      out_init_scale: variance multiplier of the output projection (1/(2N) residual scaling).
      dtype: compute dtype; parameters are ``param_dtype``.
      decode: autoregressive decoding with a KV cache ("cache" collection), one token per
        call; only causal attention of the dense family (``KV_CACHE_MECHANISMS``) or of a
        mechanism with a recurrent state (``decode_state``: linear, performer, kept in the
        cache as ``recurrent_state``); any other mechanism raises (its outputs are not a
        function of cached keys alone).
      max_len: the model's longest sequence, or None. Mechanisms whose defaults depend on
        the length (LSH's ``n_buckets``) derive them from it, so the padded length of an
        input never changes them.
      cross_attention: keys/values come from a fixed context (an encoder's output, Vaswani
        et al. 2017, §3.2.3 "encoder-decoder attention"). With ``decode=True`` they are
        projected once per source, on the first decoding call, and kept in the cache
        (``cross_key``/``cross_value`` ``[B, S, H, D]``, flag ``cross_ready``); later calls
        read them back without touching the context.
      positional: ``"rope"`` rotates queries and keys, ``"alibi"``/``"t5_bias"`` hand the
        mechanism a ``score_mod`` (``seqjax.attention.score_mod``); anything else: none.
        Absolute positions: query i of T against S keys sits at ``S - T + i`` (Transformer-XL
        memory first), or at the KV-cache index while decoding (keys enter the cache
        rotated). Not applied to cross-attention.
      rope_base, t5_buckets, t5_max_distance: the schemes' hyper-parameters.
    """

    num_heads: int
    head_dim: int
    mechanism: str = "dense"
    options: tuple = ()
    causal: bool = False
    dropout_rate: float = 0.0
    out_init_scale: float = 1.0
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32
    decode: bool = False
    max_len: int | None = None
    cross_attention: bool = False
    positional: str = "none"
    rope_base: float = 10000.0
    t5_buckets: int = 32
    t5_max_distance: int = 128

    def _proj_module(self, name: str) -> HeadsProjection:
        return HeadsProjection(
            self.num_heads, self.head_dim, self.dtype, self.param_dtype, name=name
        )

    def _proj(self, name: str, x_BTE):
        return self._proj_module(name)(x_BTE)

    @nn.compact
    def __call__(
        self,
        x_BTE,
        x_kv_BSE=None,
        *,
        mask_BS=None,
        segment_ids=None,
        deterministic: bool = True,
        extra: dict | None = None,
    ):
        """Attends from ``x_BTE`` to ``x_kv_BSE`` (self-attention when None).

        Args:
          x_BTE: ``[B, T, E]`` queries' inputs.
          x_kv_BSE: ``[B, S, E]`` keys'/values' inputs, default ``x_BTE``.
          mask_BS: boolean key-padding mask ``[B, S]``, True = keep.
          segment_ids: packed-sequence ids (see ``seqjax.attention.masks``).
          deterministic: disables dropout.
          extra: keyword arguments passed to the mechanism as they are (e.g. parameters
            owned by the model and shared by layers, such as layerwise Linformer's E).

        Returns:
          ``[B, T, E]``.
        """
        mech = attention_lib.spec(self.mechanism)
        options = dict(self.options)
        attention_lib.check_options(self.mechanism, options)
        # Decoding caches: the growing self-attention KV cache, or cross-attention's fixed one.
        self_cache = self.decode and not self.cross_attention
        cross_cache = self.decode and self.cross_attention
        if self_cache:
            check_decodable(self.mechanism, self.causal or self.mechanism == "causal")
        x_kv_BSE = x_BTE if x_kv_BSE is None else x_kv_BSE
        q_BTHD = self._proj("query", x_BTE)
        if cross_cache:
            k_BSHD, v_BSHD = self._cross_cache(mech, x_kv_BSE)
        else:
            k_BSHD = None if mech.shared_qk else self._proj("key", x_kv_BSE)
            v_BSHD = self._proj("value", x_kv_BSE)
        kwargs = dict(options)
        if mech.module_params is not None:
            kwargs.update(mech.module_params(self, q=q_BTHD, k=k_BSHD, v=v_BSHD, options=options))
        kwargs.update(extra or {})
        if self.dropout_rate > 0.0 and not deterministic:
            kwargs["dropout_rate"] = self.dropout_rate
            kwargs["dropout_rng"] = self.make_rng("dropout")
        if self.positional in score_mod_lib.SCHEMES and not self.cross_attention:
            q_BTHD, k_BSHD = self._positions(q_BTHD, k_BSHD, kwargs, self_cache)
        causal = self.causal
        if self_cache and mech.decode_state is not None:
            out_BTHD = self._recurrent_step(mech, q_BTHD, k_BSHD, v_BSHD, mask_BS, kwargs)
            return HeadsOutput(
                x_BTE.shape[-1], self.out_init_scale, self.dtype, self.param_dtype, name="out"
            )(out_BTHD)
        if self_cache and not self.is_initializing():
            k_BSHD, v_BSHD, mask_BS = self._update_cache(k_BSHD, v_BSHD)
            causal = False  # the cache mask already hides future slots
        elif self_cache:
            self._update_cache(k_BSHD, v_BSHD)  # creates the cache at full length
        out_BTHD = mech.fn(
            q_BTHD, k_BSHD, v_BSHD, causal=causal, mask=mask_BS, segment_ids=segment_ids, **kwargs
        )
        return HeadsOutput(
            x_BTE.shape[-1], self.out_init_scale, self.dtype, self.param_dtype, name="out"
        )(out_BTHD)

    def _positions(self, q_BTHD, k_BSHD, kwargs, self_cache):
        """Applies ``self.positional``: rotates q/k (RoPE) or adds ``kwargs["score_mod"]``."""
        t = q_BTHD.shape[1]
        s = t if k_BSHD is None else k_BSHD.shape[1]
        q_offset = s - t
        if self_cache and self.has_variable("cache", "cache_index"):
            q_offset = self.get_variable("cache", "cache_index")
        if self.positional == "rope":
            q_pos = (q_offset + jnp.arange(t))[None]
            q_BTHD = score_mod_lib.apply_rope(q_BTHD, q_pos, self.rope_base)
            if k_BSHD is not None:  # the cache's keys: new ones sit where the queries do
                k_pos = q_pos if self_cache and t == s else jnp.arange(s)[None]
                k_BSHD = score_mod_lib.apply_rope(k_BSHD, k_pos, self.rope_base)
            return q_BTHD, k_BSHD
        causal = self.causal or self.mechanism == "causal"
        if self.positional == "alibi":
            kwargs["score_mod"] = score_mod_lib.alibi(
                self.num_heads, causal=causal, q_offset=q_offset
            )
        else:
            table_NH = self.param(
                "t5_bias",
                nn.with_logical_partitioning(nn.initializers.normal(0.02), (None, "heads")),
                (self.t5_buckets, self.num_heads),
                self.param_dtype,
            )
            kwargs["score_mod"] = score_mod_lib.t5_bias(
                table_NH,
                causal=causal,
                num_buckets=self.t5_buckets,
                max_distance=self.t5_max_distance,
                q_offset=q_offset,
            )
        return q_BTHD, k_BSHD

    def _cross_cache(self, mech, x_kv_BSE):
        """Cross-attention keys/values projected from the context once per source: on the
        first call after the cache is created (``cross_ready`` False), later read back."""
        if mech.shared_qk:
            raise ValueError(
                f"cross-attention needs explicit keys; {self.mechanism!r} shares them with queries"
            )
        key, value = self._proj_module("key"), self._proj_module("value")
        shape = (*x_kv_BSE.shape[:2], self.num_heads, self.head_dim)
        ck = self.variable("cache", "cross_key", jnp.zeros, shape, self.dtype)
        cv = self.variable("cache", "cross_value", jnp.zeros, shape, self.dtype)
        ready = self.variable("cache", "cross_ready", lambda: jnp.zeros((), bool))
        if self.is_initializing():  # creates the parameters; the cache stays empty
            return key(x_kv_BSE), value(x_kv_BSE)
        k_BSHD, v_BSHD = jax.lax.cond(
            ready.value,
            lambda: (ck.value, cv.value),
            lambda: (key(x_kv_BSE).astype(self.dtype), value(x_kv_BSE).astype(self.dtype)),
        )
        ck.value, cv.value, ready.value = k_BSHD, v_BSHD, jnp.ones((), bool)
        return k_BSHD, v_BSHD

    def _recurrent_step(self, mech, q_BTHD, k_BTHD, v_BTHD, mask_BT, kwargs):
        """Decoding through a mechanism's fixed-size state (``decode_state`` hook, e.g. linear
        attention's ``sum phi(k) v^T``), kept in the cache as ``recurrent_state``: the init
        call runs the whole input from an empty state (it sizes the cache); later calls
        continue the state with their new tokens (one per call, or a chunk)."""
        kwargs = {k: v for k, v in kwargs.items() if k not in ("dropout_rate", "dropout_rng")}
        if self.is_initializing():
            out_BTHD, state = mech.decode_state(
                q_BTHD, k_BTHD, v_BTHD, None, mask=mask_BT, **kwargs
            )
            self.variable("cache", "recurrent_state", jax.tree.map, jnp.zeros_like, state)
            return out_BTHD
        if not self.has_variable("cache", "recurrent_state"):
            raise ValueError("decode=True needs the cache created by init (collection 'cache')")
        var = self.variable("cache", "recurrent_state")
        out_BTHD, var.value = mech.decode_state(
            q_BTHD, k_BTHD, v_BTHD, var.value, mask=mask_BT, **kwargs
        )
        return out_BTHD

    def _update_cache(self, k_B1HD, v_B1HD):
        """Writes one step's key/value into the cache; returns full cache and its mask."""
        if k_B1HD is None:
            raise ValueError(f"decode=True needs explicit keys; {self.mechanism!r} has none")
        is_init = self.has_variable("cache", "cached_key")
        if is_init and k_B1HD.shape[1] != 1:
            raise ValueError("decode=True feeds exactly one token per call")
        # Shapes come from the init call, which sees the full [B, L, ...] sequence.
        ck = self.variable("cache", "cached_key", jnp.zeros, k_B1HD.shape, k_B1HD.dtype)
        cv = self.variable("cache", "cached_value", jnp.zeros, v_B1HD.shape, v_B1HD.dtype)
        idx = self.variable("cache", "cache_index", lambda: jnp.zeros((), jnp.int32))
        if not is_init:  # first call (init): variables now hold zeros of the full length
            return k_B1HD, v_B1HD, None
        i = idx.value
        ck.value = jax.lax.dynamic_update_slice_in_dim(ck.value, k_B1HD, i, axis=1)
        cv.value = jax.lax.dynamic_update_slice_in_dim(cv.value, v_B1HD, i, axis=1)
        idx.value = i + 1
        b, length = ck.value.shape[:2]
        mask_BS = jnp.broadcast_to(jnp.arange(length)[None, :] <= i, (b, length))
        return ck.value, cv.value, mask_BS


def check_decodable(mechanism: str, causal: bool) -> None:
    """Raises ``ValueError`` unless KV-cache decoding of this attention equals the full
    forward pass (causal attention of a ``KV_CACHE_MECHANISMS`` mechanism)."""
    if not decodes_with_cache(mechanism):
        stateful = tuple(n for n in attention_lib.names() if decodes_with_cache(n))
        raise ValueError(
            f"decode=True (KV-cache decoding) supports attention {stateful}; got "
            f"{mechanism!r}: run the model without decode (seqjax.sample recomputes the prefix)"
        )
    if not causal:
        raise ValueError(
            "decode=True (KV-cache decoding) needs causal attention; this model is "
            "bidirectional (model.causal=False), so one token at a time cannot equal its forward"
        )


class _MlpCore(nn.Module):
    """Dense(F) -> GELU -> dropout -> Dense(E) on ``[B, T, E]`` (Vaswani et al. 2017, §3.3,
    eq. 2, with GELU for ReLU as in Child et al. 2019, §5.2)."""

    hidden: int
    dropout_rate: float = 0.0
    out_init_scale: float = 1.0
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x_BTE, deterministic: bool = True):
        h_BTF = nn.Dense(
            self.hidden,
            dtype=self.dtype,
            param_dtype=self.param_dtype,
            kernel_init=nn.with_logical_partitioning(dense_init(), ("embed", "mlp")),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("mlp",)),
            name="up",
        )(x_BTE)
        h_BTF = nn.Dropout(self.dropout_rate)(nn.gelu(h_BTF), deterministic=deterministic)
        return nn.Dense(
            x_BTE.shape[-1],
            dtype=self.dtype,
            param_dtype=self.param_dtype,
            kernel_init=nn.with_logical_partitioning(
                dense_init(self.out_init_scale), ("mlp", "embed")
            ),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
            name="down",
        )(h_BTF)


class Mlp(nn.Module):
    """Position-wise feed-forward: Dense(F) -> GELU -> dropout -> Dense(E).

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


def norm(name: str | None = None):
    """The sublayers' normalization: LayerNorm (Ba et al. 2016) computed in float32, with
    logical axis names on its scale and bias."""
    return nn.LayerNorm(
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
    options)``) overrides it. With ``memory_BME`` (``[B, M, E]``, Transformer-XL, Dai et al.
    2019, §3.2) queries come from ``x`` and keys/values from ``Norm([memory; x])``;
    ``mask_BS`` then covers the ``M + T`` keys. With ``context_BSE`` (``[B, S, E]``, an
    encoder's output) it is cross-attention (Vaswani et al. 2017, §3.2.3): queries from
    ``x``, keys/values from the context as it is, ``mask_BS`` its padding; with ``decode``
    the context's keys/values are projected once per source (``MultiHeadAttention``).

    Returns:
      ``[B, T, E]`` in ``cfg.compute_dtype``.
    """
    mechanism, options = attention or cfg.layer_attention(layer)
    _check_norm_position(norm_position)
    pre = norm_position == "pre"
    h_kv_BSE = None
    if memory_BME is not None:
        if not pre:
            raise ValueError("Transformer-XL memory attention is pre-LN only")
        m = memory_BME.shape[1]
        h_kv_BSE = norm(name=norm_name)(
            jnp.concatenate([memory_BME.astype(x_BTE.dtype), x_BTE], axis=1)
        )
        h_kv_BSE = h_kv_BSE.astype(cfg.compute_dtype)
        h_BTE = h_kv_BSE[:, m:]
    else:
        h_BTE = (norm(name=norm_name)(x_BTE) if pre else x_BTE).astype(cfg.compute_dtype)
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
    h_BTE = norm(name=norm_name)(x_BTE) if norm_position == "pre" else x_BTE
    h_BTE = Mlp(
        cfg.dim_ff,
        dropout_rate=cfg.dropout_rate,
        out_init_scale=residual_init_scale(cfg),
        chunk_size=cfg.ff_chunk_size,
        dtype=cfg.compute_dtype,
        name=name,
    )(h_BTE.astype(cfg.compute_dtype), deterministic=deterministic)
    return nn.Dropout(cfg.dropout_rate)(h_BTE, deterministic=deterministic)


def residual(x_BTE, h_BTE, *, norm_position: str = "pre", norm_name: str | None = None):
    """Adds a branch to the residual stream: ``x + h`` (pre-LN; the branch normalized its
    input) or ``LayerNorm(x + h)`` (post-LN, Vaswani et al. 2017, §3.1: "LayerNorm(x +
    Sublayer(x))"; the norm is created here under ``norm_name``, the name the pre-LN
    branch gives its own norm, so both layouts have the same parameter tree)."""
    _check_norm_position(norm_position)
    if norm_position == "pre":
        return x_BTE + h_BTE
    return norm(name=norm_name)(x_BTE + h_BTE)


def _check_norm_position(norm_position: str) -> None:
    if norm_position not in NORM_POSITIONS:
        raise ValueError(f"model.norm_position={norm_position!r} is not one of {NORM_POSITIONS}")


class ScaledEmbed(nn.Embed):
    """Token embedding whose lookup is multiplied by sqrt(E) (Vaswani et al. 2017, §3.4);
    ``attend`` (tied output logits) uses the unscaled table."""

    def __call__(self, tokens_BT):
        return super().__call__(tokens_BT) * jnp.sqrt(float(self.features))


def token_embedding(cfg, name: str | None = "embed") -> ScaledEmbed:
    """The models' token embedding ``[V, E]``: std E^-1/2 and inputs scaled by sqrt(E)
    (Vaswani et al. 2017, §3.4), i.e. unit-size inputs and unit-size tied output logits at
    initialization."""
    return ScaledEmbed(
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
