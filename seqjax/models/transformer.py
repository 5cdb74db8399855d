"""Transformer models (Flax Linen): a decoder-only LM and an encoder classifier.

Legend: B batch, T sequence length, E model width, V vocabulary, C classes.

Both are pre-LayerNorm Transformers (Child et al. 2019, §5.2: pre-activation residual
blocks, GELU, FF width 4E, residual projections initialized with variance 1/(2N)) whose
attention mechanism is chosen per layer by name, so a config alone switches between
dense, sparse, Linformer, LSH, ... attention.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from seqjax import attention as attention_lib
from seqjax.models import adaptive as adaptive_lib
from seqjax.models import layers
from seqjax.models.heads import MLMHead, PairHead
from seqjax.models.packed_rows import packed_cls_rows
from seqjax.models.transformer_config import (  # noqa: F401 (the names callers import from here)
    DTYPES,
    POOLINGS,
    POSITIONALS,
    TransformerConfig,
    attention_cycle,
)


class Block(nn.Module):
    """Pre-LN residual block: x + Attn(Norm(x)), then x + MLP(Norm(x)) (the sublayers of
    ``layers.attention_sublayer`` / ``layers.feed_forward_sublayer``); with
    ``cfg.norm_position == "post"``: Norm(x + Attn(x)), then Norm(x + MLP(x)) (BERT)."""

    cfg: TransformerConfig
    layer: int
    causal: bool
    decode: bool = False

    @nn.compact
    def __call__(self, x_BTE, mask_BS=None, segment_ids=None, deterministic=True, extra=None):
        cfg = self.cfg
        h_BTE = layers.attention_sublayer(
            cfg,
            self.layer,
            x_BTE,
            causal=self.causal,
            decode=self.decode,
            mask_BS=mask_BS,
            segment_ids=segment_ids,
            deterministic=deterministic,
            extra=extra,
            norm_position=cfg.norm_position,
        )
        if cfg.norm_position == "pre":  # seqjax's own layout, unchanged
            x_BTE = x_BTE + h_BTE
            x_BTE = x_BTE + layers.feed_forward_sublayer(cfg, x_BTE, deterministic=deterministic)
        else:
            x_BTE = layers.residual(x_BTE, h_BTE, norm_position="post", norm_name="ln_attn",
                                    cfg=cfg)  # fmt: skip
            h_BTE = layers.feed_forward_sublayer(
                cfg, x_BTE, deterministic=deterministic, norm_position="post"
            )
            x_BTE = layers.residual(x_BTE, h_BTE, norm_position="post", norm_name="ln_mlp",
                                    cfg=cfg)  # fmt: skip
        return nn.with_logical_constraint(x_BTE, ("batch", "length", "embed"))


class Encoder(nn.Module):
    """Token + position embedding followed by N blocks and a final normalization.

    ``decode=True`` (one token per call, KV caches in the "cache" collection) works for the
    standard and the reversible stack (at inference a reversible layer is two ordinary
    residual sublayers), and raises for attention whose cached decoding would differ from
    the full forward pass (``layers.check_decodable``).
    """

    cfg: TransformerConfig
    causal: bool
    decode: bool = False
    return_hidden: bool = False  # also return the hidden states (feature-based transfer)

    @nn.compact
    def __call__(
        self,
        tokens_BT,
        *,
        mask_BS=None,
        segment_ids=None,
        positions_BT=None,
        deterministic=True,
        prefix_BPE=None,
        overlay=None,
        token_types_BT=None,
    ):
        cfg = self.cfg
        if self.decode:
            for name, _ in dict.fromkeys(cfg.attention):
                layers.check_decodable(name, self.causal or attention_lib.spec(name).always_causal)
        embed = adaptive_embedding(cfg) if cfg.adaptive else layers.token_embedding(cfg)
        x_BTE = embed.embed(tokens_BT) if cfg.adaptive else embed(tokens_BT)
        if prefix_BPE is not None:  # e.g. a CLS vector prepended by the classifier
            x_BTE = jnp.concatenate([prefix_BPE.astype(x_BTE.dtype), x_BTE], axis=1)
        if overlay is not None:  # (where_BT, vec_E): a vector in place of tokens (packed CLS)
            where_BT, vec_E = overlay
            x_BTE = jnp.where(where_BT[..., None], vec_E.astype(x_BTE.dtype)[None, None], x_BTE)
        t = x_BTE.shape[1]
        given = positions_BT is not None
        if not given and cfg.position_offset and cfg.pad_id is not None and not self.decode:
            real_BT = tokens_BT != cfg.pad_id  # a prefix (CLS vector) counts as real
            real_BT = jnp.pad(real_BT, ((0, 0), (t - real_BT.shape[1], 0)), constant_values=True)
            positions_BT = jnp.cumsum(real_BT, axis=1) * real_BT - 1
        elif not given:
            positions_BT = jnp.arange(t)[None, :]
            if self.decode:
                pos = self.variable("cache", "position", lambda: jnp.zeros((), jnp.int32))
                if self.is_mutable_collection("cache") and not self.is_initializing():
                    positions_BT = positions_BT + pos.value
                    pos.value = pos.value + t
        if cfg.positional == "sinusoidal":
            table = jnp.asarray(layers.sinusoidal_positions(cfg.max_len, cfg.d_model))
            x_BTE = x_BTE + table[positions_BT]
        elif cfg.positional == "learned":
            usable, offset = cfg.max_len - cfg.position_offset, cfg.position_offset
            if t > usable and not given and not self.decode and not self.is_initializing():
                before = f", the first {offset} before position 0" if offset else ""
                raise ValueError(
                    f"the input has {t} positions but the learned position table holds "
                    f"{usable} (model.max_len={cfg.max_len} rows{before}); shorten the input "
                    "to at most that"
                )
            table = self.param(
                "pos_embed",
                nn.with_logical_partitioning(nn.initializers.normal(0.02), ("length", "embed")),
                (cfg.max_len, cfg.d_model),
            )
            x_BTE = x_BTE + table[positions_BT + cfg.position_offset]
        elif cfg.positional == "axial":
            axial = layers.AxialPositions(tuple(cfg.axial_shape), cfg.d_model, name="pos_axial")
            x_BTE = x_BTE + axial(positions_BT).astype(x_BTE.dtype)
        if cfg.type_vocab_size:  # BERT's segment embeddings (Devlin et al. 2019, §3, Fig. 2)
            types_TE = self.param(
                "type_embed",
                nn.with_logical_partitioning(nn.initializers.normal(0.02), (None, "embed")),
                (cfg.type_vocab_size, cfg.d_model),
            )
            if token_types_BT is None:
                token_types_BT = jnp.zeros(x_BTE.shape[:2], jnp.int32)
            x_BTE = x_BTE + types_TE[token_types_BT]
        if cfg.embed_norm:
            x_BTE = layers.norm(name="ln_embed", cfg=cfg)(x_BTE)
        x_BTE = nn.Dropout(cfg.dropout_rate)(x_BTE, deterministic=deterministic)
        x_BTE = nn.with_logical_constraint(x_BTE, ("batch", "length", "embed"))
        # The hidden states (embedding, then each block's output) for feature-based transfer
        # (Devlin et al. 2019 §5.3): kept only when "intermediates" is mutable.
        self.sow("intermediates", "hidden_states", x_BTE)
        hidden = [x_BTE]
        if cfg.reversible:
            from seqjax.models import reversible  # optional module (Reformer)

            stack = reversible.ReversibleStack(
                cfg, causal=self.causal, decode=self.decode, name="reversible"
            )
            x_BTE = stack(
                x_BTE, mask_BS=mask_BS, segment_ids=segment_ids, deterministic=deterministic
            )
        else:
            shared = layers.shared_attention_params(self, cfg)
            block_cls = nn.remat(Block, static_argnums=(4,)) if cfg.remat else Block
            for i in range(cfg.num_layers):
                x_BTE = block_cls(cfg, i, self.causal, self.decode, name=f"block_{i}")(
                    x_BTE, mask_BS, segment_ids, deterministic, shared.get(cfg.layer_attention(i))
                )
                self.sow("intermediates", "hidden_states", x_BTE)
                hidden.append(x_BTE)
        if cfg.norm_position == "pre":  # a post-LN layer already ends with a norm
            x_BTE = layers.norm(name="ln_final", cfg=cfg)(x_BTE)
        return (x_BTE, embed, tuple(hidden)) if self.return_hidden else (x_BTE, embed)


def adaptive_embedding(cfg) -> adaptive_lib.AdaptiveSoftmax:
    """The adaptive input/softmax pair of ``cfg`` (Transformer-XL's tied tables)."""
    return adaptive_lib.AdaptiveSoftmax(
        vocab_size=cfg.vocab_size,
        cutoffs=tuple(cfg.adaptive_cutoffs),
        div_val=cfg.adaptive_div_val,
        d_model=cfg.d_model,
        tie_projs=cfg.adaptive_tie_projs,
        name="adaptive",
    )


class TransformerLM(nn.Module):
    """Decoder-only language model: tokens ``[B, T]`` -> float32 logits ``[B, T, V]``.

    With ``decode=True`` the model consumes one token per call and keeps a KV cache in the
    "cache" collection (initialize it with the full ``[B, max_len]`` shape); causal dense /
    causal attention only, standard or reversible layers (other attention raises).

    ``mask_BT`` (bool ``[B, T]``, True = real) hides positions as keys: with ``mask_BT =
    arange(T) < P`` the logits of the first P positions are exactly those of the P-token
    prefix alone, for every mechanism, including causal LSH whose sorted chunks future
    *queries* could otherwise move (``seqjax.sample`` conditions on prefixes this way).

    ``outputs="pretraining"`` (``cfg.pair_head``, BERT's pre-training heads, Devlin et al.
    2019 §3.1): ``(masked-LM logits [B, T, V], next-sentence logits [B, 2])``.
    """

    cfg: TransformerConfig
    decode: bool = False

    @nn.compact
    def __call__(
        self, tokens_BT, *, segment_ids=None, positions_BT=None, deterministic=True, mask_BT=None,
        token_types_BT=None, outputs: str = "logits",
    ):  # fmt: skip
        cfg = self.cfg
        x_BTE, embed = Encoder(cfg, causal=cfg.causal, decode=self.decode, name="encoder")(
            tokens_BT,
            mask_BS=mask_BT,
            segment_ids=segment_ids,
            positions_BT=positions_BT,
            deterministic=deterministic,
            token_types_BT=token_types_BT,
        )
        if cfg.pair_head:  # BERT's pooler + next-sentence prediction
            _, pair_BC = PairHead(cfg.pair_classes, name="pair_head")(x_BTE)
            if outputs == "pretraining":
                return MLMHead(cfg, name="mlm_head")(x_BTE, embed), pair_BC
        if outputs != "logits":
            raise ValueError(f"outputs={outputs!r} needs model.pair_head=True; valid: 'logits'")
        if cfg.mlm_head_transform:  # BERT's masked-LM head (the mlm task)
            return MLMHead(cfg, name="mlm_head")(x_BTE, embed)
        if cfg.adaptive:  # exact log-probabilities: a softmax of them is themselves
            logits_BTV = embed.log_probs(x_BTE)
        elif cfg.tie_embeddings:
            logits_BTV = embed.attend(x_BTE.astype(jnp.float32))
        else:
            logits_BTV = nn.Dense(
                cfg.vocab_size,
                kernel_init=nn.with_logical_partitioning(layers.dense_init(), ("embed", "vocab")),
                use_bias=False,
                name="head",
            )(x_BTE.astype(jnp.float32))
        return logits_BTV.astype(jnp.float32)


class TransformerClassifier(nn.Module):
    """Bidirectional encoder + pooling + MLP head: tokens ``[B, T]`` -> logits ``[B, C]``.

    Tokens equal to ``cfg.pad_id`` are masked out of attention and of mean pooling
    (LRA byte-level Text / ListOps; Tay et al. 2020).

    Packed rows (``seqjax.data.packing``): with ``segment_ids``/``positions_BT`` ``[B, T]``
    and ``num_segments`` K, the logits are ``[B, K, C]``, one per example: mean pooling
    averages each segment's positions; CLS pooling puts the CLS vector at position 0 in
    front of every example (``packed_cls_rows``: rows of T + K slots), so each example sees
    exactly what it sees alone.
    """

    cfg: TransformerConfig

    @nn.compact
    def __call__(
        self, tokens_BT, *, segment_ids=None, positions_BT=None, num_segments=0,
        deterministic=True,
    ):  # fmt: skip
        if segment_ids is not None:
            return self._packed(tokens_BT, segment_ids, positions_BT, num_segments, deterministic)
        cfg = self.cfg
        b = tokens_BT.shape[0]
        keep_BT = (
            tokens_BT != cfg.pad_id if cfg.pad_id is not None else jnp.ones(tokens_BT.shape, bool)
        )
        prefix = None
        if cfg.pooling == "cls":
            cls_E = self.param(
                "cls",
                nn.with_logical_partitioning(nn.initializers.normal(0.02), ("embed",)),
                (cfg.d_model,),
            )
            prefix = jnp.broadcast_to(cls_E, (b, 1, cfg.d_model))
            keep_BT = jnp.concatenate([jnp.ones((b, 1), bool), keep_BT], axis=1)
        x_BTE, _ = Encoder(cfg, causal=False, name="encoder")(
            tokens_BT, mask_BS=keep_BT, deterministic=deterministic, prefix_BPE=prefix
        )
        x_BTE = x_BTE.astype(jnp.float32)
        if cfg.pooling == "cls":
            pooled_BE = x_BTE[:, 0]
        else:
            w_BT = keep_BT.astype(jnp.float32)
            pooled_BE = (x_BTE * w_BT[..., None]).sum(1) / jnp.maximum(w_BT.sum(1), 1.0)[:, None]
        return self._head(pooled_BE)

    def _head(self, pooled_BE):
        h = nn.gelu(nn.Dense(self.cfg.d_model, name="pre_head")(pooled_BE))
        return nn.Dense(self.cfg.num_classes, name="head")(h)

    def _packed(self, tokens_BT, segment_ids_BT, positions_BT, K, deterministic):
        """Logits ``[B, K, C]`` of the K example slots of packed rows."""
        cfg = self.cfg
        overlay, cls_BK = None, None
        if cfg.pooling == "cls":
            cls_E = self.param(
                "cls",
                nn.with_logical_partitioning(nn.initializers.normal(0.02), ("embed",)),
                (cfg.d_model,),
            )
            tokens_BT, segment_ids_BT, positions_BT, where_BT, cls_BK = packed_cls_rows(
                tokens_BT, segment_ids_BT, positions_BT, K
            )
            overlay = (where_BT, cls_E)
        x_BTE, _ = Encoder(cfg, causal=False, name="encoder")(
            tokens_BT, segment_ids=segment_ids_BT, positions_BT=positions_BT,
            deterministic=deterministic, overlay=overlay,
        )  # fmt: skip
        x_BTE = x_BTE.astype(jnp.float32)
        if cfg.pooling == "cls":
            pooled_BKE = jnp.take_along_axis(x_BTE, cls_BK[..., None], axis=1)
        else:  # the mean of each segment's positions
            k_K = jnp.arange(1, K + 1, dtype=segment_ids_BT.dtype)
            w_BKT = (segment_ids_BT[:, None, :] == k_K[None, :, None]).astype(jnp.float32)
            n_BK = jnp.maximum(w_BKT.sum(-1), 1.0)
            pooled_BKE = jnp.einsum("bkt,bte->bke", w_BKT, x_BTE) / n_BK[..., None]
        return self._head(pooled_BKE)
