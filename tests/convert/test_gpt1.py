"""GPT-1 equals Hugging Face's ``OpenAIGPTDoubleHeadsModel``: LM and multiple-choice logits
after import, its LM and choice losses equal ``finetune_loss``'s parts (eq. 5, λ = 0.5), the
export loads in ``transformers`` with the same logits, and ``OpenAIGPTLMHeadModel`` imports
as a ``TransformerLM``."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

from seqjax import convert
from seqjax.models import gpt1
from tests.convert import _hf_models as hf

B, C, T = 2, 3, 10
torch = hf.torch


def _config():
    return hf.transformers.OpenAIGPTConfig(
        vocab_size=hf.V, n_embd=hf.E, n_layer=2, n_head=hf.HEADS, n_positions=hf.POSITIONS,
        num_labels=1,
    )  # fmt: skip


@pytest.fixture(scope="module")
def double(tmp_path_factory):
    model = hf._seeded(lambda: hf.transformers.OpenAIGPTDoubleHeadsModel(_config()))
    return model, convert.load(hf.save(model, tmp_path_factory.mktemp("gpt1")))


def _inputs():
    ids = hf.ids((B, C, T), low=0)
    mc = np.random.default_rng(1).integers(2, T, (B, C)).astype(np.int32)
    return ids, mc


def _theirs(model, ids, mc, **kw):
    with torch.no_grad():
        return model(input_ids=torch.from_numpy(ids.astype(np.int64)),
                     mc_token_ids=torch.from_numpy(mc.astype(np.int64)), **kw)  # fmt: skip


def test_double_heads_logits_and_losses(double):
    model, imp = double
    assert imp.arch == "openai_gpt_double" and imp.unused == []
    assert imp.config.norm_position == "post" and imp.config.causal
    ids, mc = _inputs()
    lm, choice = imp.model.apply({"params": imp.params}, jnp.asarray(ids), jnp.asarray(mc))
    labels = np.array([2, 0])
    weights = np.ones((B, C, T), np.float32)
    weights[:, :, 7:] = 0  # the last tokens are not predicted
    lm_labels = np.where(weights > 0, ids, -100)
    out = _theirs(model, ids, mc, labels=torch.from_numpy(lm_labels.astype(np.int64)),
                  mc_labels=torch.from_numpy(labels))  # fmt: skip
    hf.assert_close(lm, out.logits.numpy())
    hf.assert_close(choice, out.mc_logits.numpy())
    loss, parts = gpt1.finetune_loss(lm, choice, jnp.asarray(ids), jnp.asarray(weights),
                                     jnp.asarray(labels))  # fmt: skip
    np.testing.assert_allclose(parts["lm"], out.loss.numpy(), rtol=1e-5)
    np.testing.assert_allclose(parts["clf"], out.mc_loss.numpy(), rtol=1e-5)
    np.testing.assert_allclose(loss, out.mc_loss.numpy() + 0.5 * out.loss.numpy(), rtol=1e-5)


def test_double_heads_export_loads_in_transformers(double, tmp_path):
    _, imp = double
    rng = np.random.default_rng(3)
    flat = traverse_util.flatten_dict(imp.params)
    params = traverse_util.unflatten_dict(
        {k: (v + 0.05 * rng.standard_normal(v.shape)).astype(np.float32) for k, v in flat.items()}
    )
    convert.save(tmp_path, imp.arch, imp.config, params)
    assert convert.load(tmp_path).config == imp.config
    theirs = hf.transformers.OpenAIGPTDoubleHeadsModel.from_pretrained(str(tmp_path)).eval()
    ids, mc = _inputs()
    lm, choice = imp.model.apply({"params": params}, jnp.asarray(ids), jnp.asarray(mc))
    out = _theirs(theirs, ids, mc)
    hf.assert_close(lm, out.logits.numpy())
    hf.assert_close(choice, out.mc_logits.numpy())


def test_lm_head_model_imports_as_transformer_lm(double, tmp_path):
    model, _ = double
    lm_model = hf.transformers.OpenAIGPTLMHeadModel(_config())
    lm_model.load_state_dict(model.state_dict(), strict=False)
    imp = convert.load(hf.save(lm_model.eval(), tmp_path))
    assert imp.arch == "openai_gpt"
    ids = hf.ids((B, T), low=0)
    ours = imp.model.apply({"params": imp.params}, jnp.asarray(ids))
    hf.assert_close(ours, hf.logits(lm_model, ids))


def test_choice_inputs_padding_does_not_change_the_choice_logits(double):
    _, imp = double
    start, delim, extract, pad = 95, 94, 93, 0
    toks, idx, mask = gpt1.choice_inputs([5, 6, 7], [[8], [9, 10, 11]], start=start,
                                         delim=delim, extract=extract, pad=pad)  # fmt: skip
    assert toks.shape == (2, 9) and list(idx) == [6, 8] and toks[0, 6] == extract
    _, both = imp.model.apply({"params": imp.params}, jnp.asarray(toks[None]),
                              jnp.asarray(idx[None]))  # fmt: skip
    n = int(mask[0].sum())  # the short choice alone, unpadded: the same logit (causal)
    _, alone = imp.model.apply({"params": imp.params}, jnp.asarray(toks[None, :1, :n]),
                               jnp.asarray(idx[None, :1]))  # fmt: skip
    np.testing.assert_allclose(both[0, 0], alone[0, 0], rtol=1e-5, atol=1e-6)
