"""GPT-1 fine-tuning (``seqjax.tasks.gpt1_finetune``): the task's loss equals Hugging Face's
``OpenAIGPTForSequenceClassification`` loss (the last-token classifier) + 0.5 x
``OpenAIGPTLMHeadModel``'s LM loss on the same transformed rows and weights (random-init,
saved with ``save_pretrained``, the decoder imported by ``seqjax.convert``), for
classification and entailment; and the input transforms lay out start/delim/extract."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from seqjax import convert, tasks
from seqjax.models.gpt1 import CausalClassifier
from seqjax.tasks import gpt1_finetune
from tests.convert import _hf_models as hf

B, L, K = 3, 5, 3
torch = hf.torch


def _t(x):
    return torch.from_numpy(np.asarray(x).astype(np.int64))


def test_transforms_lay_out_start_delim_extract():
    a = jnp.asarray([[5, 6, 0], [7, 0, 0]], jnp.int32)
    b = jnp.asarray([[8, 0, 0], [9, 10, 11]], jnp.int32)
    one, last1 = jax.device_get(gpt1_finetune.transform(a, vocab_size=20))
    assert one.tolist() == [[20, 5, 6, 22, 0], [20, 7, 22, 0, 0]] and last1.tolist() == [3, 2]
    two, last2 = jax.device_get(gpt1_finetune.transform(a, b, vocab_size=20))
    assert two.tolist() == [[20, 5, 6, 21, 8, 22, 0, 0, 0], [20, 7, 21, 9, 10, 11, 22, 0, 0]]
    assert last2.tolist() == [5, 6]


@pytest.mark.parametrize(
    "pairs",
    [pytest.param(False, marks=pytest.mark.slow), True],  # the transforms test covers both
    ids=["classification", "entailment"],
)
def test_task_loss_equals_hf_classifier_plus_half_lm_loss(pairs, tmp_path):
    cfg_hf = hf.transformers.OpenAIGPTConfig(
        vocab_size=hf.V, n_embd=hf.E, n_layer=2, n_head=hf.HEADS, n_positions=hf.POSITIONS,
        num_labels=K, pad_token_id=0,
    )  # fmt: skip
    lm = hf._seeded(lambda: hf.transformers.OpenAIGPTLMHeadModel(cfg_hf))
    clf = hf._seeded(lambda: hf.transformers.OpenAIGPTForSequenceClassification(cfg_hf))
    clf.transformer.load_state_dict(lm.transformer.state_dict())
    imp = convert.load(hf.save(lm, tmp_path))
    cfg = dataclasses.replace(imp.config, num_classes=K)
    params = {"encoder": imp.params["encoder"],
              "score": {"kernel": jnp.asarray(clf.score.weight.detach().numpy().T)}}  # fmt: skip
    rng = np.random.default_rng(0)
    a = rng.integers(1, hf.V - 3, (B, L)).astype(np.int32)
    a[0, 3:] = 0
    batch = {"inputs": jnp.asarray(a), "targets": jnp.asarray([0, 2, 1], jnp.int32),
             "weights": jnp.ones((B,), jnp.float32)}  # fmt: skip
    b = None
    if pairs:
        b = rng.integers(1, hf.V - 3, (B, L)).astype(np.int32)
        b[2, 1:] = 0
        batch["inputs2"] = jnp.asarray(b)
    data_name = "l10n_pairs" if pairs else "imdb_bytes"
    config = ml_collections.ConfigDict({"data": {"name": data_name}, "gpt1": {"lm_weight": 0.5}})
    task = tasks.get("gpt1_finetune").configure(config)
    assert task.pairs == pairs
    outputs, _ = task.apply(CausalClassifier(cfg), params, batch, rng=None, train=False)
    sums = task.sums(outputs, batch)
    ours = float(sums["loss_sum"] / sums["weight_sum"])

    ids, _ = gpt1_finetune.transform(jnp.asarray(a), None if b is None else jnp.asarray(b),
                                     vocab_size=hf.V - 3)  # fmt: skip
    ids = np.asarray(ids)
    mask = ids != 0
    labels = np.where(mask, ids, -100)  # HF's LM labels: -100 on padding
    with torch.no_grad():
        clf_loss = clf(input_ids=_t(ids), attention_mask=_t(mask), labels=_t(batch["targets"]))
        lm_loss = lm(input_ids=_t(ids), attention_mask=_t(mask), labels=_t(labels))
    want = clf_loss.loss.item() + 0.5 * lm_loss.loss.item()
    np.testing.assert_allclose(ours, want, rtol=1e-5)
    np.testing.assert_allclose(float(sums["lm_sum"] / B), lm_loss.loss.item(), rtol=1e-5)
