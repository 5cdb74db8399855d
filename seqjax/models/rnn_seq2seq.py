"""The RNN encoder-decoder and the first attention: Sutskever et al. 2014 / Cho et al. 2014
(one fixed vector), Bahdanau et al. 2015 (additive attention) and Luong et al. 2015 (dot /
general attention with the attentional layer ``h̃_t = tanh(W_c [c_t; h_t])`` and input
feeding), from Flax's cells.

Encoder: embeddings, ``num_layers`` recurrent layers (bidirectional by default, each direction
``H/2`` wide so the annotations ``h_j = [→h_j; ←h_j]`` are ``H`` wide, as OpenNMT's brnn),
padded rows handled by ``nn.RNN``'s ``seq_lengths``. The decoder's initial state is
``tanh(W_s [→h_last; ←h_first])`` of the top encoder layer for every decoder layer (Bahdanau
et al. App. A.2.2 start from ``←h_1``; with ``attention_type="none"`` this vector is all the
decoder sees of the source: the fixed-length bottleneck of Cho et al. §2).

``GlobalAttention`` is OpenNMT-py's module (Luong et al. 2015 eq. 5, 7-8; Bahdanau et al.
App. A.1.2): scores ``dot`` ``q·h_j``, ``general`` ``q W_a h_j``, ``mlp``
``vᵀ tanh(W_q q + U h_j)``, masked over the padding, softmax, context ``c = Σ α_j h_j``,
output ``linear_out([c; q])`` (``tanh`` for dot/general; with a bias for mlp). The decoder:

* ``attention_type="bahdanau"``: the query is the previous top state ``s_{t-1}``; ``c_t`` joins
  the cell's input ``[y_{t-1}; c_t]``; the readout ``tanh(W_o [s_t; c_t; y_{t-1}])`` (a tanh
  in place of the paper's maxout, App. A.2.2) feeds the softmax.
* ``attention_type="dot" | "general"``: Luong's global attention after the cell, queried with the
  current top state ``h_t``; ``h̃_t`` feeds the softmax and, with ``input_feeding``, the next
  step's input ``[y_t; h̃_t]`` (§3.3).
* ``attention_type="none"``: the cell's top state feeds the softmax.

The module offers what the seq2seq task and its beam search call (``seqjax.tasks.seq2seq``,
``seq2seq_decode``): ``__call__(source, decoder_inputs)`` (teacher forcing, the decoder a
``nn.scan`` over time), ``encode``, ``decode_logits``, ``init_cache`` and ``step`` (the
decoder's state, carried per beam, is its cache).

Legend: B batch, S source length, T target length, E embedding width, H hidden width,
V vocabulary, L layers.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from seqjax.models.rnn import RecurrentStack, last_hidden, make_cell, matmul_params

ATTENTIONS = ("none", "bahdanau", "dot", "general")
SCORES = ("dot", "general", "mlp")
PAD_ID = 0


@dataclasses.dataclass(frozen=True)
class RNNSeq2SeqConfig:
    """The ``rnn_seq2seq`` family's hyper-parameters (module docstring).

    Attributes:
      vocab_size: V, shared by source and target (the data's joint vocabulary).
      cell: "lstm", "gru" or "elman".
      num_layers: L of the encoder and of the decoder.
      hidden_dim: H (even with a bidirectional encoder: H/2 per direction).
      embed_dim: E; 0: H.
      dropout_rate: on embeddings, between layers and before the softmax.
      attention_type: "none", "bahdanau", "dot" or "general" (not ``attention``: that
        field names a Transformer's mechanism).
      input_feeding: Luong's input feeding (dot/general only).
      bidirectional_encoder: the encoder reads both ways.
      share_embeddings: one token table for source and target.
      max_len: the longest source/target the data may give (validated; no position table).
    """

    vocab_size: int = 0
    cell: str = "lstm"
    num_layers: int = 1
    hidden_dim: int = 128
    embed_dim: int = 0
    dropout_rate: float = 0.0
    attention_type: str = "bahdanau"
    input_feeding: bool = True
    bidirectional_encoder: bool = True
    share_embeddings: bool = False
    max_len: int = 256

    @property
    def embed_width(self) -> int:
        return self.embed_dim or self.hidden_dim


def _masked_softmax(scores_BTS, valid_BS):
    """Softmax over the valid source positions; a row without any (a batch's padding row)
    gets zeros, not NaN."""
    valid_B1S = valid_BS[:, None, :]
    low = jnp.finfo(jnp.float32).min
    probs = jax.nn.softmax(jnp.where(valid_B1S, scores_BTS.astype(jnp.float32), low), axis=-1)
    return jnp.where(valid_B1S, probs, 0.0)


class GlobalAttention(nn.Module):
    """OpenNMT-py's ``GlobalAttention`` (module docstring): ``(q_BTH, h_BSH, valid_BS) ->
    (attn_h_BTH, align_BTS)``; ``context`` gives ``(c_BTH, align_BTS)`` without the output
    layer (Bahdanau's placement)."""

    dim: int
    score: str = "dot"

    def setup(self):
        if self.score not in SCORES:
            raise ValueError(f"score={self.score!r} is not one of {', '.join(SCORES)}")
        if self.score == "general":
            self.linear_in = nn.Dense(self.dim, use_bias=False)
        elif self.score == "mlp":
            self.linear_context = nn.Dense(self.dim, use_bias=False)
            self.linear_query = nn.Dense(self.dim)
            self.v = nn.Dense(1, use_bias=False)
        self.linear_out = nn.Dense(self.dim, use_bias=self.score == "mlp")

    def context(self, q_BTH, h_BSH, valid_BS):
        if self.score == "mlp":
            wq_BT1H = self.linear_query(q_BTH)[:, :, None]
            uh_B1SH = self.linear_context(h_BSH)[:, None]
            scores_BTS = self.v(jnp.tanh(wq_BT1H + uh_B1SH))[..., 0]
        else:
            q = self.linear_in(q_BTH) if self.score == "general" else q_BTH
            scores_BTS = jnp.einsum("bth,bsh->bts", q, h_BSH)
        align_BTS = _masked_softmax(scores_BTS, valid_BS)
        return jnp.einsum("bts,bsh->bth", align_BTS, h_BSH), align_BTS

    def __call__(self, q_BTH, h_BSH, valid_BS):
        c_BTH, align_BTS = self.context(q_BTH, h_BSH, valid_BS)
        attn_h = self.linear_out(jnp.concatenate([c_BTH, q_BTH], -1))
        return (attn_h if self.score == "mlp" else jnp.tanh(attn_h)), align_BTS


class DecoderStep(nn.Module):
    """One decoder step: ``(state, y_BE, annotations_BSH, valid_BS) -> (state, out_BH)``;
    ``state = (carries per layer, feed_BH)`` (``feed``: the previous ``h̃`` for input
    feeding, zeros otherwise)."""

    cfg: RNNSeq2SeqConfig
    deterministic: bool = True

    @nn.compact
    def __call__(self, state, y_BE, annotations_BSH, valid_BS):
        c, (carries, feed_BH) = self.cfg, state
        drop = nn.Dropout(c.dropout_rate, deterministic=self.deterministic)
        attn = None
        if c.attention_type != "none":
            score = "mlp" if c.attention_type == "bahdanau" else c.attention_type
            attn = GlobalAttention(c.hidden_dim, score, name="attention")
        x_BX = y_BE
        if c.attention_type == "bahdanau":  # query: the previous top state s_{t-1}
            s_prev = last_hidden(c.cell, carries[-1])
            ctx_BH, _ = attn.context(s_prev[:, None], annotations_BSH, valid_BS)
            ctx_BH = ctx_BH[:, 0]
            x_BX = jnp.concatenate([y_BE, ctx_BH], -1)
        elif attn is not None and c.input_feeding:
            x_BX = jnp.concatenate([y_BE, feed_BH], -1)
        new = []
        for i in range(c.num_layers):
            carry, x_BX = make_cell(c.cell, c.hidden_dim, name=f"cell_l{i}")(carries[i], x_BX)
            new.append(carry)
            if i + 1 < c.num_layers:
                x_BX = drop(x_BX)
        h_BH = x_BX
        if c.attention_type == "bahdanau":
            readout = nn.Dense(c.hidden_dim, name="readout")
            out_BH = jnp.tanh(readout(jnp.concatenate([h_BH, ctx_BH, y_BE], -1)))
        elif attn is not None:
            out_BH, _ = attn(h_BH[:, None], annotations_BSH, valid_BS)
            out_BH = out_BH[:, 0]
            feed_BH = out_BH
        else:
            out_BH = h_BH
        return (tuple(new), feed_BH), out_BH


class Decoder(nn.Module):
    """``DecoderStep`` scanned over ``y_BTE`` (teacher forcing) or applied once (T = 1);
    the parameters are the same in both (``variable_broadcast``)."""

    cfg: RNNSeq2SeqConfig

    @nn.compact
    def __call__(self, state, y_BTE, annotations_BSH, valid_BS, *, scan=True, deterministic=True):
        if not scan:
            state, out_BH = DecoderStep(self.cfg, deterministic, name="step")(
                state, y_BTE[:, 0], annotations_BSH, valid_BS
            )
            return state, out_BH[:, None]
        scanned = nn.scan(
            DecoderStep,
            variable_broadcast="params",
            split_rngs={"params": False, "dropout": True},
            in_axes=(1, nn.broadcast, nn.broadcast),
            out_axes=1,
        )
        return scanned(self.cfg, deterministic, name="step")(
            state, y_BTE, annotations_BSH, valid_BS
        )


class RNNEncoderDecoder(nn.Module):
    """The RNN encoder-decoder (module docstring); ``decode`` is accepted for the family's
    calling convention (the decoder's state is always its cache)."""

    cfg: RNNSeq2SeqConfig
    decode: bool = False
    always_cached = True  # beam search steps with the decoder's state (``step``)

    def setup(self):
        c = self.cfg
        self.source_embed = nn.Embed(c.vocab_size, c.embed_width)
        self.target_embed = (
            self.source_embed if c.share_embeddings else nn.Embed(c.vocab_size, c.embed_width)
        )
        width = c.hidden_dim // 2 if c.bidirectional_encoder else c.hidden_dim
        self.encoder = RecurrentStack(
            c.cell, width, c.num_layers, c.dropout_rate, c.bidirectional_encoder
        )
        self.bridge = [nn.Dense(c.hidden_dim, name=f"bridge_l{i}") for i in range(c.num_layers)]
        self.decoder = Decoder(c)
        self.head = nn.Dense(c.vocab_size)
        self.dropout = nn.Dropout(c.dropout_rate)

    def train_flops_per_step(self, params, *, batch_size: int, seq_len: int) -> float:
        """``6 N`` per target token (``seq_len``: the longer side), N the matmul parameters."""
        return 6.0 * matmul_params(params, tied=False) * batch_size * seq_len

    def encode(self, source_BS, deterministic: bool = True):
        """``{'annotations': [B, S, H], 'valid': [B, S], 'init': decoder carries}``."""
        c = self.cfg
        valid_BS = source_BS != PAD_ID
        lengths_B = jnp.maximum(valid_BS.sum(-1), 1).astype(jnp.int32)
        x_BSE = self.dropout(self.source_embed(source_BS), deterministic=deterministic)
        h_BSH, carries = self.encoder(x_BSE, None, lengths_B, deterministic=deterministic)
        top = carries[-1]
        parts = top if c.bidirectional_encoder else (top,)
        summary_BH = jnp.concatenate([last_hidden(c.cell, p) for p in parts], -1)
        init = []
        for bridge in self.bridge:
            s0_BH = jnp.tanh(bridge(summary_BH))
            init.append((jnp.zeros_like(s0_BH), s0_BH) if c.cell == "lstm" else s0_BH)
        return {"annotations": h_BSH, "valid": valid_BS, "init": tuple(init)}

    def _start_state(self, encoded):
        feed_BH = jnp.zeros_like(encoded["annotations"][:, 0, : self.cfg.hidden_dim])
        return encoded["init"], feed_BH

    def _logits(self, out_BTH, deterministic):
        out_BTH = self.dropout(out_BTH, deterministic=deterministic)
        return self.head(out_BTH).astype(jnp.float32)

    def decode_logits(self, encoded, source_BS, decoder_inputs_BT, deterministic=True):
        """Teacher-forced logits ``[B, T, V]`` of the decoder inputs (the targets shifted
        right, 0 first)."""
        del source_BS
        y_BTE = self.target_embed(decoder_inputs_BT)
        y_BTE = self.dropout(y_BTE, deterministic=deterministic)
        _, out_BTH = self.decoder(
            self._start_state(encoded), y_BTE, encoded["annotations"], encoded["valid"],
            deterministic=deterministic,
        )  # fmt: skip
        return self._logits(out_BTH, deterministic)

    def __call__(self, source_BS, decoder_inputs_BT, *, deterministic: bool = True):
        encoded = self.encode(source_BS, deterministic)
        return self.decode_logits(encoded, source_BS, decoder_inputs_BT, deterministic)

    def _step(self, state, encoded, tokens_B1):
        y_B1E = self.target_embed(tokens_B1)
        state, out_B1H = self.decoder(
            state, y_B1E, encoded["annotations"], encoded["valid"], scan=False
        )
        return self._logits(out_B1H, True)[:, 0], state

    @nn.nowrap
    def init_cache(self, batch_size: int, source_len: int) -> dict:
        """The beam search's initial cache: no state yet (``step`` starts from the encoder's
        at ``t == 0``)."""
        del source_len
        c = self.cfg
        z = jnp.zeros((batch_size, c.hidden_dim), jnp.float32)
        carries = tuple((z, z) if c.cell == "lstm" else z for _ in range(c.num_layers))
        return {"state": (carries, z), "t": jnp.int32(0)}

    @nn.nowrap
    def step(self, params, cache, encoded, source_BS, tokens_B1):
        """One decoding step: the logits ``[B, V]`` after ``tokens_B1`` and the new cache."""
        del source_BS
        first = cache["t"] == 0
        start = self.apply({"params": params}, encoded, method="_start_state")
        state = jax.tree.map(lambda a, b: jnp.where(first, a, b), start, cache["state"])
        logits_BV, state = self.apply({"params": params}, state, encoded, tokens_B1,
                                      method="_step")  # fmt: skip
        return logits_BV, {"state": state, "t": cache["t"] + 1}
