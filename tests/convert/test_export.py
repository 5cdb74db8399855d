"""Export to the Hugging Face layout: ``load(save(params)) == params`` exactly, and the
written folder loads in ``transformers`` with the seqjax model's logits."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

from seqjax import convert
from tests.convert import _hf_models as hf

B, T = 2, 10


def _layout_config(arch, **extra):
    sizes = {"vocab_size": hf.V}
    if arch in ("bert", "roberta"):
        sizes |= dict(hidden_size=hf.E, num_hidden_layers=2, num_attention_heads=hf.HEADS,
                      intermediate_size=hf.FF, max_position_embeddings=hf.POSITIONS)  # fmt: skip
        sizes |= {"pad_token_id": 1, "layer_norm_eps": 1e-5} if arch == "roberta" else {}
    else:
        sizes |= dict(n_embd=hf.E, n_layer=2, n_head=hf.HEADS, n_positions=hf.POSITIONS)
    return convert.model_config(arch, sizes | extra)


def _random_params(arch, cfg, seed=0):
    """A seqjax model's parameters with every leaf random (biases and norms included)."""
    model = convert.make_model(arch, cfg)
    params = model.init(jax.random.key(seed), jnp.ones((1, 4), jnp.int32))["params"]
    flat = traverse_util.flatten_dict(jax.tree.map(np.asarray, jax.tree.map(
        lambda x: x, __import__("flax").linen.meta.unbox(params))))  # fmt: skip
    rng = np.random.default_rng(seed)
    flat = {k: (v + 0.1 * rng.standard_normal(v.shape)).astype(np.float32) for k, v in flat.items()}
    return model, traverse_util.unflatten_dict(flat)


def _assert_same_tree(a, b):
    fa, fb = traverse_util.flatten_dict(a), traverse_util.flatten_dict(b)
    assert sorted(fa) == sorted(fb)
    for k in fa:
        np.testing.assert_array_equal(np.asarray(fa[k]), np.asarray(fb[k]), err_msg=str(k))


@pytest.mark.parametrize("arch", ["bert", "roberta", "gpt2"])
@pytest.mark.parametrize("tied", [True, False])
def test_round_trip_and_transformers_logits(tmp_path, arch, tied):
    cfg = _layout_config(arch, tie_word_embeddings=tied)
    model, params = _random_params(arch, cfg)
    convert.save(tmp_path, arch, cfg, params)
    back = convert.load(tmp_path)
    assert back.arch == arch and back.config == cfg and back.unused == []
    _assert_same_tree(back.params, params)

    auto = hf.transformers.AutoModelForCausalLM if arch == "gpt2" else (
        hf.transformers.AutoModelForMaskedLM)  # fmt: skip
    theirs_model = auto.from_pretrained(str(tmp_path)).eval()
    ids = hf.ids((B, T))
    ours = np.asarray(model.apply({"params": params}, jnp.asarray(ids)))
    hf.assert_close(ours, hf.logits(theirs_model, ids))


@pytest.mark.parametrize("proj", ["relu", "gated-gelu"])
def test_t5_round_trip(tmp_path, proj):
    model = hf.t5(proj)
    imp = convert.load(hf.save(model, tmp_path / "in"))
    convert.save(tmp_path / "out", "t5", imp.config, imp.params)
    back = convert.load(tmp_path / "out")
    _assert_same_tree(back.params, imp.params)
    again = hf.transformers.T5ForConditionalGeneration.from_pretrained(str(tmp_path / "out"))
    src, tgt = hf.ids((B, T), seed=1), hf.ids((B, T), low=0, seed=2)
    hf.assert_close(hf.logits(again.eval(), src, tgt), hf.logits(model, src, tgt))


def test_t5_per_layer_bias_refused(tmp_path):
    imp = convert.load(hf.save(hf.t5(), tmp_path / "in"))
    params = jax.tree.map(np.array, imp.params)
    params["encoder"]["layer_1"]["attn"]["t5_bias"] += 1.0
    with pytest.raises(ValueError, match=r"encoder/layer_1/attn/t5_bias differs"):
        convert.save(tmp_path / "out", "t5", imp.config, params)


def test_native_layout_refused(tmp_path):
    from seqjax.models.transformer import TransformerConfig

    cfg = TransformerConfig(vocab_size=hf.V, d_model=hf.E, positional="learned")
    with pytest.raises(ValueError, match=r"model\.\w+=.* cannot be exported in the gpt2 layout"):
        convert.save(tmp_path, "gpt2", cfg, {})
    assert not (tmp_path / "config.json").exists()
