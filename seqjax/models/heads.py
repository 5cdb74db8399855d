"""Output heads shared by the encoder models: BERT's masked-LM head (``MLMHead``), the pooler
and sentence-pair classifier (``PairHead``: BERT's next-sentence prediction, ALBERT's
sentence-order prediction).

Legend: B batch, T sequence length, E model width, V vocabulary, W the head's width (ALBERT:
the embedding width), C pair classes.
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

    ``width`` (default E) and ``activation`` (default the exact GELU) are ALBERT's options
    (Lan et al. 2020, §3.1: the head projects to the embedding width E of the factorized
    table; ``hidden_act`` gelu_new).
    """

    cfg: Any  # TransformerConfig
    width: int = 0
    activation: str = "gelu"

    @nn.compact
    def __call__(self, x_BTE, embed):
        cfg = self.cfg
        h_BTE = nn.Dense(
            self.width or cfg.d_model,
            kernel_init=nn.with_logical_partitioning(layers.dense_init(), ("embed", "mlp")),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("mlp",)),
            name="transform",
        )(x_BTE.astype(jnp.float32))
        h_BTE = layers.norm(name="ln", cfg=cfg)(layers.activation_fn(self.activation)(h_BTE))
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


class PairHead(nn.Module):
    """The pooler and a sentence-pair classifier on the first position ([CLS]): ``tanh(x_0
    W_p + b_p)`` then ``Dense(C)`` (Devlin et al. 2019, §3.1 "Task #2: NSP" and the released
    code's ``bert/pooler``, ``cls/seq_relationship``; ALBERT's sentence-order head, Lan et al.
    2020 §4.1): ``[B, T, E] -> (pooled [B, E], float32 logits [B, C])``."""

    num_classes: int = 2

    @nn.compact
    def __call__(self, x_BTE):
        x_BE = x_BTE[:, 0].astype(jnp.float32)
        e = x_BE.shape[-1]
        pooled_BE = jnp.tanh(nn.Dense(e, kernel_init=layers.dense_init(), name="pooler")(x_BE))
        logits_BC = nn.Dense(self.num_classes, kernel_init=layers.dense_init(), name="classifier")(
            pooled_BE
        )
        return pooled_BE, logits_BC.astype(jnp.float32)
