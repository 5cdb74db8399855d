"""XLNet equals ``transformers``' ``XLNetLMHeadModel`` (random init, saved with
``save_pretrained`` and imported with ``seqjax.convert``): the content stream (oracle 1 of
issue 45), the two-stream query logits under a permutation (oracle 2) and memory across
three segments (oracle 3)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import jax.numpy as jnp  # noqa: E402

from seqjax import convert  # noqa: E402

B, T, V = 2, 8, 99
TOL = dict(rtol=1e-4, atol=1e-4)


def _hf_config(**kw):
    return transformers.XLNetConfig(
        vocab_size=V, d_model=32, n_layer=2, n_head=4, d_inner=37, dropout=0.0,
        mem_len=None, reuse_len=None, **kw,
    )  # fmt: skip


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    torch.manual_seed(0)
    hf = transformers.XLNetLMHeadModel(_hf_config()).eval()
    with torch.no_grad():  # non-zero biases, so that every term is checked
        for name, p in hf.named_parameters():
            if name.endswith(("bias", "seg_embed", "mask_emb")):
                p.normal_(0.0, 0.1)
    path = tmp_path_factory.mktemp("xlnet")
    hf.save_pretrained(path)
    return hf, convert.load(path), path


def _ids(seed, shape=(B, T)):
    return np.random.default_rng(seed).integers(0, V, shape)


def _types():
    return np.array([[0] * 5 + [1] * 3, [0] * 3 + [1] * 5])


def _t(x, dtype=torch.long):
    return torch.tensor(np.asarray(x), dtype=dtype)


def test_import_names_the_architecture(pair):
    _, imp, _ = pair
    assert imp.arch == "xlnet" and imp.initialized == [] and imp.unused == []


@pytest.mark.parametrize("implementation", ["reference", "blockwise"])
def test_content_stream_equals_transformers(pair, implementation):
    """Oracle 1: no permutation, segments A/B: every layer's hidden states and the logits."""
    hf, imp, _ = pair
    import dataclasses

    model = convert.make_model(
        "xlnet", dataclasses.replace(imp.config, implementation=implementation)
    )
    ids, types = _ids(1), _types()
    with torch.no_grad():
        out = hf(_t(ids), token_type_ids=_t(types), output_hidden_states=True, use_mems=False)
    logits, (_, hiddens) = model.apply(
        {"params": imp.params}, jnp.asarray(ids), token_types_BT=jnp.asarray(types),
        return_state=True,
    )  # fmt: skip
    assert len(hiddens) == len(out.hidden_states) == 3
    for mine, ref in zip(hiddens, out.hidden_states):
        np.testing.assert_allclose(np.asarray(mine), ref.numpy(), **TOL)
    np.testing.assert_allclose(np.asarray(logits), out.logits.numpy(), **TOL)
