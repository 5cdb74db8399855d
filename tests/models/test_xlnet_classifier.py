"""``XLNetForSequenceClassification`` folders (random init, ``save_pretrained``) import into
``XLNetClassifier`` with the same logits (the last token's summary, projection + tanh, and
``logits_proj``; left padding as XLNet's tokenizer pads), and export back."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from seqjax import convert  # noqa: E402

B, T, V, LABELS = 2, 8, 61, 3


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    torch.manual_seed(0)
    cfg = transformers.XLNetConfig(
        vocab_size=V, d_model=16, n_layer=2, n_head=2, d_inner=24, dropout=0.0,
        num_labels=LABELS, mem_len=None, reuse_len=None,
    )  # fmt: skip
    hf = transformers.XLNetForSequenceClassification(cfg).eval()
    with torch.no_grad():  # non-zero biases, so that every term is checked
        for name, p in hf.named_parameters():
            if name.endswith(("bias", "seg_embed", "mask_emb")):
                p.normal_(0.0, 0.1)
    path = tmp_path_factory.mktemp("xlnet_cls")
    hf.save_pretrained(path)
    return hf, convert.load(path)


def _inputs():
    ids = np.random.default_rng(0).integers(1, V, (B, T))
    mask = np.ones((B, T), np.int64)
    mask[1, :3] = 0  # the second row left-padded
    types = np.array([[0] * 5 + [1] * 3, [0] * 3 + [1] * 5])
    return ids, mask, types


def test_classifier_logits_equal_transformers(pair):
    hf, imp = pair
    assert imp.arch == "xlnet_classifier" and imp.config.num_labels == LABELS
    assert imp.initialized == [] and imp.unused == []
    ids, mask, types = _inputs()
    with torch.no_grad():
        want = hf(torch.tensor(ids), attention_mask=torch.tensor(mask),
                  token_type_ids=torch.tensor(types)).logits.numpy()  # fmt: skip
    got = imp.model.apply(
        {"params": imp.params}, jnp.asarray(ids), mask_BT=jnp.asarray(mask > 0),
        token_types_BT=jnp.asarray(types),
    )  # fmt: skip
    assert got.shape == (B, LABELS)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)


def test_classifier_export_round_trip(pair, tmp_path):
    hf, imp = pair
    convert.save(tmp_path, "xlnet_classifier", imp.config, imp.params)
    back = transformers.XLNetForSequenceClassification.from_pretrained(tmp_path).eval()
    ids, mask, types = _inputs()
    kw = dict(attention_mask=torch.tensor(mask), token_type_ids=torch.tensor(types))
    with torch.no_grad():
        got = back(torch.tensor(ids), **kw).logits.numpy()
        want = hf(torch.tensor(ids), **kw).logits.numpy()
    np.testing.assert_allclose(got, want, atol=1e-6)
    again = convert.load(tmp_path)
    for a, b in zip(jax.tree.leaves(again.params), jax.tree.leaves(imp.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_unsupported_summary_is_one_sentence():
    from seqjax.convert.archs import xlnet as arch

    hf = transformers.XLNetConfig(vocab_size=V, d_model=16, n_layer=1, n_head=2).to_dict()
    with pytest.raises(ValueError, match="summary_type"):
        arch.classifier_config({**hf, "summary_type": "first"})
