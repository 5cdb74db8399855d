"""The model options imported checkpoints need are validated when the config is built, one
sentence naming the field and the valid values; their defaults leave seqjax's own models
as they were (checked against Hugging Face in the other files of this folder)."""

from __future__ import annotations

import pytest

from seqjax.models.encoder_decoder_config import EncoderDecoderConfig
from seqjax.models.transformer import TransformerConfig


@pytest.mark.parametrize(
    "field, value, valid",
    [
        ("norm_type", "batchnorm", "('layernorm', 'rmsnorm')"),
        ("activation", "swish", "('gelu_tanh', 'gelu', 'relu', 'silu')"),
        ("norm_position", "middle", "('pre', 'post')"),
    ],
)
def test_bad_option_names_field_and_valid_values(field, value, valid):
    for make in (lambda **kw: TransformerConfig(vocab_size=8, **kw),
                 lambda **kw: EncoderDecoderConfig(vocab_size=8, **kw)):  # fmt: skip
        with pytest.raises(ValueError) as err:
            make(**{field: value})
        assert str(err.value) == f"model.{field}={value!r} is not one of {valid}"


def test_post_ln_is_not_reversible():
    with pytest.raises(ValueError, match="norm_position='post' cannot be reversible"):
        TransformerConfig(vocab_size=8, norm_position="post", reversible=True)


def test_t5_bias_positional_in_encoder_decoder():
    cfg = EncoderDecoderConfig(vocab_size=8, positional="t5_bias", t5_buckets=8)
    assert cfg.encoder_config().positional == "t5_bias"
    assert cfg.decoder_config().t5_buckets == 8
    with pytest.raises(ValueError, match=r"model.positional='rope' is not one of"):
        EncoderDecoderConfig(vocab_size=8, positional="rope")
