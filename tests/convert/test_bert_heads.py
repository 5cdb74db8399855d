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


def test_feature_tagger_features_and_frozen_encoder(pretraining):
    """The tagger's features are BERT's hidden states (concatenated / scalar-mixed, as
    ``BertModel(output_hidden_states=True)`` gives them), and with ``freeze`` an optax step
    moves the head only."""
    import jax
    import optax

    from seqjax.models import feature_transfer as ft

    model, imp = pretraining
    ids, types = _inputs()
    with torch.no_grad():
        theirs = model.bert(input_ids=_torch(ids), token_type_ids=_torch(types),
                            output_hidden_states=True).hidden_states  # fmt: skip
    theirs = [h.numpy() for h in theirs]
    tagger = ft.FeatureTagger(imp.config, num_classes=5, how="concat", last=3)
    fresh = tagger.init(jax.random.key(0), jnp.asarray(ids))["params"]
    params = {**fresh, "encoder": imp.params["encoder"]}  # the pre-trained encoder
    feats = jax.jit(lambda p: tagger.apply({"params": p}, jnp.asarray(ids),
                                           token_types_BT=jnp.asarray(types), features=True))(
        params
    )  # fmt: skip
    hf.assert_close(feats, np.concatenate(theirs[-3:], -1))
    mixer = ft.FeatureTagger(imp.config, num_classes=5, how="scalar_mix", last=3)
    w = np.array([0.3, -1.0, 0.5], np.float32)
    mix_params = {**params, "scalar_mix": {"weights": w, "gamma": np.float32(1.5)}}
    mixed = jax.jit(lambda p: mixer.apply({"params": p}, jnp.asarray(ids),
                                          token_types_BT=jnp.asarray(types), features=True))(
        mix_params
    )  # fmt: skip
    s = np.exp(w) / np.exp(w).sum()  # ELMo eq. 1
    hf.assert_close(mixed, 1.5 * sum(s[j] * theirs[-3 + j] for j in range(3)))

    tx = ft.freeze(optax.adam(1e-2), params)
    state = tx.init(params)

    def loss(p):
        return jnp.mean(tagger.apply({"params": p}, jnp.asarray(ids)) ** 2)

    grads = jax.jit(jax.grad(loss))(params)
    assert any(float(jnp.abs(g).max()) > 0 for g in jax.tree.leaves(grads["encoder"]))
    new = jax.jit(lambda g, st, p: optax.apply_updates(p, tx.update(g, st, p)[0]))(
        grads, state, params
    )
    same = jax.tree.map(lambda a, b: bool(np.array_equal(a, b)), new["encoder"], params["encoder"])
    assert all(jax.tree.leaves(same))
    assert not np.array_equal(new["head"]["kernel"], params["head"]["kernel"])
    with pytest.raises(ValueError, match="no 'backbone' subtree"):
        ft.freeze(optax.adam(1e-2), params, frozen=("backbone",))
