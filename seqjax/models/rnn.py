"""Recurrent networks from Flax's own cells: the Elman RNN, the GRU and the LSTM, stacked,
as a language model whose state is carried from one batch to the next (truncated
backpropagation through time).

* Elman (1990): ``h_t = tanh(W_i x_t + b + W_h h_{t-1})`` (``nn.SimpleCell``, the
  ``torch.nn.RNN(nonlinearity='tanh')`` recurrence).
* GRU (Cho et al. 2014, eq. 5-8): ``r, z = σ(W x + U h)``, ``n = tanh(W_n x + r ⊙ (U_n h
  + b_hn))``, ``h' = (1 - z) n + z h`` (``nn.GRUCell``, ``torch.nn.GRU``).
* LSTM (Hochreiter & Schmidhuber 1997 with the forget gate of Gers et al. 2000): gates
  ``i, f, g, o``, ``c' = f c + i g``, ``h' = o tanh(c')`` (``nn.OptimizedLSTMCell``,
  ``torch.nn.LSTM``).

The language model (Mikolov et al. 2010; Karpathy's char-RNN; Zaremba et al. 2014 for the
dropout between layers and the truncated BPTT over contiguous streams) embeds the tokens,
runs ``num_layers`` cells over the segment, and predicts the next token. As a recurrent
model of the training system (``seqjax.models.memory``, ``config.model.kind="rnn"``) its
memory is every layer's final carry: the train step, the evaluator and the sampler thread
it from one segment to the next exactly as they thread Transformer-XL's memory, and no
gradient flows into it (the BPTT window is the segment, ``data.seq_len``).

Legend: B batch, T time, E embedding width, H hidden width, V vocabulary, L layers.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

CELLS = ("lstm", "gru", "elman")


@dataclasses.dataclass(frozen=True)
class RNNConfig:
    """The ``rnn`` family's hyper-parameters (``seqjax.models.rnn_families``).

    Attributes:
      vocab_size: V (from the data).
      cell: "lstm", "gru" or "elman" (tanh).
      num_layers: stacked recurrent layers.
      hidden_dim: H, every layer's state width.
      embed_dim: E of the token embedding; 0: H.
      dropout_rate: dropout on the embeddings, between layers and before the output
        (Zaremba et al. 2014: never on the recurrent connections).
      tie_embeddings: the output layer is the token table (Press & Wolf 2017; with E != H
        a projection H -> E comes first).
      bidirectional: classification: each layer reads both ways (``nn.Bidirectional``).
      pooling: classification: "last" (final states) or "mean" / "max" over the valid steps.
      max_len: kept for the samplers' window checks; the state carries, so 0 = unbounded.
      num_classes: classification outputs (from the data), 0 for the LM.
      pad_id: the padding id of classification inputs (from the data).
    """

    vocab_size: int = 0
    cell: str = "lstm"
    num_layers: int = 2
    hidden_dim: int = 128
    embed_dim: int = 0
    dropout_rate: float = 0.0
    tie_embeddings: bool = False
    bidirectional: bool = False
    pooling: str = "last"
    max_len: int = 0
    num_classes: int = 0
    pad_id: int | None = None

    @property
    def embed_width(self) -> int:
        return self.embed_dim or self.hidden_dim


def make_cell(cell: str, hidden: int, *, name: str | None = None) -> nn.RNNCellBase:
    """Flax's cell for ``cell`` ("lstm", "gru", "elman") with ``hidden`` features."""
    if cell == "lstm":
        return nn.OptimizedLSTMCell(hidden, name=name)
    if cell == "gru":
        return nn.GRUCell(hidden, name=name)
    if cell == "elman":
        return nn.SimpleCell(hidden, activation_fn=jnp.tanh, name=name)
    raise ValueError(f"cell={cell!r} is not one of {', '.join(CELLS)}")


def zero_carry(cell: str, batch: int, hidden: int):
    """The zero initial state: ``(c, h)`` for the LSTM, ``h`` otherwise (each ``[B, H]``)."""
    z = jnp.zeros((batch, hidden), jnp.float32)
    return (z, z) if cell == "lstm" else z


def last_hidden(cell: str, carry):
    """``h`` of a carry (the LSTM's is ``(c, h)``)."""
    return carry[1] if cell == "lstm" else carry


def matmul_params(params, *, tied: bool) -> int:
    """Parameters that multiply (``embed`` is a lookup unless ``tied``)."""
    n = sum(int(x.size) for x in jax.tree.leaves(params))
    if not tied and "embed" in params:
        n -= sum(int(x.size) for x in jax.tree.leaves(params["embed"]))
    return n


