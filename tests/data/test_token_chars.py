"""Each token's characters (``config.data.token_chars``) against a port of AllenNLP's
``ELMoCharacterMapper.convert_word_to_char_ids``, in the batches of a word-level corpus, and
the ``bilm`` objective's batches (the LM's, last target weight 0).

Legend: B batch, T tokens, L characters per token.
"""

from __future__ import annotations

import os
import zipfile

import numpy as np
import pytest

import seqjax.data as sd
from seqjax.data import token_chars as tc
from seqjax.data.sources import DataError

TRAIN = " the game was the first café game . \n the game sold well . \n"


def _allennlp_word_ids(word: str, max_word_length: int = 50) -> list[int]:
    """AllenNLP's ``ELMoCharacterMapper.convert_word_to_char_ids`` (ported: no BOS/EOS)."""
    bow, eow, pad = 258, 259, 260
    char_ids = [pad] * max_word_length
    char_ids[0] = bow
    word_encoded = word.encode("utf-8", "ignore")[: (max_word_length - 2)]
    for k, chr_id in enumerate(word_encoded, start=1):
        char_ids[k] = chr_id
    char_ids[len(word_encoded) + 1] = eow
    return [c + 1 for c in char_ids]


def test_word_ids_equal_allennlp_mapper():
    for word in ("the", "café", "x" * 70, "."):
        assert tc.word_char_ids(word).tolist() == _allennlp_word_ids(word)
    assert tc.word_char_ids("hello", 6).tolist() == _allennlp_word_ids("hello", 6)
    # AllenNLP's sentence markers: [BOW, 256/257, EOW, pad...] + 1
    assert tc.marker_char_ids("bos")[:4].tolist() == [259, 257, 260, 261]
    assert tc.marker_char_ids("eos")[:4].tolist() == [259, 258, 260, 261]
    assert tc.word_char_ids("the").max() < tc.NUM_CHARS


def _corpus(tmp_path):
    path = os.path.join(str(tmp_path), "wikitext-2-v1.zip")
    with zipfile.ZipFile(path, "w") as zf:
        for member, text in (("train", TRAIN * 20), ("valid", TRAIN * 3), ("test", TRAIN * 3)):
            zf.writestr(f"wikitext-2/wiki.{member}.tokens", text)
    return str(tmp_path)


def test_batches_carry_each_words_characters_and_bilm_weights(make_cfg, tmp_path):
    cfg = make_cfg(name="wikitext2", manual_dir=_corpus(tmp_path), vocab="words", seq_len=8,
                   batch_size=2, token_chars=12)  # fmt: skip
    info = sd.info(cfg)
    batch = next(sd.make(cfg, split="train"))
    chars_BTL = batch[tc.FIELD]
    assert chars_BTL.dtype == np.int32 and chars_BTL.shape == (2, 8, 12)
    for b, t in np.ndindex(2, 8):
        word = info.decode(batch["inputs"][b, t : t + 1]).strip() or "\n"
        assert chars_BTL[b, t].tolist() == _allennlp_word_ids(word, 12), word
    cfg.objective = "bilm"
    assert sd.info(cfg).task == "bilm"
    it = sd.make(cfg, split="validation", train=False)
    batch = next(it)
    assert set(batch) == {"inputs", "targets", "weights", tc.FIELD}
    assert (batch["weights"][:, -1] == 0).all() and (batch["weights"][:, :-1] == 1).all()
    np.testing.assert_array_equal(batch["targets"][:, :-1], batch["inputs"][:, 1:])
    state = it.get_state()
    again = sd.make(cfg, split="validation", train=False)
    again.set_state(state)
    np.testing.assert_array_equal(next(again)[tc.FIELD], next(it)[tc.FIELD])  # resumable


def test_bad_token_chars_is_one_clear_error(make_cfg):
    with pytest.raises(DataError, match="token_chars=2 is invalid"):
        sd.info(make_cfg(name="pystdlib", token_chars=2))
    with pytest.raises(DataError, match="objective='bilm' is invalid"):
        sd.info(make_cfg(name="fashion_mnist", objective="bilm"))
