"""The encoder-decoder Transformer of Vaswani et al. 2017 (§3, Figure 1), Flax Linen.

Legend: B batch, S source length, T target length, E model width, V shared vocabulary,
H heads, D head dim.

The encoder is N bidirectional layers (self-attention with the source padding masked, then
feed-forward); the decoder is N layers of causal self-attention, cross-attention to the
encoder output (§3.2.3) and feed-forward; logits are float32 ``[B, T, V]``. Every sublayer
comes from ``seqjax.models.layers``: post-LN ``LayerNorm(x + Sublayer(x))`` as in the paper
(§3.1) or pre-LN with a final norm per stack; the attention of each stack is a per-layer
cycle of any registered mechanism (the decoder's must be causal), and with
``reversible=True`` both stacks are reversible (the Reformer's encoder-decoder, Kitaev et
al. 2020, §5; a decoder layer's F is self- then cross-attention, see
``seqjax.models.reversible``). Token id 0 is padding and the decoder's start token
(``shift_right``): source padding is masked as keys; target padding is not (it cannot be
told from the start token), but causality keeps it out of every real position, and the
loss masks it. Training calls pass ``rngs={"dropout": key}`` (and ``"lsh"`` for LSH).

Usage::

    cfg = EncoderDecoderConfig(vocab_size=V, encoder_layers=6, decoder_layers=6)
    model = EncoderDecoder(cfg)
    params = model.init(key, source_BS, shift_right(targets_BT))["params"]
    logits_BTV = model.apply({"params": params}, source_BS, shift_right(targets_BT))

    encoded_BSE = model.apply({"params": params}, source_BS, method="encode")
    logits_BTV = model.apply(
        {"params": params}, encoded_BSE, source_BS, decoder_inputs_BT, method="decode_logits"
    )

(The full-sequence decoder method is ``decode_logits``: ``decode`` is the constructor flag,
as for ``TransformerLM(cfg, decode=True)``.)

Cached decoding, one target token per call (for greedy/beam search loops under ``jit``,
``jax.lax.while_loop`` or ``scan``)::

    cache = model.init_cache(batch_size, source_len)          # zeros, no parameters needed
    tokens_B1 = jnp.zeros((batch_size, 1), jnp.int32)        # the start token (pad id 0)
    for _ in range(max_target_len):
        logits_BV, cache = model.step(params, cache, encoded_BSE, source_BS, tokens_B1)
        tokens_B1 = jnp.argmax(logits_BV, -1)[:, None]

``step`` is a pure function of its arguments. Its self-attention keeps a KV cache of
``cfg.max_target_len`` positions (``TransformerLM``'s); its cross-attention projects the
encoder output to keys/values once, on the first step, stores them in the cache and reads
them back afterwards (``encoded_BSE`` is then unused). Every per-example cache leaf has the
batch as its leading axis (``[B, L, H, D]`` keys/values, ``[B, S, H, D]`` cross keys/values);
the others are scalars (position counters, the "cross keys ready" flag), so a beam search
reorders beams with ``jax.tree.map(lambda c: c[idx] if c.ndim else c, cache)``. The
decoder's self-attention must then be "dense" or "causal" (other mechanisms raise: their
one-token outputs are not a function of cached keys).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from seqjax.models import layers
from seqjax.models.encoder_decoder_config import PAD_ID, EncoderDecoderConfig
from seqjax.models.transformer import TransformerConfig


def shift_right(targets_BT, start_id: int = PAD_ID):
    """Decoder inputs from targets: ``[start, y_1, ..., y_{T-1}]`` (seqjax's start token is
    the pad id 0; a checkpoint's is ``EncoderDecoderConfig.decoder_start_id``), so position
    t predicts ``y_t`` from ``y_<t`` (Vaswani et al. 2017, §3.1 "offset by one position")."""
    return jnp.pad(targets_BT, ((0, 0), (1, 0)), constant_values=start_id)[:, :-1]


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each ``residual``-added (pre- or post-LN)."""

    cfg: TransformerConfig
    layer: int
    norm_position: str

    @nn.compact
    def __call__(self, x_BSE, mask_BS, deterministic, extra, segment_ids=None):
        pos = self.norm_position
        h_BSE = layers.attention_sublayer(
            self.cfg,
            self.layer,
            x_BSE,
            causal=False,
            mask_BS=mask_BS,
            segment_ids=segment_ids,
            deterministic=deterministic,
            extra=extra,
            norm_position=pos,
        )
        x_BSE = layers.residual(x_BSE, h_BSE, norm_position=pos, norm_name="ln_attn", cfg=self.cfg)
        h_BSE = layers.feed_forward_sublayer(
            self.cfg, x_BSE, deterministic=deterministic, norm_position=pos
        )
        x_BSE = layers.residual(x_BSE, h_BSE, norm_position=pos, norm_name="ln_mlp", cfg=self.cfg)
        return nn.with_logical_constraint(x_BSE, ("batch", "length", "embed"))


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention to the encoder output, feed-forward (§3.1)."""

    cfg: TransformerConfig
    layer: int
    norm_position: str
    cross_attention: tuple
    decode: bool = False

    @nn.compact
    def __call__(self, x_BTE, encoded_BSE, source_mask_BS, deterministic, extra, segs=(None,) * 2):
        pos = self.norm_position  # segs: packed (target ids, (target ids, source ids)) or None
        h_BTE = layers.attention_sublayer(
            self.cfg,
            self.layer,
            x_BTE,
            causal=True,
            decode=self.decode,
            segment_ids=segs[0],
            deterministic=deterministic,
            extra=extra,
            norm_position=pos,
        )
        x_BTE = layers.residual(x_BTE, h_BTE, norm_position=pos, norm_name="ln_attn", cfg=self.cfg)
        h_BTE = layers.attention_sublayer(
            self.cfg,
            self.layer,
            x_BTE,
            causal=False,
            decode=self.decode,
            context_BSE=encoded_BSE,
            attention=self.cross_attention,
            mask_BS=source_mask_BS,
            segment_ids=segs[1],
            deterministic=deterministic,
            norm_position=pos,
            norm_name="ln_cross",
            name="cross_attn",
        )
        x_BTE = layers.residual(x_BTE, h_BTE, norm_position=pos, norm_name="ln_cross", cfg=self.cfg)
        h_BTE = layers.feed_forward_sublayer(
            self.cfg, x_BTE, deterministic=deterministic, norm_position=pos
        )
        x_BTE = layers.residual(x_BTE, h_BTE, norm_position=pos, norm_name="ln_mlp", cfg=self.cfg)
        return nn.with_logical_constraint(x_BTE, ("batch", "length", "embed"))


class Stack(nn.Module):
    """N encoder or decoder layers (standard or reversible), then the final norm (pre-LN).

    Attributes:
      cfg: the model's config. decoder: the decoder stack (else the encoder).
      decode: KV-cache decoding (decoder only).
    """

    cfg: EncoderDecoderConfig
    decoder: bool
    decode: bool = False

    @nn.compact
    def __call__(
        self, x_BTE, mask_BS, deterministic, encoded_BSE=None, source_mask_BS=None, segs=None
    ):
        cfg = self.cfg
        view = cfg.decoder_config() if self.decoder else cfg.encoder_config()
        if self.decode:
            for name, _ in dict.fromkeys(view.attention):
                layers.check_decodable(name, True)
        if cfg.reversible and segs is not None:
            raise ValueError("the reversible encoder-decoder takes no packed rows; set "
                             "data.packing=False or model.reversible=False")  # fmt: skip
        if cfg.reversible:
            from seqjax.models import reversible  # optional module (Reformer)

            x_BTE = reversible.ReversibleStack(
                view,
                causal=self.decoder,
                decode=self.decode,
                cross=self.decoder,
                cross_attention=cfg.cross_attention,
                name="reversible",
            )(
                x_BTE,
                mask_BS=mask_BS,
                deterministic=deterministic,
                context_BSE=encoded_BSE,
                context_mask_BS=source_mask_BS,
            )
        else:
            shared = layers.shared_attention_params(self, view)
            for i in range(view.num_layers):
                extra = shared.get(view.layer_attention(i))
                if self.decoder:
                    layer = DecoderLayer(
                        view,
                        i,
                        cfg.norm_position,
                        cfg.cross_attention,
                        self.decode,
                        name=f"layer_{i}",
                    )
                    x_BTE = layer(x_BTE, encoded_BSE, source_mask_BS, deterministic, extra,
                                  segs or (None, None))  # fmt: skip
                else:
                    layer = EncoderLayer(view, i, cfg.norm_position, name=f"layer_{i}")
                    x_BTE = layer(x_BTE, mask_BS, deterministic, extra, segs)
        if cfg.norm_position == "pre":  # post-LN layers already end with a norm
            x_BTE = layers.norm(name="ln_final", cfg=view)(x_BTE)
        return x_BTE


class EncoderDecoder(nn.Module):
    """Vaswani et al. 2017's Transformer: ``(source [B, S], decoder inputs [B, T]) -> float32
    logits [B, T, V]``; see the module docstring for the methods and cached decoding.

    Attributes:
      cfg: ``EncoderDecoderConfig``.
      decode: one target token per ``decode_logits`` call with caches (the "cache"
        collection); use ``init_cache`` / ``step``.
    """

    cfg: EncoderDecoderConfig
    decode: bool = False

    def setup(self):
        cfg = self.cfg
        view = cfg.encoder_config()
        if cfg.share_embeddings:
            self.embed = layers.token_embedding(view, name=None)
            self.source_embed = self.target_embed = self.embed
        else:
            self.source_embed = layers.token_embedding(view, name=None)
            self.target_embed = layers.token_embedding(view, name=None)
        if cfg.positional == "learned":
            init = nn.with_logical_partitioning(nn.initializers.normal(0.02), ("length", "embed"))
            e, off = cfg.d_model, cfg.position_offset  # BART: 2 rows before position 0
            self.source_pos_embed = self.param(
                "source_pos_embed", init, (cfg.max_source_len + off, e)
            )
            self.target_pos_embed = self.param(
                "target_pos_embed", init, (cfg.max_target_len + off, e)
            )
        else:
            self.source_pos_embed = self.target_pos_embed = None
        if cfg.embed_norm:  # BART's layernorm_embedding, one per stack
            self.ln_source_embed = layers.norm(cfg=view)
            self.ln_target_embed = layers.norm(cfg=view)
        if cfg.final_logits_bias:
            self.logits_bias = self.param(
                "final_logits_bias",
                nn.with_logical_partitioning(nn.initializers.zeros, ("vocab",)),
                (cfg.vocab_size,),
            )
        self.embed_dropout = nn.Dropout(cfg.dropout_rate)
        self.encoder = Stack(cfg, decoder=False)
        self.decoder = Stack(cfg, decoder=True, decode=self.decode)
        if not cfg.tie_embeddings:
            self.head = nn.Dense(
                cfg.vocab_size,
                kernel_init=nn.with_logical_partitioning(layers.dense_init(), ("embed", "vocab")),
                use_bias=False,
            )
        if self.decode:
            self.target_position = self.variable(
                "cache", "target_position", lambda: jnp.zeros((), jnp.int32)
            )

    def _embed(self, embed, pos_table, max_len, tokens_BT, positions_1T, deterministic, ln=None):
        """Token embedding (x sqrt(E)) + positions (§3.4-3.5), then dropout (§5.4)."""
        x_BTE = embed(tokens_BT)
        if self.cfg.positional in ("sinusoidal", "learned"):  # else: positions in attention
            if pos_table is None:
                pos_table = jnp.asarray(layers.sinusoidal_positions(max_len, self.cfg.d_model))
            x_BTE = x_BTE + pos_table[positions_1T + self.cfg.position_offset]
        if ln is not None:  # BART's embedding LayerNorm
            x_BTE = ln(x_BTE)
        x_BTE = self.embed_dropout(x_BTE, deterministic=deterministic)
        return nn.with_logical_constraint(x_BTE, ("batch", "length", "embed"))

    def encode(self, source_BS, deterministic: bool = True, packed=None):
        """The encoder: source tokens ``[B, S]`` (0 = padding, masked) -> ``[B, S, E]``;
        ``packed``: the batch's packed-row fields (``seqjax.data.packing``)."""
        cfg = self.cfg
        _check_length("source", source_BS, cfg.max_source_len, "model.max_source_len")
        positions_1S = jnp.arange(source_BS.shape[1])[None, :]
        if packed is not None:  # positions restart per example; attention within it
            positions_1S = packed["positions"]
        x_BSE = self._embed(
            self.source_embed,
            self.source_pos_embed,
            cfg.max_source_len,
            source_BS,
            positions_1S,
            deterministic,
            self.ln_source_embed if cfg.embed_norm else None,
        )
        segs = None if packed is None else packed["segment_ids"]
        return self.encoder(x_BSE, source_BS != cfg.pad_id, deterministic, segs=segs)

    def decode_logits(
        self, encoded_BSE, source_BS, decoder_inputs_BT, deterministic=True, packed=None
    ):
        """The decoder: ``(encoded [B, S, E], source [B, S], decoder inputs [B, T])`` ->
        float32 logits ``[B, T, V]``; with ``decode=True`` one token (``T == 1``) per call
        at the cached position."""
        cfg = self.cfg
        _check_length(
            "decoder input", decoder_inputs_BT, cfg.max_target_len, "model.max_target_len"
        )
        positions_1T = jnp.arange(decoder_inputs_BT.shape[1])[None, :]
        if self.decode and self.is_mutable_collection("cache") and not self.is_initializing():
            positions_1T = positions_1T + self.target_position.value
            self.target_position.value = self.target_position.value + decoder_inputs_BT.shape[1]
        segs = None
        if packed is not None:  # cross-attention only to the same example's source
            positions_1T, tgt = packed["target_positions"], packed["target_segment_ids"]
            segs = (tgt, (tgt, packed["segment_ids"]))
        x_BTE = self._embed(
            self.target_embed,
            self.target_pos_embed,
            cfg.max_target_len,
            decoder_inputs_BT,
            positions_1T,
            deterministic,
            self.ln_target_embed if cfg.embed_norm else None,
        )
        x_BTE = self.decoder(
            x_BTE, None, deterministic, encoded_BSE=encoded_BSE,
            source_mask_BS=source_BS != cfg.pad_id, segs=segs,
        )  # fmt: skip
        x_BTE = x_BTE.astype(jnp.float32)
        if cfg.tie_embeddings and cfg.rescale_tied_output:
            x_BTE = x_BTE * cfg.d_model**-0.5
        logits_BTV = self.target_embed.attend(x_BTE) if cfg.tie_embeddings else self.head(x_BTE)
        if cfg.final_logits_bias:
            logits_BTV = logits_BTV + self.logits_bias[None, None, :]
        return logits_BTV.astype(jnp.float32)

    def __call__(self, source_BS, decoder_inputs_BT, *, deterministic: bool = True, packed=None):
        """Teacher-forced logits ``[B, T, V]`` (``decoder_inputs_BT = shift_right(targets)``);
        ``packed``: ``segment_ids``/``positions [B, S]`` and ``target_segment_ids``/
        ``target_positions [B, T]`` of packed rows (``seqjax.data.packing``)."""
        encoded_BSE = self.encode(source_BS, deterministic, packed)
        return self.decode_logits(encoded_BSE, source_BS, decoder_inputs_BT, deterministic, packed)

    @nn.nowrap
    def init_cache(self, batch_size: int, source_len: int) -> dict:
        """An empty decoding cache for ``batch_size`` sequences and sources of ``source_len``
        tokens (all zeros: no cached position, cross keys/values not yet projected). Built
        abstractly (``jax.eval_shape``): allocates the cache only."""
        model = EncoderDecoder(self.cfg, decode=True)
        source_BS = jnp.ones((batch_size, source_len), jnp.int32)
        targets_BT = jnp.ones((batch_size, self.cfg.max_target_len), jnp.int32)
        shapes = jax.eval_shape(model.init, jax.random.key(0), source_BS, targets_BT)["cache"]
        return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    @nn.nowrap
    def step(self, params, cache, encoded_BSE, source_BS, tokens_B1):
        """One cached decoding step: the logits ``[B, V]`` (float32) of the next token after
        ``tokens_B1`` ``[B, 1]`` (the previous output, or 0 at the start), and the new cache.

        Pure and jit-compatible; the first call after ``init_cache`` projects the encoder
        output to the cross-attention keys/values, later calls read them from the cache.
        """
        model = EncoderDecoder(self.cfg, decode=True)
        variables = {"params": params, "cache": cache}
        args = (encoded_BSE, source_BS, tokens_B1)
        logits_B1V, mutated = model.apply(
            variables, *args, method="decode_logits", mutable=["cache"]
        )
        return logits_B1V[:, 0], mutated["cache"]


def _check_length(what: str, tokens_BT, max_len: int, field: str) -> None:
    if tokens_BT.ndim != 2:
        raise ValueError(f"{what} tokens must be [batch, length]; got shape {tokens_BT.shape}")
    if tokens_BT.shape[1] > max_len:
        raise ValueError(f"{what} length {tokens_BT.shape[1]} exceeds {field}={max_len}")
