"""Fine-tuning heads a BERT user expects, on ``transformer.Encoder`` (Devlin et al. 2019, §4
and Fig. 4): a per-token linear layer over the encoder's outputs.

Legend: B batch, T sequence length, E model width, C outputs per token.

* Extractive question answering (§4.2, SQuAD; Fig. 4 (c)): ``C = 2``, a start and an end
  logit per token (``start_end``); the answer span is the best ``(i, j), i <= j``.
* Token tagging (§5.3, CoNLL-2003 NER; Fig. 4 (d)): ``C`` labels per token.

A sentence-pair cross-encoder is the input ``[CLS] A [SEP] B [SEP]`` with segment ids
(``token_types_BT``) into the same encoder; its head is ``heads.PairHead`` on [CLS].
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from seqjax.models import layers
from seqjax.models.transformer import Encoder, TransformerConfig


class TokenHeadEncoder(nn.Module):
    """Bidirectional encoder + ``Dense(C)`` per token: tokens ``[B, T]`` -> float32 logits
    ``[B, T, C]`` (``C = cfg.num_classes``)."""

    cfg: TransformerConfig

    @nn.compact
    def __call__(
        self, tokens_BT, *, mask_BT=None, token_types_BT=None, positions_BT=None,
        deterministic=True,
    ):  # fmt: skip
        cfg = self.cfg
        if cfg.num_classes < 1:
            raise ValueError(f"model.num_classes={cfg.num_classes} must be >= 1 for a token head")
        x_BTE, _ = Encoder(cfg, causal=False, name="encoder")(
            tokens_BT, mask_BS=mask_BT, token_types_BT=token_types_BT, positions_BT=positions_BT,
            deterministic=deterministic,
        )  # fmt: skip
        x_BTE = nn.Dropout(cfg.dropout_rate)(x_BTE.astype(jnp.float32), deterministic=deterministic)
        head = nn.Dense(cfg.num_classes, kernel_init=layers.dense_init(), name="head")
        return head(x_BTE).astype(jnp.float32)


def start_end(logits_BT2):
    """QA's start and end logits ``[B, T]`` each, from a 2-output token head."""
    return logits_BT2[..., 0], logits_BT2[..., 1]


class _PooledClassifier(nn.Module):
    """``heads.PairHead``'s parameters (``pooler``, ``classifier``) with the dropout of
    ``BertForSequenceClassification`` between them: ``[B, T, E] -> float32 logits [B, C]``."""

    num_classes: int
    dropout_rate: float = 0.0

    @nn.compact
    def __call__(self, x_BTE, deterministic=True):
        x_BE = x_BTE[:, 0].astype(jnp.float32)
        dense = nn.Dense(x_BE.shape[-1], kernel_init=layers.dense_init(), name="pooler")
        pooled_BE = nn.Dropout(self.dropout_rate)(
            jnp.tanh(dense(x_BE)), deterministic=deterministic
        )
        out = nn.Dense(self.num_classes, kernel_init=layers.dense_init(), name="classifier")
        return out(pooled_BE).astype(jnp.float32)


class CrossEncoder(nn.Module):
    """The sentence-pair cross-encoder (Devlin et al. 2019, Fig. 4 (a); Hugging Face
    ``BertForSequenceClassification`` with ``token_type_ids``): ``[CLS] A [SEP] B [SEP]`` and
    its segment ids ``[B, T]`` -> the encoder -> the pooler on [CLS] (``pair_head/pooler``,
    tanh) -> dropout -> ``pair_head/classifier``: float32 logits ``[B, C]``."""

    cfg: TransformerConfig

    @nn.compact
    def __call__(self, tokens_BT, *, mask_BT=None, token_types_BT=None, deterministic=True):
        x_BTE, _ = Encoder(self.cfg, causal=False, name="encoder")(
            tokens_BT, mask_BS=mask_BT, token_types_BT=token_types_BT, deterministic=deterministic
        )
        head = _PooledClassifier(self.cfg.num_classes, self.cfg.dropout_rate, name="pair_head")
        return head(x_BTE, deterministic=deterministic)
