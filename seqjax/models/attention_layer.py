"""Multi-head attention over any registered mechanism: the Q/K/V/output projections, the
decoding caches (a KV cache for the dense family, a fixed-size recurrent state for
mechanisms with a ``decode_state`` hook, ring buffers and summary stores for the windowed
and Sparse Transformer patterns (``seqjax.decoding.pattern_cache``), a sorted-chunk cache
for LSH (``seqjax.decoding.lsh_cache``), cross-attention keys/values projected once), and
the checks of what decodes with a cache. Re-exported by ``seqjax.models.layers``.

Legend: B batch, T query length, S key length, H heads, D head dim, E model width (embed),
L max length.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from seqjax import attention as attention_lib
from seqjax.attention import ring_sparse
from seqjax.attention import score_mod as score_mod_lib
from seqjax.decoding import lsh_cache, pattern_cache

Dtype = Any


def cache_kind(mechanism: str, options=None) -> str | None:
    """The decoding cache of causal ``mechanism`` with ``options`` (None: of some
    configuration of it): ``"kv"`` (dense family), ``"recurrent"`` (``decode_state``:
    linear, performer), ``"pattern"`` (ring buffers / summary stores: local, sparse_strided,
    sparse_fixed, flex's named patterns but bigbird), ``"lsh"``, or None (no cache: the
    prefix is recomputed), as the mechanism declares it (``attention.registry.decode_cache``)."""
    return attention_lib.registry.decode_cache(
        mechanism, None if options is None else dict(options)
    )


def decodes_with_cache(mechanism: str, options=None) -> bool:
    """True when ``decode=True`` has a cache whose one-token outputs equal this layer's full
    causal forward at the last position (``cache_kind``); for LSH see
    ``seqjax.decoding.lsh_cache.model_exact`` for when a whole model's logits do."""
    return cache_kind(mechanism, options) is not None


class HeadsProjection(nn.Module):
    """``[B, T, E] -> [B, T, H, D]`` with a kernel stored as ``[E, H, D]`` (and, with
    ``use_bias``, a bias ``[H, D]``: BERT's and GPT-2's projections have one).

    The kernel is created in its final shape (not flattened as ``nn.DenseGeneral`` does), so
    its logical axis names ``(embed, heads, kv)`` apply under ``nn.logical_axis_rules``.
    """

    num_heads: int
    head_dim: int
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32
    use_bias: bool = False

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
        y_BTHD = jnp.einsum(
            "bte,ehd->bthd", x_BTE.astype(self.dtype), kernel_EHD.astype(self.dtype)
        )
        if not self.use_bias:
            return y_BTHD
        bias_HD = self.param(
            "bias",
            nn.with_logical_partitioning(nn.initializers.zeros, ("heads", "kv")),
            (self.num_heads, self.head_dim),
            self.param_dtype,
        )
        return y_BTHD + bias_HD.astype(self.dtype)[None, None]


