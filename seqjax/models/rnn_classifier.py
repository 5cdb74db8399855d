"""A recurrent sequence classifier (the LSTM row of Iyyer et al. 2015's Table 1 and of the
LRA baselines): embeddings, ``num_layers`` recurrent layers of Flax's cells (uni- or
bidirectional, ``nn.Bidirectional``), pooled over the valid steps, one linear layer.

Rows are right-padded with ``pad_id``: each row's length is its count of other ids, passed
to ``nn.RNN`` as ``seq_lengths`` so that the padding never enters a state (the backward
direction starts at each row's last real token). Pooling (``RNNConfig.pooling``): "last"
(the final state of each direction, Sutskever et al. 2014's sentence vector), "mean" or
"max" over the valid steps.

Legend: B batch, T time, E embedding width, H hidden width (2H bidirectional), C classes.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from seqjax.models.rnn import RecurrentStack, RNNConfig, last_hidden, matmul_params


class RNNClassifier(nn.Module):
    """``apply(variables, tokens_BT, deterministic=...)`` -> logits ``[B, C]``."""

    cfg: RNNConfig

    def train_flops_per_step(self, params, *, batch_size: int, seq_len: int) -> float:
        """``6 N`` per token, N the parameters that multiply (``rnn.matmul_params``)."""
        return 6.0 * matmul_params(params, tied=False) * batch_size * seq_len

    @nn.compact
    def __call__(self, tokens_BT, *, deterministic=True):
        c = self.cfg
        pad = 0 if c.pad_id is None else c.pad_id
        valid_BT = tokens_BT != pad
        lengths_B = jnp.maximum(valid_BT.sum(-1), 1).astype(jnp.int32)
        x_BTE = nn.Embed(c.vocab_size, c.embed_width, name="embed")(tokens_BT)
        x_BTE = nn.Dropout(c.dropout_rate)(x_BTE, deterministic=deterministic)
        h_BTH, carries = RecurrentStack(
            c.cell, c.hidden_dim, c.num_layers, c.dropout_rate, c.bidirectional, name="rnn"
        )(x_BTE, None, lengths_B, deterministic=deterministic)
        if c.pooling == "last":
            final = carries[-1]
            parts = final if c.bidirectional else (final,)
            pooled_BH = jnp.concatenate([last_hidden(c.cell, p) for p in parts], axis=-1)
        else:
            keep_BT1 = (jnp.arange(tokens_BT.shape[1])[None] < lengths_B[:, None])[..., None]
            if c.pooling == "mean":
                pooled_BH = (h_BTH * keep_BT1).sum(1) / lengths_B[:, None]
            else:
                pooled_BH = jnp.where(keep_BT1, h_BTH, -jnp.inf).max(1)
        pooled_BH = nn.Dropout(c.dropout_rate)(pooled_BH, deterministic=deterministic)
        return nn.Dense(c.num_classes, name="head")(pooled_BH).astype(jnp.float32)