class RecurrentStack(nn.Module):
    """``num_layers`` recurrent layers (``nn.RNN`` of one cell each, or ``nn.Bidirectional``
    of two) with dropout between them.

    ``__call__(x_BTE, carries, seq_lengths_B=None, deterministic=True)`` returns the last
    layer's outputs ``[B, T, H]`` (``[B, T, 2H]`` bidirectional) and the final carries
    (per layer; a pair (forward, backward) per bidirectional layer; with ``seq_lengths_B``
    the carry of each row's last valid step, Flax's ``nn.RNN`` convention).
    """

    cell: str
    hidden_dim: int
    num_layers: int
    dropout_rate: float = 0.0
    bidirectional: bool = False

    @nn.compact
    def __call__(self, x_BTE, carries=None, seq_lengths_B=None, deterministic=True):
        new = []
        for i in range(self.num_layers):
            init = None if carries is None else carries[i]
            # Parameters under ``cell_l{i}`` (and ``cell_l{i}_reverse``): PyTorch's suffixes.
            forward = nn.RNN(make_cell(self.cell, self.hidden_dim, name=f"cell_l{i}"))
            if self.bidirectional:
                backward = nn.RNN(make_cell(self.cell, self.hidden_dim, name=f"cell_l{i}_reverse"))
                layer = nn.Bidirectional(forward, backward, return_carry=True)
            else:
                layer = forward.clone(return_carry=True)
            carry, x_BTE = layer(x_BTE, initial_carry=init, seq_lengths=seq_lengths_B)
            new.append(carry)
            if i + 1 < self.num_layers:
                x_BTE = nn.Dropout(self.dropout_rate)(x_BTE, deterministic=deterministic)
        return x_BTE, tuple(new)


class RNNLM(nn.Module):
    """The recurrent language model.

    ``apply(variables, tokens_BT)`` -> logits ``[B, T, V]`` (a zero initial state: a
    window model); ``apply(variables, tokens_BT, memory)`` -> ``(logits, new_memory)``
    (``seqjax.models.memory``: the state carried across segments, no gradient into it).
    ``mask_BT`` (the samplers' key mask) is accepted and needs nothing: the network is causal.
    """

    cfg: RNNConfig

    def init_memory(self, batch: int):
        """Zero carries of every layer (leading axis: the batch)."""
        c = self.cfg
        return tuple(zero_carry(c.cell, batch, c.hidden_dim) for _ in range(c.num_layers))

    def train_flops_per_step(self, params, *, batch_size: int, seq_len: int) -> float:
        """``6 N`` per token (Kaplan et al. 2020), N the parameters that multiply: all but
        the token table, which is a lookup unless it is also the output layer."""
        return 6.0 * matmul_params(params, tied=self.cfg.tie_embeddings) * batch_size * seq_len

    @nn.compact
    def __call__(self, tokens_BT, memory=None, *, deterministic=True, mask_BT=None):
        del mask_BT
        c = self.cfg
        embed = nn.Embed(c.vocab_size, c.embed_width, name="embed")
        x_BTE = nn.Dropout(c.dropout_rate)(embed(tokens_BT), deterministic=deterministic)
        carries = self.init_memory(tokens_BT.shape[0]) if memory is None else memory
        carries = jax.lax.stop_gradient(carries)  # truncated BPTT: the segment is the window
        h_BTH, new = RecurrentStack(c.cell, c.hidden_dim, c.num_layers, c.dropout_rate, name="rnn")(
            x_BTE, carries, deterministic=deterministic
        )
        h_BTH = nn.Dropout(c.dropout_rate)(h_BTH, deterministic=deterministic)
        if c.tie_embeddings:
            if c.embed_width != c.hidden_dim:
                h_BTH = nn.Dense(c.embed_width, name="proj")(h_BTH)
            logits_BTV = embed.attend(h_BTH)
        else:
            logits_BTV = nn.Dense(c.vocab_size, name="head")(h_BTH)
        logits_BTV = logits_BTV.astype(jnp.float32)
        if memory is None:
            return logits_BTV
        return logits_BTV, jax.tree.map(jax.lax.stop_gradient, new)


# --------------------------------------------------------------------------------------
# The carried state as a recurrent kind of the training system (``seqjax.models.memory``).
# --------------------------------------------------------------------------------------

from seqjax.models import memory as memory_lib  # noqa: E402

KIND = "rnn"


def _eval_lengths(config) -> dict:
    """Evaluation segments: ``config.eval.tgt_len`` when set, else ``data.seq_len`` (the
    state carries, so the length only sets how often it is handed on)."""
    ev = config.get("eval") or {}
    tgt = ev.get("tgt_len") if hasattr(ev, "get") else None
    return {"tgt_len": int(tgt or config.data.seq_len)}


def _validate(config, bad) -> None:
    """The carried state needs contiguous streams and one update per batch."""
    d, o = config.data, config.optimizer
    if d.get("lm_batching") != "stream":
        bad("data.lm_batching", d.get("lm_batching"),
            f'"stream" for model.kind="{KIND}" (each row continues its text)')  # fmt: skip
    if o.get("grad_accum_steps", 1) != 1:
        bad("optimizer.grad_accum_steps", o.grad_accum_steps,
            f'1 for model.kind="{KIND}" (the state moves on with every batch)')  # fmt: skip
    if config.model.get("family") not in ("rnn",):
        bad("model.family", config.model.get("family"), f'"rnn" for model.kind="{KIND}"')


RECURRENCE = memory_lib.register(
    memory_lib.Recurrence(
        kind=KIND,
        train_model=lambda cfg, config: RNNLM(cfg),
        eval_lengths=_eval_lengths,
        eval_model=lambda cfg, lengths: RNNLM(cfg),
        attention_options=lambda config, options: options,
        validate=_validate,
    )
)
