"""XLNet: permutation language modelling with two-stream relative attention on the
Transformer-XL core (Yang et al. 2019).

One layer (post-LayerNorm, §2.3 and appendix A.2, "two-stream attention"), for the content
stream ``h`` (may see itself) and the query stream ``g`` (may not; starts from ``mask_emb``):

    k, v = [mem; h] W_k, [mem; h] W_v             both streams read the same keys/values
    h <- LN(h + Attn(h W_q, k, v; may see j iff not perm_mask[i, j] or j = i))
    g <- LN(g + Attn(g W_q, k, v; may see j iff not perm_mask[i, j]))
    h, g <- LN(x + W_2 act(W_1 x))                 (each stream)

``Attn`` is ``seqjax.attention.relative`` with bidirectional distances (``causal=False``)
and the relative segment term (§2.5; ``token_types``, memory positions type 0); its
``implementation`` option picks the materialized or the blockwise engine. Partial
prediction (§2.3): the query stream holds only the ``P`` predicted positions
(``target_mapping`` ``[B, P, T]`` one-hot rows); its queries are placed at their positions
for the relative shift and gathered back, as the reference code does.

Memory (§2.4, Transformer-XL's recurrence): the input of every layer (``n_layers``
tensors), truncated to its first ``reuse_len`` positions and then to the last ``mem_len``
of ``[memory; new]`` (``cache_memory``; ``mem_len = 0`` keeps everything, as the
reference does at evaluation). Memory keys are visible to every query.

A query with no visible key (the first target of an order with no non-target and no
memory) gets a zero attention output here; the reference's ``-1e30`` mask averages every
value instead. Orders from ``seqjax.data.xlnet_perm`` never produce one when the
``reuse_len`` halves hold a non-target.

Legend: B batch, T segment length, M memory length, S = M + T keys, P predicted positions,
E width, H heads, D head dim, F inner width, V vocabulary.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from seqjax.attention import relative

ACTIVATIONS = ("gelu", "relu", "gelu_new", "tanh")


@dataclasses.dataclass(frozen=True)
class XLNetConfig:
    """XLNet hyper-parameters (the fields of ``transformers.XLNetConfig`` seqjax uses).

    ``implementation`` selects the relative attention engine ("reference", "blockwise",
    "auto"); ``num_labels > 0`` adds the classifier head (last token's summary);
    ``generate_order`` how sampling orders the prefix (``seqjax.models.xlnet_generate``:
    "prefix" as ``transformers`` generates, or "causal")."""

    vocab_size: int = 32000
    d_model: int = 1024
    num_layers: int = 24
    num_heads: int = 16
    d_inner: int = 4096
    ff_activation: str = "gelu"
    layer_norm_eps: float = 1e-12
    dropout_rate: float = 0.1
    mem_len: int = 0
    reuse_len: int = 0
    clamp_len: int = -1
    implementation: str = "reference"
    num_labels: int = 0
    summary_activation: str = "tanh"
    pad_id: int | None = None
    generate_order: str = "prefix"

    @property
    def dim_head(self) -> int:
        return self.d_model // self.num_heads

    def check(self) -> None:
        """One-sentence ``ValueError`` for an invalid field."""
        if self.d_model % self.num_heads:
            raise ValueError(
                f"XLNetConfig.d_model={self.d_model} must be a multiple of num_heads="
                f"{self.num_heads}"
            )
        if self.ff_activation not in ACTIVATIONS:
            raise ValueError(
                f"XLNetConfig.ff_activation={self.ff_activation!r} is not one of {ACTIVATIONS}"
            )
        if self.implementation not in relative.IMPLEMENTATIONS:
            raise ValueError(
                f"XLNetConfig.implementation={self.implementation!r} is not one of "
                f"{relative.IMPLEMENTATIONS}"
            )
        if self.generate_order not in ("prefix", "causal"):
            raise ValueError(
                f"XLNetConfig.generate_order={self.generate_order!r} is not one of "
                "('prefix', 'causal')"
            )
        for name in ("mem_len", "reuse_len", "num_labels"):
            if getattr(self, name) < 0:
                raise ValueError(f"XLNetConfig.{name}={getattr(self, name)} must be >= 0")


def activation(name: str):
    return {
        "gelu": lambda x: nn.gelu(x, approximate=False),
        "gelu_new": lambda x: nn.gelu(x, approximate=True),
        "relu": nn.relu,
        "tanh": jnp.tanh,
    }[name]


def _heads_param(module, name, e, h, d):
    return module.param(name, nn.initializers.normal(0.02), (e, h, d))


class RelativeAttention(nn.Module):
    """Two-stream relative attention with post-LN (``XLNetRelativeAttention``)."""

    cfg: XLNetConfig

    @nn.compact
    def __call__(self, h_BTE, g_BPE, mem_BME, r_RE, masks, types_BS, target_BPT, deterministic):
        cfg = self.cfg
        e, nh, dh = cfg.d_model, cfg.num_heads, cfg.dim_head
        w = {n: _heads_param(self, n, e, nh, dh) for n in ("q", "k", "v", "o", "r")}
        init = nn.initializers.normal(0.02)
        bias = {n: self.param(n, init, (nh, dh)) for n in ("r_r_bias", "r_s_bias", "r_w_bias")}
        seg_embed = self.param("seg_embed", init, (2, nh, dh))
        norm = nn.LayerNorm(epsilon=cfg.layer_norm_eps, name="layer_norm")
        drop = nn.Dropout(cfg.dropout_rate)
        cat_BSE = h_BTE if mem_BME is None else jnp.concatenate([mem_BME, h_BTE], axis=1)
        k_BSHD = jnp.einsum("bse,ehd->bshd", cat_BSE, w["k"])
        v_BSHD = jnp.einsum("bse,ehd->bshd", cat_BSE, w["v"])
        r_RHD = jnp.einsum("re,ehd->rhd", r_RE, w["r"])
        att_rate = 0.0 if deterministic else cfg.dropout_rate
        seg = {}
        if types_BS is not None:
            seg = {"seg_embed": seg_embed, "r_s_bias": bias["r_s_bias"], "token_types": types_BS}

        def attend(q_BTHD, mask_kw):
            rng = self.make_rng("dropout") if att_rate > 0 else None
            return relative.relative_attention(
                q_BTHD, k_BSHD, v_BSHD, r=r_RHD, r_w_bias=bias["r_w_bias"],
                r_r_bias=bias["r_r_bias"], causal=False, dropout_rate=att_rate,
                dropout_rng=rng, implementation=cfg.implementation, **mask_kw, **seg,
            )  # fmt: skip

        def post(x, vec_BTHD):
            out = jnp.einsum("bthd,ehd->bte", vec_BTHD, w["o"])
            return norm(drop(out, deterministic=deterministic) + x)

        mask_h, mask_g = masks
        h_out = post(h_BTE, attend(jnp.einsum("bte,ehd->bthd", h_BTE, w["q"]), mask_h))
        if g_BPE is None:
            return h_out, None
        q_g_BPHD = jnp.einsum("bpe,ehd->bphd", g_BPE, w["q"])
        q_g_BTHD = jnp.einsum("bphd,bpt->bthd", q_g_BPHD, target_BPT)  # at their positions
        vec_g_BPHD = jnp.einsum("bthd,bpt->bphd", attend(q_g_BTHD, mask_g), target_BPT)
        return h_out, post(g_BPE, vec_g_BPHD)


class FeedForward(nn.Module):
    cfg: XLNetConfig

    @nn.compact
    def __call__(self, x, deterministic):
        cfg = self.cfg
        init = nn.initializers.normal(0.02)
        drop = nn.Dropout(cfg.dropout_rate)
        y = activation(cfg.ff_activation)(
            nn.Dense(cfg.d_inner, kernel_init=init, name="layer_1")(x)
        )
        y = drop(y, deterministic=deterministic)
        y = drop(
            nn.Dense(cfg.d_model, kernel_init=init, name="layer_2")(y), deterministic=deterministic
        )
        return nn.LayerNorm(epsilon=cfg.layer_norm_eps, name="layer_norm")(y + x)


class XLNetLayer(nn.Module):
    cfg: XLNetConfig

    @nn.compact
    def __call__(self, h, g, mem, r, masks, types, target, deterministic):
        h, g = RelativeAttention(self.cfg, name="rel_attn")(
            h, g, mem, r, masks, types, target, deterministic
        )
        ff = FeedForward(self.cfg, name="ff")
        return ff(h, deterministic), (None if g is None else ff(g, deterministic))


def attention_masks(b, t, m, perm_mask_BTT=None, mask_BT=None):
    """``(content, query)`` "may attend" masks ``[B, T, M + T]`` (None: see everything).

    ``perm_mask_BTT``: True = query i may not see key j (the reference's ``perm_mask``);
    ``mask_BT``: True = a real token (keys that are False are padding). Memory keys are
    visible to all; the content stream always sees itself."""
    blocked = None
    if perm_mask_BTT is not None:
        blocked = perm_mask_BTT.astype(bool)
    if mask_BT is not None:
        pad = jnp.broadcast_to(~mask_BT.astype(bool)[:, None, :], (b, t, t))
        blocked = pad if blocked is None else blocked | pad
    if blocked is None:
        return None, None
    blocked = jnp.concatenate([jnp.zeros((b, t, m), bool), blocked], axis=2)
    self_TS = jnp.arange(m + t)[None, :] == (m + jnp.arange(t))[:, None]
    return ~blocked | self_TS[None], ~blocked


def rank_masks(b, m, perm_ranks, mask_BT=None):
    """``(content, query)`` attention options from ``perm_ranks = (q_rank [B, T], k_rank
    [B, T])`` (``seqjax.data.xlnet_perm``: query i may not see key j iff ``q_rank[i] <=
    k_rank[j]``, the same mask as ``perm_mask``): memory keys get rank -1 (seen by all), the
    content stream sees itself, padding (``mask_BT`` False) is a key mask."""
    q_rank_BT, k_rank_BT = (jnp.asarray(x, jnp.int32) for x in perm_ranks)
    k_rank_BS = jnp.concatenate([jnp.full((b, m), -1, jnp.int32), k_rank_BT], axis=1)
    key_BS = None
    if mask_BT is not None:
        key_BS = jnp.concatenate([jnp.ones((b, m), bool), mask_BT.astype(bool)], axis=1)
    return tuple(
        {"rank_mask": (q_rank_BT, k_rank_BS, content), "mask": key_BS} for content in (True, False)
    )


def cache_memory(h_BTE, mem_BME, mem_len: int, reuse_len: int):
    """The reference's ``_cache_mem``: the first ``reuse_len`` positions of the layer input
    (all when 0) after the memory, the last ``mem_len`` kept (all when 0), no gradient."""
    if reuse_len > 0:
        h_BTE = h_BTE[:, :reuse_len]
    new = h_BTE if mem_BME is None else jnp.concatenate([mem_BME, h_BTE], axis=1)
    if mem_len > 0:
        new = new[:, -mem_len:]
    return jax.lax.stop_gradient(new)


class XLNetEncoder(nn.Module):
    """Token table (``embed``, the reference's ``word_embedding``), ``mask_emb`` and the
    layers (``XLNetModel``): ``(output [B, T or P, E],
    new_mems, hiddens)``; see ``XLNet`` for the call arguments. ``encoder`` in every XLNet
    model (so ``config.init_from`` moves it from pre-training to fine-tuning)."""

    cfg: XLNetConfig

    def setup(self):
        cfg = self.cfg
        cfg.check()
        self.embed = nn.Embed(
            cfg.vocab_size, cfg.d_model, embedding_init=nn.initializers.normal(0.02)
        )
        self.mask_emb = self.param("mask_emb", nn.initializers.normal(0.02), (cfg.d_model,))
        self.layers = [XLNetLayer(cfg, name=f"layer_{i}") for i in range(cfg.num_layers)]
        self.drop = nn.Dropout(cfg.dropout_rate)

    def attend(self, x_BXE):
        """Logits against the token table (float32)."""
        return self.embed.attend(x_BXE.astype(jnp.float32)).astype(jnp.float32)

    def __call__(
        self, tokens_BT, *, token_types_BT=None, perm_mask_BTT=None, target_mapping_BPT=None,
        mask_BT=None, mems=None, deterministic=True, perm_ranks=None,
    ):  # fmt: skip
        cfg = self.cfg
        b, t = tokens_BT.shape
        if mems is not None and len(mems) != cfg.num_layers:
            raise ValueError(f"mems has {len(mems)} arrays; expected num_layers={cfg.num_layers}")
        if mask_BT is None and cfg.pad_id is not None:
            mask_BT = tokens_BT != cfg.pad_id
        m = 0 if mems is None else mems[0].shape[1]
        masks = attention_masks(b, t, m, perm_mask_BTT, mask_BT)
        masks = ({"attn_mask": masks[0]}, {"attn_mask": masks[1]})
        if perm_ranks is not None:  # the permutation as ranks: no [T, S] mask (blockwise)
            if perm_mask_BTT is not None:
                raise ValueError("give perm_mask_BTT or perm_ranks, not both")
            masks = rank_masks(b, m, perm_ranks, mask_BT)
        h = self.drop(self.embed(tokens_BT), deterministic=deterministic)
        g = None
        if target_mapping_BPT is not None:
            target_mapping_BPT = target_mapping_BPT.astype(h.dtype)
            p = target_mapping_BPT.shape[1]
            g = jnp.broadcast_to(self.mask_emb.astype(h.dtype)[None, None], (b, p, cfg.d_model))
            g = self.drop(g, deterministic=deterministic)
        types_BS = None
        if token_types_BT is not None:
            types_BS = jnp.concatenate(
                [jnp.zeros((b, m), token_types_BT.dtype), token_types_BT], axis=1
            )
        r_RE = relative.relative_sinusoid(m + t, cfg.d_model, cfg.clamp_len, qlen_future=t - 1)
        r_RE = self.drop(r_RE, deterministic=deterministic)
        new_mems, hiddens = [], []
        for i, layer in enumerate(self.layers):
            mem = None if mems is None else jax.lax.stop_gradient(mems[i])
            new_mems.append(cache_memory(h, mem, cfg.mem_len, cfg.reuse_len))
            hiddens.append(h)
            h, g = layer(h, g, mem, r_RE, masks, types_BS, target_mapping_BPT, deterministic)
        hiddens.append(h)
        out = self.drop(h if g is None else g, deterministic=deterministic)
        return out, tuple(new_mems), tuple(hiddens)


class XLNet(nn.Module):
    """XLNet LM (``XLNetLMHeadModel``): tokens -> logits of the content stream ``[B, T, V]``,
    or of the query stream ``[B, P, V]`` when ``target_mapping`` is given.

    Call arguments (all optional but ``tokens_BT``): ``token_types_BT`` (segments A/B),
    ``perm_mask_BTT`` (True = may not attend) or ``perm_ranks`` (the same as two rank
    vectors, ``rank_masks``), ``target_mapping_BPT`` (float one-hot rows),
    ``mask_BT`` (True = real token; default ``tokens != cfg.pad_id`` when set), ``mems``
    (``n_layers`` arrays ``[B, M, E]``), ``deterministic``, ``return_state`` (also return
    ``(new_mems, hiddens)``: ``hiddens`` the content stream entering each layer and leaving
    the last, as ``output_hidden_states``)."""

    cfg: XLNetConfig

    def setup(self):
        self.encoder = XLNetEncoder(self.cfg)
        self.lm_loss_bias = self.param(
            "lm_loss_bias", nn.initializers.zeros, (self.cfg.vocab_size,)
        )

    def __call__(self, tokens_BT, *, return_state=False, **kwargs):
        out, new_mems, hiddens = self.encoder(tokens_BT, **kwargs)
        logits = self.encoder.attend(out) + self.lm_loss_bias[None, None]
        return (logits, (new_mems, hiddens)) if return_state else logits


class XLNetClassifier(nn.Module):
    """Sequence classifier (``XLNetForSequenceClassification``, Yang et al. 2019 §3.3): the
    content stream's last real token (XLNet's ``summary_type="last"``; padded rows use their
    last non-padding position: the last one when left-padded, as XLNet's tokenizer pads)
    -> ``tanh(W_s x)`` -> dropout -> ``[B, num_labels]``."""

    cfg: XLNetConfig

    @nn.compact
    def __call__(self, tokens_BT, *, mask_BT=None, token_types_BT=None, deterministic=True):
        cfg = self.cfg
        if mask_BT is None and cfg.pad_id is not None:
            mask_BT = tokens_BT != cfg.pad_id
        out_BTE, _, _ = XLNetEncoder(cfg, name="encoder")(
            tokens_BT, mask_BT=mask_BT, token_types_BT=token_types_BT, deterministic=deterministic
        )
        t = tokens_BT.shape[1]
        last_B = jnp.full(tokens_BT.shape[:1], t - 1)
        if mask_BT is not None:  # the last real position (right or left padding)
            last_B = t - 1 - jnp.argmax(mask_BT[:, ::-1].astype(jnp.int32), axis=1)
        x_BE = jnp.take_along_axis(out_BTE, last_B[:, None, None], axis=1)[:, 0]
        init = nn.initializers.normal(0.02)
        x_BE = activation(cfg.summary_activation)(
            nn.Dense(cfg.d_model, kernel_init=init, name="summary")(x_BE)
        )
        x_BE = nn.Dropout(cfg.dropout_rate)(x_BE, deterministic=deterministic)
        return nn.Dense(cfg.num_labels, kernel_init=init, name="logits_proj")(x_BE).astype(
            jnp.float32
        )
