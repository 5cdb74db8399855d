"""Flax Linen models: ``TransformerLM`` (decoder) and ``TransformerClassifier`` (encoder)."""

from seqjax.models.layers import MultiHeadAttention, freeze_options
from seqjax.models.transformer import (
    TransformerClassifier,
    TransformerConfig,
    TransformerLM,
    attention_cycle,
)

__all__ = [
    "MultiHeadAttention",
    "TransformerClassifier",
    "TransformerConfig",
    "TransformerLM",
    "attention_cycle",
    "freeze_options",
]
