"""Each token's characters as ELMo reads them (``config.data.token_chars = L``, 0 = off):
every batch gains ``token_chars`` int32 ``[B, T, L]``, the character ids of each id of
``inputs``, for a model whose token encoder is a character CNN (Peters et al. 2018 §3.4;
``seqjax.models.elmo``). A model family asks for it with ``Family.token_chars``
(``seqjax.models.registry``); the job fills ``config.data.token_chars`` from it.

The character vocabulary is AllenNLP's ``ELMoCharacterMapper``
(``allennlp/data/token_indexers/elmo_indexer.py``): the token's UTF-8 bytes (0..255, the
first ``L - 2`` kept) between a begin-of-word (258) and an end-of-word (259) character,
padded with 260 to ``L`` (ELMo: ``L = 50``); the sentence markers are ``[258, 256, 259, 260,
...]`` (BOS) and ``[258, 257, 259, 260, ...]`` (EOS); every id is then shifted by one so
that 0 is the padding *token* (all zeros: masked). Ids are thus in ``[0, NUM_CHARS)``.

A token's string is its vocabulary entry: a SentencePiece piece without its word-start
mark ``▁`` (the data's ``decode`` of the one id), a byte, a character or a word. The table
``[V, L]`` is built once per vocabulary and gathered per batch (``table[inputs]``).

Legend: B batch, T tokens, L characters per token, V vocabulary.
"""

from __future__ import annotations

import numpy as np

FIELD = "token_chars"
BOS_CHAR, EOS_CHAR, BOW_CHAR, EOW_CHAR, PAD_CHAR = 256, 257, 258, 259, 260
NUM_CHARS = 262  # 261 characters shifted by one, 0 = a padding token
ELMO_LENGTH = 50  # AllenNLP's ELMoCharacterMapper.max_word_length


def _marker(char: int, length: int) -> list[int]:
    ids = [PAD_CHAR] * length
    ids[:3] = [BOW_CHAR, char, EOW_CHAR]
    return ids


def word_char_ids(word: str | bytes, length: int = ELMO_LENGTH) -> np.ndarray:
    """ELMo's character ids ``[L]`` of one token (module docstring), already shifted by one."""
    if length < 3:
        raise ValueError(f"token_chars={length} must be >= 3 (begin, a character, end)")
    encoded = word if isinstance(word, bytes) else word.encode("utf-8", "replace")
    encoded = encoded[: length - 2]
    ids = [PAD_CHAR] * length
    ids[0] = BOW_CHAR
    ids[1 : len(encoded) + 1] = list(encoded)
    ids[len(encoded) + 1] = EOW_CHAR
    return np.asarray(ids, np.int32) + 1


def marker_char_ids(which: str, length: int = ELMO_LENGTH) -> np.ndarray:
    """``'bos'`` / ``'eos'``: ELMo's sentence-boundary tokens ``[L]`` (shifted by one)."""
    char = {"bos": BOS_CHAR, "eos": EOS_CHAR}[which]
    return np.asarray(_marker(char, length), np.int32) + 1


def _token_string(info, i: int) -> bytes:
    """The text of token id ``i``: its SentencePiece piece (without '▁'; byte pieces as their
    byte), else the data's ``decode`` of the one id."""
    sp = _sentencepiece(info.vocab_file)
    if sp is not None and i < sp.get_piece_size():
        if sp.is_byte(i):
            return bytes([int(sp.id_to_piece(i)[3:5], 16)])
        return sp.id_to_piece(i).replace("\u2581", "").encode("utf-8")
    return info.decode(np.asarray([i], np.int32)).encode("utf-8", "replace")


_SP: dict = {}


def _sentencepiece(path):
    if not path:
        return None
    if path not in _SP:
        import sentencepiece as spm

        _SP[path] = spm.SentencePieceProcessor(model_file=path)
    return _SP[path]


_TABLES: dict = {}


def table(info, length: int) -> np.ndarray:
    """``[V, L]`` int32: the character ids of every token id of ``info`` (``DataInfo``): the
    padding id all zeros, BOS/EOS ids ELMo's sentence markers, every other id its string."""
    key = (info.fingerprint, info.vocab_fingerprint, info.vocab_size, length)
    if key not in _TABLES:
        out = np.zeros((int(info.vocab_size), length), np.int32)
        for i in range(int(info.vocab_size)):
            if i == info.pad_id:
                continue
            if i == info.bos_id:
                out[i] = marker_char_ids("bos", length)
            elif i == info.eos_id:
                out[i] = marker_char_ids("eos", length)
            else:
                out[i] = word_char_ids(_token_string(info, i), length)
        _TABLES[key] = out
    return _TABLES[key]


class WithTokenChars:
    """A batch maker's batches with ``token_chars = table[inputs]`` added."""

    def __init__(self, maker, table_VL: np.ndarray):
        self.maker, self.table = maker, table_VL

    def __getattr__(self, name):  # rows(), tokens(), ... of the wrapped maker
        return getattr(self.maker, name)

    def __call__(self, step):
        batch = dict(self.maker(step))
        batch[FIELD] = self.table[batch["inputs"]]
        return batch


def wrap(iterator, cfg, info) -> object:
    """``iterator`` (a ``pipeline.DataIterator``) with ``token_chars`` in every batch, when
    ``cfg.token_chars`` > 0 (its spec records the length: a resumed run checks it)."""
    length = int(cfg.get(FIELD) or 0)
    if not length:
        return iterator
    from seqjax.data import pipeline

    maker = WithTokenChars(iterator.maker, table(info, length))
    spec = {**iterator.spec, FIELD: length}
    iterator.close()
    return pipeline.DataIterator(
        maker, iterator.num_steps, spec, num_workers=int(cfg.num_workers),
        prefetch=int(cfg.prefetch),
    )  # fmt: skip


def problems(cfg) -> list[tuple[str, object, str]]:
    """``config.data.token_chars``: 0 (off) or an integer >= 3; not with packing."""
    value = cfg.get(FIELD, 0)
    if not isinstance(value, int) or isinstance(value, bool) or (value and value < 3):
        return [(FIELD, value, "0 (off) or an integer >= 3 (ELMo: 50 characters per token)")]
    if value and cfg.get("packing"):
        return [("packing", True, f"False with data.{FIELD} > 0 (characters of unpacked rows)")]
    return []
