"""The fine-tuning tasks' losses equal Hugging Face's heads on the same batch and weights
(random-init ``transformers`` models saved with ``save_pretrained``, imported by
``seqjax.convert``): ``qa`` = ``BertForQuestionAnswering(start_positions, end_positions)``,
``tagging`` = ``BertForTokenClassification(labels, -100 where the weight is 0)``, the
cross-encoder = ``BertForSequenceClassification(token_type_ids, labels)``. Plus the data
rules (span QA's answer is the span's first occurrence; word tags) and ``join_pair``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax import convert, tasks
from seqjax.data import finetune_data
from seqjax.models.token_heads import CrossEncoder, TokenHeadEncoder
from seqjax.tasks import pair_classification as cross_encoder
from tests.convert import _hf_models as hf

B, T = 3, 12
torch = hf.torch


def _config(**extra):
    return hf.transformers.BertConfig(
        vocab_size=hf.V, hidden_size=hf.E, num_hidden_layers=2, num_attention_heads=hf.HEADS,
        intermediate_size=hf.FF, max_position_embeddings=hf.POSITIONS, **extra,
    )  # fmt: skip


def _t(x):
    return torch.from_numpy(np.asarray(x).astype(np.int64))


def _ids_and_types():
    ids = hf.ids((B, T))
    ids[0, -3:] = 0  # padding (pad id 0), hidden as keys on both sides
    types = np.zeros((B, T), np.int32)
    types[:, 5:] = 1
    return ids, types


def _task_loss(task, model, params, batch):
    sums = task.sums(task.apply(model, params, batch, rng=None, train=False)[0], batch)
    return float(sums["loss_sum"] / sums["weight_sum"])


def test_qa_task_loss_equals_bert_for_question_answering(tmp_path):
    theirs = hf._seeded(lambda: hf.transformers.BertForQuestionAnswering(_config()))
    imp = convert.load(hf.save(theirs, tmp_path))
    ids, types = _ids_and_types()
    start, end = np.array([5, 6, 9], np.int32), np.array([7, 6, 11], np.int32)
    batch = {"inputs": jnp.asarray(ids), "token_types": jnp.asarray(types),
             "start": jnp.asarray(start), "end": jnp.asarray(end),
             "weights": jnp.ones((B,), jnp.float32)}  # fmt: skip
    ours = _task_loss(tasks.get("qa"), TokenHeadEncoder(imp.config), imp.params, batch)
    with torch.no_grad():
        out = theirs(input_ids=_t(ids), token_type_ids=_t(types), attention_mask=_t(ids != 0),
                     start_positions=_t(start), end_positions=_t(end))  # fmt: skip
    np.testing.assert_allclose(ours, out.loss.item(), rtol=1e-5)


def test_tagging_task_loss_equals_bert_for_token_classification(tmp_path):
    theirs = hf._seeded(lambda: hf.transformers.BertForTokenClassification(_config(num_labels=6)))
    imp = convert.load(hf.save(theirs, tmp_path))
    ids, _ = _ids_and_types()
    rng = np.random.default_rng(1)
    tags = rng.integers(0, 6, (B, T)).astype(np.int32)
    weights = (rng.random((B, T)) < 0.5).astype(np.float32) * (ids != 0)
    weights[:, 0] = 1.0
    batch = {"inputs": jnp.asarray(ids), "targets": jnp.asarray(tags),
             "weights": jnp.asarray(weights)}  # fmt: skip
    ours = _task_loss(tasks.get("tagging"), TokenHeadEncoder(imp.config), imp.params, batch)
    labels = np.where(weights > 0, tags, -100)
    with torch.no_grad():
        out = theirs(input_ids=_t(ids), attention_mask=_t(ids != 0), labels=_t(labels))
    np.testing.assert_allclose(ours, out.loss.item(), rtol=1e-5)


def test_cross_encoder_loss_equals_bert_for_sequence_classification(tmp_path):
    """The classifier's weights go through seqjax's ``BertForPreTraining`` import (the
    pooler and ``cls.seq_relationship`` are ``pair_head``'s pooler and classifier)."""
    seq = hf._seeded(lambda: hf.transformers.BertForSequenceClassification(_config()))
    pre = hf.transformers.BertForPreTraining(_config())
    state = {k: v for k, v in pre.state_dict().items() if not k.startswith("bert.")}
    state.update({k: v for k, v in seq.state_dict().items() if k.startswith("bert.")})
    state["cls.seq_relationship.weight"] = seq.classifier.weight.detach()
    state["cls.seq_relationship.bias"] = seq.classifier.bias.detach()
    pre.load_state_dict(state)
    imp = convert.load(hf.save(pre, tmp_path))
    params = {"encoder": imp.params["encoder"], "pair_head": imp.params["pair_head"]}
    cfg = __import__("dataclasses").replace(imp.config, num_classes=2, pair_head=False)
    length = 5  # the two texts, right-padded with 0; [CLS], [SEP] = V - 2, V - 1
    rng = np.random.default_rng(2)
    a = rng.integers(1, hf.V - 2, (B, length)).astype(np.int32)
    b = rng.integers(1, hf.V - 2, (B, length)).astype(np.int32)
    a[0, 3:], b[1, 2:] = 0, 0
    labels = np.array([0, 1, 1], np.int32)
    batch = {"inputs": jnp.asarray(a), "inputs2": jnp.asarray(b), "targets": jnp.asarray(labels),
             "weights": jnp.ones((B,), jnp.float32)}  # fmt: skip
    ours = _task_loss(cross_encoder.CROSS, CrossEncoder(cfg), params, batch)
    ids, types = cross_encoder.join_pair(jnp.asarray(a), jnp.asarray(b), cls=hf.V - 2,
                                         sep=hf.V - 1)  # fmt: skip
    with torch.no_grad():
        out = seq(input_ids=_t(ids), token_type_ids=_t(types), attention_mask=_t(ids != 0),
                  labels=_t(labels))  # fmt: skip
    np.testing.assert_allclose(ours, out.loss.item(), rtol=1e-5)


def test_join_pair_lays_out_cls_a_sep_b_sep():
    a = jnp.asarray([[5, 6, 0], [7, 0, 0]], jnp.int32)
    b = jnp.asarray([[8, 0, 0], [9, 10, 11]], jnp.int32)
    ids, types = jax.device_get(cross_encoder.join_pair(a, b, cls=1, sep=2))
    assert ids.tolist() == [[1, 5, 6, 2, 8, 2, 0, 0, 0], [1, 7, 2, 9, 10, 11, 2, 0, 0]]
    assert types.tolist() == [[0, 0, 0, 0, 1, 1, 0, 0, 0], [0, 0, 0, 1, 1, 1, 1, 0, 0]]


def test_span_qa_answer_is_the_first_occurrence_of_the_question():
    window = np.array([3, 4, 5, 3, 4, 9, 3, 4], np.int64)
    for seed in range(20):
        ex = finetune_data.qa_example(window, np.random.default_rng(seed), max_answer=3,
                                      vocab_size=10)  # fmt: skip
        q = ex["inputs"][1:4]
        q = q[q != 12]
        s, e = ex["start"], ex["end"]
        assert np.array_equal(ex["inputs"][s : e + 1], q)  # the answer is the question's text
        ctx = 1 + 3 + 1
        first = min(i for i in range(8) if np.array_equal(window[i : i + len(q)], q))
        assert (
            s == ctx + first and ex["token_types"][ctx:].all() and not ex["token_types"][:ctx].any()
        )


@pytest.mark.parametrize(
    "text, tagged",
    [(" The cat sleeps soundly.", {1: 3, 5: 0, 9: 1, 16: 2}),
     ("ab Cdefghij k", {3: 5, 12: None}),  # 'ab' cut by the left edge, 'k' by the right
     ],
)  # fmt: skip
def test_word_tags_tag_first_letters_by_case_and_length(text, tagged):
    tags, weights = finetune_data.word_tags(list(text))
    want = {i: t for i, t in tagged.items() if t is not None}
    assert {int(i) for i in np.flatnonzero(weights)} == set(want)
    assert all(tags[i] == t for i, t in want.items())
