"""A Hugging Face folder's tokenizer as a data vocabulary: ``config.data.vocab="hf:<folder>"``.

``seqjax.train.hf_start`` sets it when a run starts from ``config.init_from=hf:<folder>``, so
the ids the checkpoint was trained on reach it. The tokenizer is the folder's own
(``seqjax.convert.tokenizer``: ``tokenizer.json`` through ``tokenizers``, else its
SentencePiece model), applied as ``transformers`` applies it by default (with the special
tokens its post-processor adds, e.g. BERT's ``[CLS] ... [SEP]``). The vocabulary's size is
the checkpoint's token table (``config.json``'s ``vocab_size``: GPT-2 50257, T5 32128 for
32100 pieces), so the model built from the data has the checkpoint's output layer.

LM corpora are tokenized a line at a time (newlines kept), the reviews of ``imdb_bytes`` one
review at a time (both in batches of the tokenizer's batch encoding). Sequence-to-sequence
data (translation, span corruption: ``seqjax.data.seq2seq``) read the texts without the
special tokens and append the tokenizer's own ``eos_id``, as ``T5Tokenizer`` does; their
padding is its ``pad_id``, span corruption's sentinels its ``<extra_id_N>`` tokens.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

import numpy as np

PREFIX = "hf:"
KIND = "hf"
_CHUNK = 4096  # texts per call of the tokenizer's batch encoding


def is_hf(vocab) -> bool:
    """Whether ``config.data.vocab`` names a Hugging Face tokenizer (``hf:<folder>``)."""
    return isinstance(vocab, str) and vocab.startswith(PREFIX)


def folder_problem(vocab: str) -> str | None:
    """Why ``hf:<folder>`` cannot be read (no folder, no tokenizer), else None."""
    from seqjax.convert.tokenizer import SPM_FILES

    p = Path(vocab[len(PREFIX) :]).expanduser()
    if not p.is_dir():
        return f"{str(p)!r} is not a folder"
    if not (p / "tokenizer.json").is_file() and not any((p / f).is_file() for f in SPM_FILES):
        return f"{str(p)!r} has no tokenizer.json or SentencePiece model ({', '.join(SPM_FILES)})"
    return None


@functools.lru_cache(maxsize=4)
def _tokenizer(folder: str):
    from seqjax.convert.tokenizer import HFTokenizer

    return HFTokenizer(folder)


class HFVocab:
    """The ``vocab.Vocab`` interface over a Hugging Face folder's tokenizer (picklable: only
    the folder travels to data workers).

    Attributes:
      path: the folder.
      kind: "hf".
    """

    kind = KIND

    def __init__(self, folder):
        self.path = str(Path(folder).expanduser().absolute())

    def __reduce__(self):
        return (HFVocab, (self.path,))

    @property
    def tokenizer(self):
        return _tokenizer(self.path)

    @functools.cached_property
    def size(self) -> int:
        """Rows of the checkpoint's token table (at least the tokenizer's ids)."""
        rows = 0
        cfg = Path(self.path) / "config.json"
        if cfg.is_file():
            try:
                rows = int(json.loads(cfg.read_text()).get("vocab_size") or 0)
            except (ValueError, TypeError):
                rows = 0
        return max(rows, int(self.tokenizer.vocab_size))

    @property
    def dtype(self):
        return np.uint16 if self.size <= 65536 else np.uint32

    @property
    def pad_id(self):
        return self.tokenizer.pad_id

    @property
    def mask_id(self):
        return self.tokenizer.mask_id

    @property
    def eos_id(self):
        return self.tokenizer.eos_id

    @property
    def bos_id(self):
        return self.tokenizer.bos_id

    def sentinel_ids(self, count: int) -> list[int] | None:
        """T5's ``<extra_id_0..count-1>`` ids as the tokenizer numbers them (None: it lacks
        one)."""
        return self.tokenizer.sentinel_ids(count)

    @functools.cached_property
    def fingerprint(self) -> str:
        """sha256 of the tokenizer's files (a changed tokenizer re-encodes cached splits)."""
        from seqjax.convert.tokenizer import SPM_FILES

        h = hashlib.sha256()
        for name in ("tokenizer.json", "tokenizer_config.json", *SPM_FILES):
            f = Path(self.path) / name
            if f.is_file():
                h.update(name.encode() + b"\0" + f.read_bytes())
        return h.hexdigest()

    @property
    def tag(self) -> str:
        return f"hf_{self.fingerprint[:12]}"

    def encode_many(self, texts, special: bool = True) -> list[list[int]]:
        """Token ids of each text (``special``: with the tokenizer's special tokens), in
        chunks of the tokenizer's batch encoding."""
        texts, out = list(texts), []
        for i in range(0, len(texts), _CHUNK):
            out += self.tokenizer.encode_batch(texts[i : i + _CHUNK], special)
        return out

    def ids_from_bytes(self, data) -> np.ndarray:
        """An LM split's bytes -> token ids ``[n]``, a line at a time (UTF-8; invalid bytes
        become U+FFFD)."""
        text = bytes(data).decode("utf-8", errors="replace")
        ids = [i for piece in self.encode_many(text.splitlines(keepends=True)) for i in piece]
        return np.asarray(ids, dtype=self.dtype)

    def encode(self, text: str, special: bool = True) -> np.ndarray:
        """str -> int32 ids ``[n]`` (``special``: with the tokenizer's special tokens)."""
        return np.asarray(self.tokenizer.encode(text, special), np.int32)

    def decode(self, ids) -> str:
        return self.tokenizer.decode([int(i) for i in np.asarray(ids).reshape(-1)])
