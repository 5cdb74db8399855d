"""The ``architectures`` names and tensor names real hub checkpoints carry are read: BERT's
legacy ``LayerNorm.gamma/beta`` (``bert-base-uncased``), ``BertForPreTraining``, a bare
``BertModel`` / ``GPT2Model``, and ``T5WithLMHeadModel`` (``t5-small/base/large``); and the
architecture registry refuses a clash."""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest

from seqjax import convert
from seqjax.convert import registry
from tests.convert import _hf_models as hf

B, T = 2, 8


def _logits(imp, *ids):
    return np.asarray(imp.model.apply({"params": imp.params}, *map(jnp.asarray, ids)))


def _rewrite(folder, config=None, rename=None):
    from safetensors.numpy import load_file, save_file

    if config is not None:
        cfg = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**cfg, **config}))
    if rename is not None:
        tensors = load_file(str(folder / "model.safetensors"))
        save_file({rename(n): a for n, a in tensors.items()}, str(folder / "model.safetensors"))


def test_bert_legacy_gamma_beta_names(tmp_path):
    model = hf.bert()
    folder = tmp_path / "m"
    hf.save(model, folder)
    legacy = {".LayerNorm.weight": ".LayerNorm.gamma", ".LayerNorm.bias": ".LayerNorm.beta"}

    def old(name):
        for new, was in legacy.items():
            if name.endswith(new):
                return name[: -len(new)] + was
        return name

    _rewrite(folder, {"architectures": ["BertForPreTraining"]}, old)
    imp = convert.load(folder)
    assert imp.arch == "bert" and imp.unused == []
    ids = hf.ids((B, T))
    hf.assert_close(_logits(imp, ids), hf.logits(model, ids))


def test_bare_bert_model_initialises_the_head(tmp_path):
    model = hf.bert()
    bare = hf.transformers.BertModel(model.config, add_pooling_layer=False)
    bare.load_state_dict(model.bert.state_dict())
    imp = convert.load(hf.save(bare.eval(), tmp_path))
    assert imp.arch == "bert" and imp.initialized == ["mlm_head"]
    np.testing.assert_array_equal(
        imp.params["encoder"]["block_1"]["ln_mlp"]["scale"],
        model.bert.encoder.layer[1].output.LayerNorm.weight.detach().numpy(),
    )


def test_bare_gpt2_model(tmp_path):
    model = hf.gpt2()
    imp = convert.load(hf.save(model.transformer, tmp_path))  # a GPT2Model, tied output
    assert imp.arch == "gpt2" and imp.initialized == []
    ids = hf.ids((B, T), low=0)
    hf.assert_close(_logits(imp, ids), hf.logits(model, ids))


def test_t5_with_lm_head_model_name(tmp_path):
    model = hf.t5()
    folder = tmp_path / "m"
    hf.save(model, folder)
    _rewrite(folder, {"architectures": ["T5WithLMHeadModel"]})
    imp = convert.load(folder)
    src, tgt = hf.ids((B, T), seed=1), hf.ids((B, T), low=0, seed=2)
    hf.assert_close(_logits(imp, src, tgt), hf.logits(model, src, tgt))


def test_registry_lists_and_refuses_a_clash():
    assert {"bert", "roberta", "gpt2", "t5"} <= set(registry.names())
    assert {"BertModel", "GPT2Model", "T5WithLMHeadModel"} <= set(registry.hf_names())
    clash = registry.Architecture(
        name="mine", architectures=("GPT2Model",), model_type="mine", config=dict,
        hf_config=dict, rules=list, make_model=dict,
    )  # fmt: skip
    with pytest.raises(ValueError, match="'GPT2Model' is already read by 'gpt2'"):
        registry.register(clash)
    with pytest.raises(ValueError, match=r"arch='nope' is not one of \("):
        convert.save("unused", "nope", None, {})
