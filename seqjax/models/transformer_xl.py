"""Transformer-XL language model with segment-level recurrence (Dai et al. 2019, §3.2).

For layer n and segment tau+1 (eq. in §3.2):

    h~ = [SG(m_tau^{n-1}) ; h_{tau+1}^{n-1}]          memory and current segment
    q = h_{tau+1}^{n-1} W_q,   k, v = h~ W_k, h~ W_v     queries only from the segment
    h_{tau+1}^n = Block(q, k, v) with relative attention (``seqjax.attention.relative``)

The memory holds the last ``mem_len`` hidden states of every layer's input: ``n_layers + 1``
tensors (the embeddings included), updated as the last ``mem_len`` positions of
``concat(memory, hidden)`` under ``stop_gradient`` (memory first, then the new hidden
states: the argument order the PyTorch reference swaps). Memories have a fixed shape
``[B, mem_len, E]`` plus a validity mask ``[B, mem_len]`` so that the first segments (with
no or partial memory) compile to the same program as the rest.

Blocks are pre-LayerNorm like the rest of seqjax (the reference's ``pre_lnorm`` variant):
the LayerNorm is applied to ``[memory; segment]`` and the memory stores un-normalized
states.

Legend: B batch, T segment length, M memory length, E model width, V vocabulary.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from seqjax.models import layers
from seqjax.models.transformer import TransformerConfig


class XLBlock(nn.Module):
    """Pre-LN block attending from the segment to ``[memory; segment]`` (§3.2): the shared
    ``layers.attention_sublayer`` with ``memory_BME``, then ``layers.feed_forward_sublayer``."""

    cfg: TransformerConfig
    layer: int

    @nn.compact
    def __call__(self, x_BTE, mem_BME, kv_mask_BS, deterministic, shared):
        cfg = self.cfg
        x_BTE = x_BTE + layers.attention_sublayer(
            cfg,
            self.layer,
            x_BTE,
            causal=True,
            memory_BME=mem_BME,
            mask_BS=kv_mask_BS,
            deterministic=deterministic,
            extra=shared,
        )
        x_BTE = x_BTE + layers.feed_forward_sublayer(cfg, x_BTE, deterministic=deterministic)
        return nn.with_logical_constraint(x_BTE, ("batch", "length", "embed"))


class TransformerXL(nn.Module):
    """Transformer-XL LM: ``(tokens [B, T], memory) -> (logits [B, T, V], new memory)``.

    Attributes:
      cfg: a ``TransformerConfig`` whose attention is ``"relative"`` (options
        ``same_length``, ``mem_len``, ``clamp_len``, ``untie_r``).
      mem_len: M, the number of positions kept in memory (0 disables recurrence).
    """

    cfg: TransformerConfig
    mem_len: int

    def init_memory(self, batch: int):
        """Empty memory: zeros ``[B, M, E]`` for each of the ``n_layers + 1`` inputs, and an
        all-False validity mask ``[B, M]``."""
        mems = tuple(
            jnp.zeros((batch, self.mem_len, self.cfg.d_model), jnp.float32)
            for _ in range(self.cfg.num_layers + 1)
        )
        return mems, jnp.zeros((batch, self.mem_len), bool)

    @nn.compact
    def __call__(self, tokens_BT, memory=None, *, deterministic=True):
        """Runs one segment.

        Args:
          tokens_BT: int ``[B, T]``.
          memory: ``(mems, valid_BM)`` from ``init_memory`` or a previous call; None means
            no memory at all (M = 0 for this call).
          deterministic: disables dropout.

        Returns:
          ``(logits_BTV float32, (new_mems, new_valid_BM))``.
        """
        cfg = self.cfg
        b, t = tokens_BT.shape
        if memory is None:
            mems = tuple(
                jnp.zeros((b, 0, cfg.d_model), jnp.float32) for _ in range(cfg.num_layers + 1)
            )
            valid_BM = jnp.zeros((b, 0), bool)
        else:
            mems, valid_BM = memory
            if len(mems) != cfg.num_layers + 1:
                want = cfg.num_layers + 1
                raise ValueError(
                    f"memory has {len(mems)} tensors; expected num_layers + 1 = {want}"
                )
            # SG(m_tau) in §3.2: no gradient flows into the memory.
            mems = tuple(jax.lax.stop_gradient(m) for m in mems)
        embed = layers.token_embedding(cfg)
        x_BTE = embed(tokens_BT)
        x_BTE = nn.Dropout(cfg.dropout_rate)(x_BTE, deterministic=deterministic)
        kv_mask_BS = jnp.concatenate([valid_BM, jnp.ones((b, t), bool)], axis=1)
        shared = layers.shared_attention_params(self, cfg)
        hiddens = [x_BTE]
        for i in range(cfg.num_layers):
            x_BTE = XLBlock(cfg, i, name=f"block_{i}")(
                x_BTE, mems[i], kv_mask_BS, deterministic, shared.get(cfg.layer_attention(i))
            )
            hiddens.append(x_BTE)
        x_BTE = layers.norm(name="ln_final")(x_BTE)
        logits_BTV = embed.attend(x_BTE.astype(jnp.float32)).astype(jnp.float32)
        return logits_BTV, update_memory(mems, valid_BM, hiddens, self.mem_len)


def update_memory(mems, valid_BM, hiddens, mem_len: int):
    """New memory: the last ``mem_len`` positions of ``concat(memory, hidden)`` per layer,
    under ``stop_gradient`` (no gradient flows into the memory)."""
    b, t = hiddens[0].shape[:2]
    new_mems = tuple(
        jax.lax.stop_gradient(
            jnp.concatenate([m.astype(jnp.float32), h.astype(jnp.float32)], axis=1)[
                :, max(0, m.shape[1] + t - mem_len) :
            ]
        )
        for m, h in zip(mems, hiddens)
    )
    new_valid = jnp.concatenate([valid_BM, jnp.ones((b, t), bool)], axis=1)
    new_valid = new_valid[:, max(0, new_valid.shape[1] - mem_len) :]
    if mem_len == 0:
        new_mems = tuple(m[:, :0] for m in new_mems)
        new_valid = new_valid[:, :0]
    return new_mems, new_valid
