"""Byte and character vocabularies for the language-modelling corpora.

Corpora are stored as raw bytes. `vocab='bytes'` uses them as they are (vocabulary 256);
`vocab='chars'` decodes UTF-8 and numbers the distinct characters of the training split in
code-point order (tiny shakespeare: 65; text8: 27). A character of another split that the
training split lacks maps to one extra `<unk>` id appended at the end; the builder records at
build time whether that id is needed.
"""

from __future__ import annotations

import dataclasses

import numpy as np


def split_points(num_bytes: int, fractions=(0.9, 0.05, 0.05), data: bytes | None = None):
    """Byte offsets that cut a corpus into train/validation/test (90/5/5 by default).

    Args:
      num_bytes: corpus size.
      fractions: split fractions; the last split takes the remainder.
      data: if given, each cut moves forward to the next UTF-8 character start (at most 3 bytes),
        so `vocab='chars'` never sees half a character.

    Returns:
      `(a, b)`: train = [0, a), validation = [a, b), test = [b, num_bytes).
    """
    a = int(num_bytes * fractions[0])
    b = int(num_bytes * (fractions[0] + fractions[1]))
    if data is not None:
        a, b = _char_start(data, a), _char_start(data, b)
    return a, b


def _char_start(data: bytes, i: int) -> int:
    for j in range(i, min(i + 4, len(data))):
        if data[j] & 0xC0 != 0x80:  # not a UTF-8 continuation byte
            return j
    return i


def codepoints(data: bytes | np.ndarray) -> np.ndarray:
    """UTF-8 bytes -> uint32 code points (invalid sequences become U+FFFD)."""
    text = bytes(data).decode("utf-8", errors="replace")
    return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)


def char_vocab(train: bytes | np.ndarray, others=()) -> tuple[list[int], bool]:
    """Distinct code points of the training split, and whether other splits need `<unk>`.

    Args:
      train: training split bytes.
      others: the other splits' bytes.

    Returns:
      `(sorted code points, needs_unk)`.
    """
    vocab = np.flatnonzero(np.bincount(codepoints(train), minlength=1))
    known = np.zeros(max(0x110000, int(vocab.max(initial=0)) + 1), dtype=bool)
    known[vocab] = True
    needs_unk = any(not known[np.unique(codepoints(o))].all() for o in others if len(o))
    return [int(c) for c in vocab], bool(needs_unk)


@dataclasses.dataclass(frozen=True)
class Vocab:
    """Maps corpus bytes to token ids and back.

    Attributes:
      kind: 'bytes' or 'chars'.
      chars: code points of the char vocabulary (id i = chars[i]); empty for bytes.
      unk: whether id `len(chars)` is `<unk>` (chars only).
    """

    kind: str
    chars: tuple[int, ...] = ()
    unk: bool = False

    @property
    def size(self) -> int:
        return 256 if self.kind == "bytes" else len(self.chars) + int(self.unk)

    @property
    def dtype(self):
        return np.uint8 if self.size <= 256 else np.uint16 if self.size <= 65536 else np.uint32

    def _lut(self) -> np.ndarray:
        lut = np.full(max(self.chars) + 2, len(self.chars), dtype=np.uint32)
        lut[list(self.chars)] = np.arange(len(self.chars), dtype=np.uint32)
        return lut

    def ids_from_bytes(self, data: bytes | np.ndarray) -> np.ndarray:
        """Corpus bytes -> token ids `[n]` (uint8/uint16, to be cast to int32 per batch)."""
        if self.kind == "bytes":
            return np.frombuffer(bytes(data), dtype=np.uint8) if isinstance(data, bytes) else data
        lut = self._lut()
        cps = codepoints(data)
        ids = lut[np.minimum(cps, len(lut) - 1)]
        if not self.unk and (ids == len(self.chars)).any():
            raise ValueError("text has characters outside the char vocabulary and no <unk> id")
        return ids.astype(self.dtype)

    def encode(self, text: str) -> np.ndarray:
        """str -> int32 ids `[n]`."""
        return self.ids_from_bytes(text.encode("utf-8")).astype(np.int32)

    def decode(self, ids) -> str:
        """int ids `[n]` -> str (bytes decoded as UTF-8 with replacement; `<unk>` -> U+FFFD)."""
        ids = np.asarray(ids).reshape(-1)
        if self.kind == "bytes":
            return bytes(ids.astype(np.uint8).tolist()).decode("utf-8", errors="replace")
        table = list(map(chr, self.chars)) + ["\ufffd"]
        return "".join(table[min(int(i), len(table) - 1)] for i in ids)
