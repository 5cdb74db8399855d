"""A Hugging Face folder's tokenizer as the data vocabulary, so the ids the model was
trained on reach it: ``tokenizer.json`` through the ``tokenizers`` package (a dependency
of seqjax: ``pip install -e .`` installs it), else a SentencePiece model (``spiece.model``,
T5; ``sentencepiece.bpe.model``) through ``sentencepiece``.
"""

from __future__ import annotations

import json
from pathlib import Path

SPM_FILES = ("spiece.model", "sentencepiece.bpe.model", "tokenizer.model")


class HFTokenizer:
    """``encode(text) -> list[int]``, ``decode(ids) -> str``, ``vocab_size`` and the special
    ids the folder names (``pad_id``, ``mask_id``, ``eos_id``, ``bos_id``; None when it has
    none; ``tokenizer_config.json``'s ``<name>_token`` first)."""

    def __init__(self, path):
        p = Path(path)
        special = {}
        if (p / "tokenizer_config.json").is_file():
            special = json.loads((p / "tokenizer_config.json").read_text())
        if (p / "tokenizer.json").is_file():
            try:
                from tokenizers import Tokenizer
            except ImportError:
                raise ImportError(
                    f"reading {p / 'tokenizer.json'} needs the tokenizers package, a seqjax "
                    "dependency: install seqjax with pip install -e . (or pip install "
                    '"tokenizers>=0.22.1,<1")'
                ) from None

            self._tok = Tokenizer.from_file(str(p / "tokenizer.json"))
            self.kind = "tokenizers"
            self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
            names = {_name(special.get(f"{k}_token")) for k in ("pad", "mask", "eos", "bos")}
            names = (names | set(_CANDIDATES)) - {None}
            ids = {s: self._tok.token_to_id(s) for s in names}
        else:
            spm = [p / f for f in SPM_FILES if (p / f).is_file()]
            if not spm:
                raise ValueError(
                    f"Hugging Face folder {str(p)!r} has no tokenizer.json or SentencePiece "
                    f"model (one of {list(SPM_FILES)})"
                )
            import sentencepiece

            self._tok = sentencepiece.SentencePieceProcessor(model_file=str(spm[0]))
            self.kind = "sentencepiece"
            self.vocab_size = self._tok.get_piece_size()
            names = {_name(special.get(f"{k}_token")) for k in ("pad", "mask", "eos", "bos")}
            ids = {s: self._tok.piece_to_id(s) for s in (names | set(_CANDIDATES)) - {None}}
            ids = {s: (i if self._tok.id_to_piece(i) == s else None) for s, i in ids.items()}
            self._around = _special_pieces(p, self._tok)
            # T5Tokenizer's sentinels past the pieces: <extra_id_0> the last of ``extra_ids``
            self._extra_ids = int(special.get("extra_ids") or 0)
        self.pad_id = _first(ids, _name(special.get("pad_token")), "[PAD]", "<pad>")
        self.mask_id = _first(ids, _name(special.get("mask_token")), "[MASK]", "<mask>")
        self.eos_id = _first(ids, _name(special.get("eos_token")), "</s>")
        self.bos_id = _first(ids, _name(special.get("bos_token")), "<s>")

    def encode(self, text: str, special: bool = True) -> list[int]:
        """The ids of ``text``; ``special``: with the special tokens the tokenizer puts
        around a text (BERT's ``[CLS] ... [SEP]``, T5's ``</s>``)."""
        return self.encode_batch([text], special)[0]

    def encode_batch(self, texts, special: bool = True) -> list[list[int]]:
        """``encode`` of each text, in one call of the tokenizer's batch encoding."""
        texts = list(texts)
        if self.kind == "tokenizers":  # its post-processor adds the special tokens
            out = self._tok.encode_batch(texts, add_special_tokens=special)
            return [list(e.ids) for e in out]
        before, after = self._around if special else ([], [])
        return [[*before, *ids, *after] for ids in self._tok.encode(texts)]

    def sentinel_ids(self, count: int) -> list[int] | None:
        """The ids of T5's sentinels ``<extra_id_0>`` .. ``<extra_id_{count-1}>`` (Raffel et
        al. 2020, §3.1.4), as the tokenizer numbers them; None when it lacks one."""
        if self.kind == "tokenizers":
            ids = [self._tok.token_to_id(f"<extra_id_{i}>") for i in range(count)]
            return None if any(i is None for i in ids) else ids
        if count > self._extra_ids:
            return None
        top = self.vocab_size + self._extra_ids - 1
        return [top - i for i in range(count)]

    def decode(self, ids) -> str:
        return self._tok.decode([int(i) for i in ids])


def _special_pieces(folder: Path, spm) -> tuple[list[int], list[int]]:
    """The ids a SentencePiece-only folder's tokenizer puts around one text, as its
    architecture declares them (``convert.registry.Architecture.spm_prefix/spm_suffix``: T5's
    ``</s>`` after it, as ``T5Tokenizer`` appends); none without a ``config.json`` naming a
    registered architecture."""
    from seqjax.convert import registry

    try:
        arch = registry.for_hf_config(json.loads((folder / "config.json").read_text()))
    except (OSError, ValueError):
        return [], []

    def ids(pieces):
        found = [(piece, spm.piece_to_id(piece)) for piece in pieces]
        return [i for piece, i in found if spm.id_to_piece(i) == piece]

    return ids(arch.spm_prefix), ids(arch.spm_suffix)


_CANDIDATES = ("[PAD]", "<pad>", "[MASK]", "<mask>", "</s>", "<s>")


def _name(token):
    """A ``tokenizer_config.json`` special token: a string or ``{"content": ...}``."""
    if isinstance(token, dict):
        token = token.get("content")
    return token if isinstance(token, str) else None


def _first(ids: dict, preferred, *names):
    for name in (preferred, *names):
        if isinstance(name, str) and ids.get(name) is not None:
            return ids[name]
    return None


def tokenizer(path) -> HFTokenizer:
    """The tokenizer of the Hugging Face folder ``path``."""
    return HFTokenizer(path)


def check_vocabulary(model_vocab_size: int, data_vocab_size: int, where: str = "data") -> None:
    """Raises a one-sentence ``ValueError`` when the data's ids cannot index the imported
    token table (more ids than rows: another vocabulary than the checkpoint's); a table
    padded beyond the tokenizer (T5: 32128 rows for 32100 pieces) is accepted."""
    if data_vocab_size > model_vocab_size:
        raise ValueError(
            f"{where} vocabulary has {data_vocab_size} ids but the imported model's token "
            f"table has {model_vocab_size} rows; use the checkpoint's own tokenizer "
            "(seqjax.convert.tokenizer(folder))"
        )
