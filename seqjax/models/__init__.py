"""Flax Linen models: ``TransformerLM`` (decoder), ``TransformerClassifier`` (encoder) and
``EncoderDecoder`` (Vaswani et al. 2017's sequence-to-sequence Transformer)."""

from seqjax.models import rnn, transformer_xl, xlnet_memory  # noqa: F401  (recurrent kinds)
from seqjax.models.encoder_decoder import EncoderDecoder, EncoderDecoderConfig, shift_right
from seqjax.models.layers import MultiHeadAttention, freeze_options
from seqjax.models.transformer import (
    TransformerClassifier,
    TransformerConfig,
    TransformerLM,
    attention_cycle,
)

__all__ = [
    "EncoderDecoder",
    "EncoderDecoderConfig",
    "MultiHeadAttention",
    "TransformerClassifier",
    "TransformerConfig",
    "TransformerLM",
    "attention_cycle",
    "freeze_options",
    "shift_right",
]
