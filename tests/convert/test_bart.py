"""BART (``EncoderDecoder`` with BART's layout options) equals Hugging Face's
``BartForConditionalGeneration``: teacher-forced logits to float32 rounding after import
(embedding LayerNorm, positions at offset 2, a non-zero ``final_logits_bias``), and the
export loads in ``transformers`` with the same logits."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

from seqjax import convert
from seqjax.models.encoder_decoder_config import EncoderDecoderConfig
from tests.convert import _hf_models as hf

B, S, T = 2, 12, 9
torch = hf.torch


@pytest.fixture(scope="module")
def bart(tmp_path_factory):
    cfg = hf.transformers.BartConfig(
        vocab_size=hf.V, d_model=hf.E, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=hf.HEADS, decoder_attention_heads=hf.HEADS,
        encoder_ffn_dim=hf.FF, decoder_ffn_dim=hf.FF, max_position_embeddings=hf.POSITIONS,
    )  # fmt: skip
    model = hf._seeded(lambda: hf.transformers.BartForConditionalGeneration(cfg))
    with torch.no_grad():  # a buffer, zeros at init: make it count
        model.final_logits_bias.add_(0.5 * torch.randn_like(model.final_logits_bias))
    return model, convert.load(hf.save(model, tmp_path_factory.mktemp("bart")))


def _inputs():
    return hf.ids((B, S), low=3), hf.ids((B, T), low=3, seed=1)  # no pad id (0 or 1)


def _theirs(model, src, tgt):
    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(src.astype(np.int64)),
                    decoder_input_ids=torch.from_numpy(tgt.astype(np.int64)))  # fmt: skip
    return out.logits.numpy()


def _ours(imp, params, src, tgt):
    return np.asarray(imp.model.apply({"params": params}, jnp.asarray(src), jnp.asarray(tgt)))


def test_bart_logits_equal_transformers(bart):
    model, imp = bart
    assert imp.arch == "bart" and imp.unused == []
    c = imp.config
    assert c.embed_norm and c.position_offset == 2 and c.final_logits_bias and not c.embed_scale
    src, tgt = _inputs()
    hf.assert_close(_ours(imp, imp.params, src, tgt), _theirs(model, src, tgt))


def test_bart_export_loads_in_transformers(bart, tmp_path):
    _, imp = bart
    rng = np.random.default_rng(3)
    flat = traverse_util.flatten_dict(imp.params)
    params = traverse_util.unflatten_dict(
        {k: (v + 0.05 * rng.standard_normal(v.shape)).astype(np.float32) for k, v in flat.items()}
    )
    convert.save(tmp_path, "bart", imp.config, params)
    back = convert.load(tmp_path)
    assert back.config == imp.config and back.unused == []
    theirs = hf.transformers.BartForConditionalGeneration.from_pretrained(str(tmp_path)).eval()
    src, tgt = _inputs()
    hf.assert_close(_ours(imp, params, src, tgt), _theirs(theirs, src, tgt))


def test_position_offset_needs_learned_positions():
    with pytest.raises(ValueError, match="model.position_offset=2"):
        EncoderDecoderConfig(vocab_size=hf.V, position_offset=2, positional="sinusoidal")


def test_bart_masks_its_own_pad_id_not_bos(bart):
    """Real BART inputs start with ``<s>`` (id 0) and pad with id 1: the import masks id 1
    (``pad_token_id``), keeps id 0, and starts the decoder from ``decoder_start_token_id``."""
    model, imp = bart
    assert (imp.config.pad_id, imp.config.decoder_start_id) == (1, 2)
    src, tgt = _inputs()
    src[:, 0] = 0  # <s>
    src[1, -4:] = 1  # right padding
    tgt[:, 0] = 2  # decoder start
    mask = (src != 1).astype(np.int64)
    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(src.astype(np.int64)),
                    attention_mask=torch.from_numpy(mask),
                    decoder_input_ids=torch.from_numpy(tgt.astype(np.int64)))  # fmt: skip
    theirs = out.logits.numpy()
    hf.assert_close(_ours(imp, imp.params, src, tgt), theirs)
