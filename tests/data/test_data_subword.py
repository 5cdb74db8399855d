"""SentencePiece vocabularies: determinism, exact round trip, storage, LM batches of subwords."""

from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pytest

import seqjax.data as sd
from seqjax.data import api, subword
from seqjax.data.sources import DataError


@pytest.fixture(scope="module")
def l10n_strings(shared_data) -> list[str]:
    """English and German strings of the first 3,000 real software_l10n en-de pairs."""
    out = []
    with gzip.open(shared_data / "software_l10n" / "en-de.jsonl.gz", "rt", encoding="utf-8") as f:
        for _, line in zip(range(3000), f):
            obj = json.loads(line)
            out += [obj["en"], obj["de"]]
    return out


@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_training_is_deterministic_and_round_trips(l10n_strings, model_type):
    opts = subword.SpmOptions(model_type=model_type, vocab_size=600)
    train = l10n_strings[:2000]  # the rest are strings the model never saw
    a, b = subword.train(train, opts), subword.train(train, opts)
    assert a == b  # identical model bytes, hence identical ids
    other = subword.train(train, subword.SpmOptions(model_type=model_type, vocab_size=700))
    assert other != a
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=a)
    assert sp.vocab_size() == 600
    assert [sp.id_to_piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    # Real strings (format specifiers, newlines, double spaces, umlauts) and unseen characters
    # (byte fallback) come back exactly: no NFKC, no dummy prefix, whitespace kept.
    tricky = ["  two  spaces\tand tab\n", "Größe: %s\n\n", "ﬁ ligature ①², 漢字 🙂", "_Datei"]
    for s in l10n_strings + tricky:
        ids = sp.encode(s)
        assert sp.decode(ids) == s
        assert 1 not in ids  # never <unk>
    assert sp.encode("\n", out_type=str) == ["\n"]


def test_sample_is_seeded_and_keeps_order():
    sentences = [f"s{i}" for i in range(100)]
    a = subword.sample(sentences, 10, seed=0)
    assert a == subword.sample(sentences, 10, seed=0) and len(a) == 10
    assert a == sorted(a, key=lambda s: int(s[1:]))  # original order
    assert a != subword.sample(sentences, 10, seed=1)
    assert subword.sample(sentences, 100, seed=0) == sentences


def test_vocab_size_the_text_cannot_fill_is_one_clear_error():
    with pytest.raises(DataError, match=r"config\.data\.vocab_size=5000"):
        subword.train(["abc abd", "abe"] * 10, subword.SpmOptions(vocab_size=5000))


@pytest.fixture(scope="module")
def lm_file(tmp_path_factory, l10n_strings) -> str:
    path = tmp_path_factory.mktemp("spm_lm") / "l10n.txt"
    path.write_text("\n".join(l10n_strings[:2000]) + "\n", encoding="utf-8")
    return str(path)


def test_lm_with_sentencepiece_trains_a_vocabulary_and_yields_token_batches(make_cfg, lm_file):
    cfg = make_cfg(name="text_file", path=lm_file, vocab="sentencepiece", vocab_size=500)
    info = sd.info(cfg)
    assert info.task == "lm" and info.vocab_size == 500
    assert (info.pad_id, info.bos_id, info.eos_id) == (None, 2, 3)
    # Stored beside the prepared TFDS files, keyed by the data fingerprint and the options.
    assert info.vocab_file.startswith(cfg.data_dir) and os.path.isfile(info.vocab_file)
    assert info.fingerprint[:16] in os.path.basename(info.vocab_file)
    assert "bpe500" in os.path.basename(info.vocab_file)
    text = open(lm_file, encoding="utf-8").read()
    assert sum(info.split_sizes.values()) < 0.8 * len(text.encode())  # tokens, not bytes
    it = sd.make(cfg, split="train")
    batch = next(it)
    assert batch["inputs"].shape == (8, 64) and batch["inputs"].dtype == np.int32
    assert 0 < batch["inputs"].min() and batch["inputs"].max() < 500
    np.testing.assert_array_equal(batch["inputs"][:, 1:], batch["targets"][:, :-1])
    for row in batch["inputs"]:
        assert info.decode(row) in text  # windows of the corpus, decoded exactly
    # Exact resume of the subword LM iterator.
    state = it.get_state()
    want = [next(it) for _ in range(2)]
    it2 = sd.make(cfg, split="train")
    it2.set_state(state)
    for a, b in zip(want, [next(it2) for _ in range(2)]):
        np.testing.assert_array_equal(a["inputs"], b["inputs"])
    # Another vocabulary option is another model file; the same options reuse the stored one.
    info_u = sd.info(make_cfg(**{**cfg.to_dict(), "spm_model_type": "unigram"}))
    assert info_u.vocab_file != info.vocab_file
    assert info_u.vocab_fingerprint != info.vocab_fingerprint
    mtime = os.path.getmtime(info.vocab_file)
    assert sd.info(cfg).vocab_fingerprint == info.vocab_fingerprint
    assert sd.info(make_cfg(**{**cfg.to_dict(), "seed": 7})).vocab_file == info.vocab_file
    assert os.path.getmtime(info.vocab_file) == mtime


def test_a_fresh_preparation_trains_the_same_model(make_cfg, lm_file, tmp_path):
    cfg = make_cfg(name="text_file", path=lm_file, vocab="sentencepiece", vocab_size=400)
    fresh = make_cfg(**{**cfg.to_dict(), "data_dir": str(tmp_path / "elsewhere")})
    a, b = sd.info(cfg), sd.info(fresh)
    assert a.vocab_file != b.vocab_file and a.vocab_fingerprint == b.vocab_fingerprint
    np.testing.assert_array_equal(
        next(sd.make(cfg, split="train"))["inputs"], next(sd.make(fresh, split="train"))["inputs"]
    )


def test_sentencepiece_config_problems():
    cfg = sd.default_config()
    cfg.vocab = "sentencepiece"
    cfg.spm_model_type = "wordpiece"
    cfg.vocab_size = 100
    problems = {field: valid for field, _, valid in api.config_problems(cfg)}
    assert problems["spm_model_type"] == "'bpe' or 'unigram'"
    assert "262" in problems["vocab_size"]
    cfg.vocab = "wordpiece"
    assert "'sentencepiece'" in dict((f, v) for f, _, v in api.config_problems(cfg))["vocab"]
