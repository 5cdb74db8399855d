"""A Hugging Face folder's tokenizer (``tokenizer.json`` or a SentencePiece model) gives the
ids its own library gives, and its special ids."""

from __future__ import annotations

import json

import pytest

from seqjax import convert

TEXT = ["the quick brown fox jumps over the lazy dog", "a warm start from a checkpoint"] * 20


def test_tokenizer_json(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    trainer = tokenizers.trainers.WordPieceTrainer(
        vocab_size=60, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    )
    tok.train_from_iterator(TEXT, trainer)
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"mask_token": "[MASK]"}))
    ours = convert.tokenizer(tmp_path)
    text = "the lazy fox starts warm"
    assert ours.encode(text) == tok.encode(text).ids
    assert ours.vocab_size == tok.get_vocab_size()
    assert (ours.pad_id, ours.mask_id) == (0, 4)


def test_sentencepiece_model(tmp_path):
    spm = pytest.importorskip("sentencepiece")
    (tmp_path / "text.txt").write_text("\n".join(TEXT))
    spm.SentencePieceTrainer.train(
        input=str(tmp_path / "text.txt"), model_prefix=str(tmp_path / "spiece"),
        vocab_size=30, pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
    )  # fmt: skip
    ours = convert.tokenizer(tmp_path)
    ref = spm.SentencePieceProcessor(model_file=str(tmp_path / "spiece.model"))
    text = "the quick dog starts"
    assert ours.encode(text) == ref.encode(text) and ours.vocab_size == 30
    assert ours.pad_id == 0 and ours.mask_id is None
    assert ours.decode(ours.encode(text)) == ref.decode(ref.encode(text))


def test_no_tokenizer(tmp_path):
    with pytest.raises(ValueError, match="has no tokenizer.json or SentencePiece model"):
        convert.tokenizer(tmp_path)