class HeadsOutput(nn.Module):
    """``[B, T, H, D] -> [B, T, E]`` with a kernel stored as ``[H, D, E]`` (and, with
    ``use_bias``, a bias ``[E]``)."""

    features: int
    init_scale: float = 1.0
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32
    use_bias: bool = False

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
        y_BTE = jnp.einsum(
            "bthd,hde->bte", x_BTHD.astype(self.dtype), kernel_HDE.astype(self.dtype)
        )
        if not self.use_bias:
            return y_BTE
        bias_E = self.param(
            "bias",
            nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
            (self.features,),
            self.param_dtype,
        )
        return y_BTE + bias_E.astype(self.dtype)[None, None]


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
      decode: autoregressive decoding with a cache ("cache" collection), one token per
        call; causal attention only, of a mechanism with a cache (``cache_kind``): a KV
        cache (dense family, ``decode_cache="kv"``), a recurrent state (``decode_state``:
        linear, performer, kept as ``recurrent_state``), ring buffers and summary stores
        (local, sparse_strided, sparse_fixed, flex's named patterns but bigbird; kept as
        ``buffers``, ``seqjax.decoding.pattern_cache``) or LSH's sorted-chunk cache
        (``lsh``, ``seqjax.decoding.lsh_cache``); any other mechanism raises.
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
      use_bias: biases on the Q/K/V and output projections (BERT, GPT-2; default none).
      qkv_bias: with ``use_bias``, whether the Q/K/V projections have them too (GPT-Neo:
        False, the output projection only).
      scale: the logits' scale; 0 means the mechanism's own ``1/sqrt(D)`` (Vaswani et al.
        2017, eq. 1). T5 uses 1.0 (Raffel et al. 2020: the scale is folded into the
        initialization of the query projection).
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
    use_bias: bool = False
    scale: float = 0.0
    qkv_bias: bool = True

    @property
    def _always_causal(self) -> bool:
        """The mechanism has no bidirectional form (``Mechanism.always_causal``)."""
        return attention_lib.spec(self.mechanism).always_causal

    def _proj_module(self, name: str) -> HeadsProjection:
        bias = self.use_bias and self.qkv_bias
        return HeadsProjection(
            self.num_heads, self.head_dim, self.dtype, self.param_dtype, bias, name=name
        )

    def _out(self, out_BTHD, features: int):
        return HeadsOutput(
            features, self.out_init_scale, self.dtype, self.param_dtype, self.use_bias, name="out"
        )(out_BTHD)

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
            check_decodable(self.mechanism, self.causal or self._always_causal, options)
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
        if self.scale:
            kwargs["scale"] = self.scale
        if self.dropout_rate > 0.0 and not deterministic:
            kwargs["dropout_rate"] = self.dropout_rate
            kwargs["dropout_rng"] = self.make_rng("dropout")
        if self.positional in score_mod_lib.SCHEMES and not self.cross_attention:
            q_BTHD, k_BSHD = self._positions(q_BTHD, k_BSHD, kwargs, self_cache)
        causal = self.causal
        kind = cache_kind(self.mechanism, options) if self_cache else None
        if kind in ("pattern", "lsh"):
            out_BTHD = self._indexed_step(kind, mech, q_BTHD, k_BSHD, v_BSHD, kwargs, options)
            return self._out(out_BTHD, x_BTE.shape[-1])
        if self_cache and mech.decode_state is not None:
            out_BTHD = self._recurrent_step(mech, q_BTHD, k_BSHD, v_BSHD, mask_BS, kwargs)
            return self._out(out_BTHD, x_BTE.shape[-1])
        if self_cache and not self.is_initializing():
            k_BSHD, v_BSHD, mask_BS = self._update_cache(k_BSHD, v_BSHD)
            causal = False  # the cache mask already hides future slots
        elif self_cache:
            self._update_cache(k_BSHD, v_BSHD)  # creates the cache at full length
        fn = ring_sparse.dispatch(self.mechanism, mech.fn)  # ring steps on a sequence axis
        out_BTHD = fn(
            q_BTHD, k_BSHD, v_BSHD, causal=causal, mask=mask_BS, segment_ids=segment_ids, **kwargs
        )
        return self._out(out_BTHD, x_BTE.shape[-1])

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
        causal = self.causal or self._always_causal
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

    def _indexed_step(self, kind, mech, q_BTHD, k_BTHD, v_BTHD, kwargs, options):
        """Decoding through a position-indexed cache: the pattern buffers of
        ``seqjax.decoding.pattern_cache`` (cache entry ``buffers``: ``{name: (keys,
        values)}``) or LSH's sorted-chunk cache (``seqjax.decoding.lsh_cache``, entry
        ``lsh``), with the counter ``cache_index``. The init call runs the full forward on
        its ``[B, L, ...]`` input and creates the empty cache (L = ``max_len`` if set)."""
        b, t, h, d = q_BTHD.shape
        dv = v_BTHD.shape[-1]
        init = self.is_initializing()
        name = "lsh" if kind == "lsh" else "buffers"
        if not init and not self.has_variable("cache", name):
            raise ValueError("decode=True needs the cache created by init (collection 'cache')")
        length = self.max_len or (t if init else None)
        idx = self.variable("cache", "cache_index", lambda: jnp.zeros((), jnp.int32))
        score_mod = kwargs.pop("score_mod", None)
        if kind == "lsh":
            if score_mod is not None:
                raise ValueError("LSH attention takes no score bias (model.positional)")
            state0 = lambda: lsh_cache.init_state(  # noqa: E731
                b, length, h, d, dv, options, self.dtype
            )
            var = self.variable("cache", "lsh", state0)
        else:
            # the layer's logit scale (``self.scale``, e.g. GPT-Neo's 1.0) reaches the cache
            plan_options = {**options, "scale": self.scale} if self.scale else options
            plan = pattern_cache.make_plan(self.mechanism, plan_options, h, length)
            buffers0 = lambda: pattern_cache.init_buffers(plan, b, h, d, dv, self.dtype)  # noqa: E731
            var = self.variable("cache", "buffers", buffers0)
        if init:  # the init call only sizes the cache: its output skips any score bias
            full = {k: v for k, v in kwargs.items() if k not in ("dropout_rate", "dropout_rng")}
            return mech.fn(q_BTHD, k_BTHD, v_BTHD, causal=True, **full)
        i = idx.value
        if kind == "lsh":
            out_BTHD, var.value = lsh_cache.step(
                var.value, q_BTHD, v_BTHD, i, rng=kwargs["rng"], options=options,
                scale=self.scale or options.get("scale"),
            )  # fmt: skip
        else:
            out_BTHD, var.value = pattern_cache.step(
                plan, var.value, q_BTHD, k_BTHD, v_BTHD, i, score_mod=score_mod
            )
        idx.value = i + 1
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


def check_decodable(mechanism: str, causal: bool, options=None) -> None:
    """Raises ``ValueError`` unless this causal attention has a decoding cache
    (``cache_kind``; ``options`` None: some configuration of the mechanism has one)."""
    if not decodes_with_cache(mechanism, options):
        stateful = tuple(n for n in attention_lib.names() if decodes_with_cache(n))
        what = f"{mechanism!r}" if options is None else f"{mechanism!r} with {dict(options)}"
        raise ValueError(
            f"decode=True (cached decoding) supports attention {stateful} (flex: the "
            f"patterns {pattern_cache.FLEX_PATTERNS}); got {what}: run the model without "
            "decode (seqjax.sample recomputes the prefix)"
        )
    if not causal:
        raise ValueError(
            "decode=True (KV-cache decoding) needs causal attention; this model is "
            "bidirectional (model.causal=False), so one token at a time cannot equal its forward"
        )
