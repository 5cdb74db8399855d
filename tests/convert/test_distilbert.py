"""DistilBERT equals Hugging Face's ``DistilBertForMaskedLM`` (import and export logits), and
a student made from a BERT teacher's alternate layers is a DistilBERT ``transformers`` loads
with the student's logits; with every layer kept it equals the teacher."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

from seqjax import convert
from seqjax.tasks import distillation
from tests.convert import _hf_models as hf

B, T = 2, 10
torch = hf.torch


@pytest.fixture(scope="module")
def distil(tmp_path_factory):
    cfg = hf.transformers.DistilBertConfig(
        vocab_size=hf.V, dim=hf.E, n_layers=2, n_heads=hf.HEADS, hidden_dim=hf.FF,
        max_position_embeddings=hf.POSITIONS,
    )  # fmt: skip
    model = hf._seeded(lambda: hf.transformers.DistilBertForMaskedLM(cfg))
    return model, convert.load(hf.save(model, tmp_path_factory.mktemp("distil")))


def _logits(imp_model, params, ids):
    return np.asarray(imp_model.apply({"params": params}, jnp.asarray(ids)))


def test_distilbert_logits_equal_transformers(distil):
    model, imp = distil
    assert imp.arch == "distilbert" and imp.unused == [] and imp.config.type_vocab_size == 0
    ids = hf.ids((B, T))
    hf.assert_close(_logits(imp.model, imp.params, ids), hf.logits(model, ids))


def test_distilbert_export_loads_in_transformers(distil, tmp_path):
    _, imp = distil
    rng = np.random.default_rng(3)
    flat = traverse_util.flatten_dict(imp.params)
    params = traverse_util.unflatten_dict(
        {k: (v + 0.05 * rng.standard_normal(v.shape)).astype(np.float32) for k, v in flat.items()}
    )
    convert.save(tmp_path, "distilbert", imp.config, params)
    assert convert.load(tmp_path).config == imp.config
    theirs = hf.transformers.DistilBertForMaskedLM.from_pretrained(str(tmp_path)).eval()
    ids = hf.ids((B, T))
    hf.assert_close(_logits(imp.model, params, ids), hf.logits(theirs, ids))


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    cfg = hf.transformers.BertConfig(
        vocab_size=hf.V, hidden_size=hf.E, num_hidden_layers=4, num_attention_heads=hf.HEADS,
        intermediate_size=hf.FF, max_position_embeddings=hf.POSITIONS,
    )  # fmt: skip
    model = hf._seeded(lambda: hf.transformers.BertForMaskedLM(cfg))
    return convert.load(hf.save(model, tmp_path_factory.mktemp("teacher")))


def test_student_with_every_layer_equals_the_teacher(teacher):
    cfg, params = distillation.student_from_teacher(
        teacher.config, teacher.params, range(4), fold_token_type=True
    )
    assert cfg.type_vocab_size == 0 and "type_embed" not in params["encoder"]
    student = convert.make_model("distilbert", cfg)
    ids = hf.ids((B, T))  # segment 0, as DistilBERT's inputs
    hf.assert_close(_logits(student, params, ids), _logits(teacher.model, teacher.params, ids))


def test_alternate_layer_student_is_a_distilbert(teacher, tmp_path):
    cfg, params = distillation.student_from_teacher(
        teacher.config, teacher.params, fold_token_type=True
    )
    assert cfg.num_layers == 2
    for j, i in enumerate(distillation.alternate_layers(4)):  # blocks 0, 2 -> 0, 1
        a = traverse_util.flatten_dict(params["encoder"][f"block_{j}"])
        b = traverse_util.flatten_dict(teacher.params["encoder"][f"block_{i}"])
        assert all(np.array_equal(a[k], b[k]) for k in b)
    convert.save(tmp_path, "distilbert", cfg, params)
    theirs = hf.transformers.DistilBertForMaskedLM.from_pretrained(str(tmp_path)).eval()
    ids = hf.ids((B, T))
    student = convert.make_model("distilbert", cfg)
    hf.assert_close(_logits(student, params, ids), hf.logits(theirs, ids))
    with pytest.raises(ValueError, match="layers=.*must name teacher layers"):
        distillation.student_from_teacher(teacher.config, teacher.params, (0, 4))
