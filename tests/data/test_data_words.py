"""Word-level vocabulary (``config.data.vocab = "words"``) and the WikiText builders."""

from __future__ import annotations

import os
import zipfile

import numpy as np
import pytest

import seqjax.data as sd
from seqjax.data import words
from seqjax.data.sources import DataError

TRAIN = " = Valkyria = \n\n the game was the first <unk> game . \n the game sold well . \n"
VALID = " the first game was new . \n"
TEST = " the end . \n"


def test_build_counts_the_training_words_and_adds_eos_per_line():
    vocab = words.build(TRAIN)
    assert vocab[:2] == ["<eos>", "<unk>"]
    assert vocab[2:4] == ["the", "game"]  # by decreasing count (3, 3), ties first-seen first
    v = words.WordVocab(vocab)
    ids = v.ids_from_bytes(np.frombuffer(TRAIN.encode(), np.uint8))
    stream = list(words.line_words(TRAIN))
    assert stream.count("<eos>") == 4  # one per line, the empty line included
    assert [vocab[i] for i in ids] == stream
    assert v.decode(v.ids(words.line_words(VALID))) == "the first game was <unk> .\n"
    assert list(v.encode("the game")) == [2, 3]
    assert words.build(TRAIN, words.WordOptions(min_count=2)) == [
        "<eos>", "<unk>", "the", "game", "=", ".",
    ]  # fmt: skip
    assert len(words.build(TRAIN, words.WordOptions(max_size=4))) == 4


def _wikitext_zip(folder, name="wikitext-2-v1.zip", inner="wikitext-2"):
    path = os.path.join(folder, name)
    with zipfile.ZipFile(path, "w") as zf:
        for member, text in (("train", TRAIN * 30), ("valid", VALID * 5), ("test", TEST * 5)):
            zf.writestr(f"{inner}/wiki.{member}.tokens", text)
    return path


def test_wikitext_builder_reads_its_own_splits_with_the_word_vocab(make_cfg, tmp_path):
    _wikitext_zip(str(tmp_path))
    cfg = make_cfg(
        name="wikitext2", manual_dir=str(tmp_path), vocab="words", seq_len=8, batch_size=2
    )
    info = sd.info(cfg)
    assert info.task == "lm"
    assert info.split_sizes["validation"] == 5 * 7 and info.split_sizes["test"] == 5 * 4
    stored = [
        f for f in os.listdir(os.path.join(cfg.data_dir, "seqjax_wikitext2")) if f.endswith(".json")
    ]
    assert stored and stored[0].startswith("words_min1_max0_")  # stored with the data
    assert info.vocab_size == len(words.build(TRAIN))
    batch = next(sd.make(cfg, split="validation", train=False))
    text = info.decode(batch["inputs"][0])
    assert text.split()[:3] == ["the", "first", "game"] and "<unk>" in text  # 'new' unseen
    np.testing.assert_array_equal(batch["inputs"][:, 1:], batch["targets"][:, :-1])


def test_word_vocab_on_a_corpus_without_text_is_one_clear_error(make_cfg):
    with pytest.raises(DataError, match=r"config\.data\.vocab='words'.*duplication"):
        sd.info(make_cfg(name="duplication", vocab="words"))
    with pytest.raises(DataError, match=r"config\.data\.words_min_count=0"):
        sd.info(make_cfg(name="text_file", path="x", vocab="words", words_min_count=0))


def test_missing_wikitext_names_the_file_and_the_url(make_cfg, tmp_path):
    cfg = make_cfg(name="wikitext103", manual_dir=str(tmp_path), vocab="words")
    with pytest.raises(Exception, match="wikitext-103-v1.zip"):
        sd.info(cfg)


def test_tinyshakespeare_words(make_cfg, shared_data):
    path = str(shared_data / "tinyshakespeare" / "input.txt")
    cfg = make_cfg(name="text_file", path=path, vocab="words", words_min_count=3, seq_len=32)
    info = sd.info(cfg)
    assert 3000 < info.vocab_size < 10000  # a real word vocabulary, rare words -> <unk>
    batch = next(sd.make(cfg, split="train"))
    assert batch["inputs"].max() < info.vocab_size
