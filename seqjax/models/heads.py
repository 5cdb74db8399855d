"""Output heads shared by the encoder models: BERT's masked-LM head (``MLMHead``).

Legend: B batch, T sequence length, E model width, V vocabulary.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from seqjax.models import layers


class MLMHead(nn.Module):
    """BERT's masked-LM output head (Devlin et al. 2019, App. A.1 and the released code's
    ``cls/predictions``; RoBERTa's ``lm_head``, Liu et al. 2019): dense ``E -> E``, GELU,
    LayerNorm, then the decoder over the vocabulary (the token table when tied, else its own
    ``[E, V]`` kernel) plus a bias ``[V]``: ``[B, T, E] -> float32 logits [B, T, V]``.

    Its parameters live outside ``encoder/``, so ``config.init_from`` treats it as a
    pre-training head (``seqjax.train.init_from``: left unused by a fine-tuned classifier).
    """

    cfg: Any  # TransformerConfig

    @nn.compact
    def __call__(self, x_BTE, embed):
        cfg = self.cfg
        h_BTE = nn.Dense(
            cfg.d_model,
            kernel_init=nn.with_logical_partitioning(layers.dense_init(), ("embed", "mlp")),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("mlp",)),
            name="transform",
        )(x_BTE.astype(jnp.float32))
        h_BTE = layers.norm(name="ln", cfg=cfg)(nn.gelu(h_BTE, approximate=False))
        if cfg.tie_embeddings:
            logits_BTV = embed.attend(h_BTE)
        else:
            logits_BTV = nn.Dense(
                cfg.vocab_size,
                kernel_init=nn.with_logical_partitioning(layers.dense_init(), ("embed", "vocab")),
                use_bias=False,
                name="decoder",
            )(h_BTE)
        bias_V = self.param(
            "bias", nn.with_logical_partitioning(nn.initializers.zeros, ("vocab",)),
            (cfg.vocab_size,),
        )  # fmt: skip
        return (logits_BTV + bias_V[None, None, :]).astype(jnp.float32)
