"""Correctness at the edges of import, each against ``transformers``: an input longer than the
imported position table is one sentence (an imported RoBERTa reports its usable length,
40 of its 42 rows: 2 sit before position 0); padded BERT / RoBERTa batches, right or left,
give ``transformers``' logits without the caller passing positions (RoBERTa's count the
real tokens from the pad id); a SentencePiece-only T5 folder appends ``</s>`` as
``T5Tokenizer`` does."""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest

from seqjax import convert
from tests.convert import _hf_models as hf

B, T = 3, 12


@pytest.fixture(scope="module")
def roberta(tmp_path_factory):
    model = hf.bert(roberta=True)
    return model, convert.load(hf.save(model, tmp_path_factory.mktemp("roberta")))


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    model = hf.bert()
    return model, convert.load(hf.save(model, tmp_path_factory.mktemp("bert")))


def test_longer_than_the_position_table_is_one_sentence(roberta):
    model, imp = roberta
    assert (imp.max_len, imp.config.max_len) == (hf.POSITIONS, hf.POSITIONS + 2)
    ids = hf.ids((1, hf.POSITIONS))
    hf.assert_close(
        imp.model.apply({"params": imp.params}, jnp.asarray(ids)), hf.logits(model, ids)
    )
    too_long = hf.ids((1, hf.POSITIONS + 1))
    with pytest.raises(ValueError, match=r"has 41 positions but .* holds 40 \(model\.max_len=42"):
        imp.model.apply({"params": imp.params}, jnp.asarray(too_long))
    with pytest.raises((IndexError, RuntimeError)):  # transformers refuses it too
        hf.logits(model, too_long)


def _padded(pad: int, left: bool) -> tuple[np.ndarray, np.ndarray]:
    """``[B, T]`` ids with rows of 12, 9 and 5 real tokens, padded on one side."""
    ids = hf.ids((B, T))
    real = np.arange(T)[None, :] < np.array([[T], [9], [5]])
    real = real[:, ::-1] if left else real
    return np.where(real, ids, pad).astype(np.int32), real


@pytest.mark.parametrize("left", [False, True], ids=["right", "left"])
@pytest.mark.parametrize("which", ["bert", "roberta"])
def test_padded_batches_give_transformers_logits(request, which, left):
    import torch

    model, imp = request.getfixturevalue(which)
    ids, real = _padded(imp.config.pad_id, left)
    with torch.no_grad():
        theirs = model(
            input_ids=torch.from_numpy(ids.astype(np.int64)),
            attention_mask=torch.from_numpy(real.astype(np.int64)),
        ).logits.numpy()
    ours = imp.model.apply({"params": imp.params}, jnp.asarray(ids), mask_BT=jnp.asarray(real))
    hf.assert_close(ours, theirs)  # pads included: their positions are transformers' too


def test_sentencepiece_only_t5_folder_appends_eos(tmp_path):
    spm = pytest.importorskip("sentencepiece")
    text = ["the quick brown fox jumps over the lazy dog", "a warm start from a checkpoint"]
    (tmp_path / "text.txt").write_text("\n".join(text * 20))
    spm.SentencePieceTrainer.train(
        input=str(tmp_path / "text.txt"), model_prefix=str(tmp_path / "spiece"),
        vocab_size=30, pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
    )  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["T5WithLMHeadModel"]}))
    theirs = hf.transformers.T5Tokenizer.from_pretrained(str(tmp_path), extra_ids=0)
    ours = convert.tokenizer(tmp_path)
    for line in ("the quick dog starts", "a lazy checkpoint"):
        assert ours.encode(line) == theirs(line).input_ids
        assert ours.encode(line)[-1] == 1  # </s>
