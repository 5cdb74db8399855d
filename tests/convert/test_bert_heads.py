"""BERT's heads equal Hugging Face's: ``BertForPreTraining`` imports whole (masked-LM and
next-sentence logits), ``BertForQuestionAnswering`` (start/end logits) and
``BertForTokenClassification`` (per-token logits) import and export with equal logits, and
the encoder's per-layer hidden states equal ``BertModel(output_hidden_states=True)``'s."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

from seqjax import convert
from seqjax.models import token_heads
from tests.convert import _hf_models as hf

B, T = 2, 10
torch = hf.torch


def _config(**extra):
    return hf.transformers.BertConfig(
        vocab_size=hf.V, hidden_size=hf.E, num_hidden_layers=2, num_attention_heads=hf.HEADS,
        intermediate_size=hf.FF, max_position_embeddings=hf.POSITIONS, **extra,
    )  # fmt: skip


@pytest.fixture(scope="module")
def pretraining(tmp_path_factory):
    model = hf._seeded(lambda: hf.transformers.BertForPreTraining(_config()))
    return model, convert.load(hf.save(model, tmp_path_factory.mktemp("pre")))


def _inputs():
    return hf.ids((B, T)), hf.ids((B, T), low=0, seed=1) % 2


def _torch(x):
    return torch.from_numpy(x.astype(np.int64))


def _moved(params, seed=3):
    """Every leaf moved a little: an export must carry each one."""
    rng = np.random.default_rng(seed)
    flat = traverse_util.flatten_dict(params)
    return traverse_util.unflatten_dict(
        {k: (v + 0.05 * rng.standard_normal(v.shape)).astype(np.float32) for k, v in flat.items()}
    )


def _pretraining_logits(imp, params, ids, types):
    return imp.model.apply({"params": params}, jnp.asarray(ids), token_types_BT=jnp.asarray(types),
                           outputs="pretraining")  # fmt: skip


def test_bert_for_pretraining_imports_whole(pretraining):
    model, imp = pretraining
    assert imp.arch == "bert" and imp.config.pair_head and imp.unused == [] and not imp.initialized
    ids, types = _inputs()
    mlm, nsp = _pretraining_logits(imp, imp.params, ids, types)
    with torch.no_grad():
        out = model(input_ids=_torch(ids), token_type_ids=_torch(types))
    hf.assert_close(mlm, out.prediction_logits.numpy())
    hf.assert_close(nsp, out.seq_relationship_logits.numpy())


def test_bert_for_pretraining_export_loads_in_transformers(pretraining, tmp_path):
    _, imp = pretraining
    params = _moved(imp.params)
    convert.save(tmp_path, "bert", imp.config, params)
    assert convert.load(tmp_path).config == imp.config
    theirs = hf.transformers.BertForPreTraining.from_pretrained(str(tmp_path)).eval()
    ids, types = _inputs()
    mlm, nsp = _pretraining_logits(imp, params, ids, types)
    with torch.no_grad():
        out = theirs(input_ids=_torch(ids), token_type_ids=_torch(types))
    hf.assert_close(mlm, out.prediction_logits.numpy())
    hf.assert_close(nsp, out.seq_relationship_logits.numpy())


def test_hidden_states_equal_bert_model(pretraining):
    model, imp = pretraining
    ids, types = _inputs()
    types_BT = jnp.asarray(types)
    _, state = imp.model.apply(
        {"params": imp.params}, jnp.asarray(ids), token_types_BT=types_BT, mutable=["intermediates"]
    )
    ours = state["intermediates"]["encoder"]["hidden_states"]
    with torch.no_grad():
        theirs = model.bert(input_ids=_torch(ids), token_type_ids=_torch(types),
                            output_hidden_states=True).hidden_states  # fmt: skip
    assert len(ours) == len(theirs) == 3  # embeddings + 2 layers
    for a, b in zip(ours, theirs):
        hf.assert_close(a, b.numpy())


@pytest.mark.parametrize("arch", ["BertForQuestionAnswering", "BertForTokenClassification"])
def test_token_heads_import_and_export(arch, tmp_path):
    cls = getattr(hf.transformers, arch)
    classes = 2 if arch == "BertForQuestionAnswering" else 5
    model = hf._seeded(lambda: cls(_config(num_labels=classes)))
    imp = convert.load(hf.save(model, tmp_path / "in"))
    assert imp.config.num_classes == classes and imp.unused == []
    ids, types = _inputs()

    def ours(params):
        return imp.model.apply({"params": params}, jnp.asarray(ids),
                               token_types_BT=jnp.asarray(types))  # fmt: skip

    def theirs(m):
        with torch.no_grad():
            out = m(input_ids=_torch(ids), token_type_ids=_torch(types))
        if classes == 2:
            return np.stack([out.start_logits.numpy(), out.end_logits.numpy()], -1)
        return out.logits.numpy()

    got = ours(imp.params)
    hf.assert_close(got, theirs(model))
    if classes == 2:
        start, end = token_heads.start_end(got)
        assert start.shape == end.shape == (B, T)
    params = _moved(imp.params)
    convert.save(tmp_path / "out", imp.arch, imp.config, params)
    hf.assert_close(ours(params), theirs(cls.from_pretrained(str(tmp_path / "out")).eval()))
