"""Word-level vocabulary (``config.data.vocab = "words"``), as Transformer-XL builds it.

Tokens are the whitespace-separated words of each line followed by ``<eos>`` (an empty
line is ``<eos>`` alone), as Transformer-XL's ``Vocab.tokenize(add_eos=True)`` for
WikiText-103 (Dai et al. 2019; Merity et al. 2017). The vocabulary is built from the
training split only: ids 0 ``<eos>`` and 1 ``<unk>``, then the words by decreasing count
(ties in order of first appearance, so frequent words get small ids and adaptive-softmax
cutoffs split by frequency), keeping words seen at least ``words_min_count`` times and at
most ``words_max_size`` ids in all (0: no limit). Words of other splits not in it map to
``<unk>``. WikiText already spells rare words ``<unk>``, which then shares that id.

The vocabulary is a JSON file stored beside the prepared data (``vocab_path``), named by
the corpus fingerprint and the options, so it is built once and reused by every run.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os

import numpy as np

EOS, UNK = "<eos>", "<unk>"
EOS_ID, UNK_ID = 0, 1


@dataclasses.dataclass(frozen=True)
class WordOptions:
    """``config.data.words_min_count`` and ``words_max_size`` (hashable: a cache key)."""

    min_count: int = 1
    max_size: int = 0

    @property
    def tag(self) -> str:
        return f"words_min{self.min_count}_max{self.max_size}"


def options_of(cfg) -> WordOptions:
    """The word options of ``config.data``."""
    return WordOptions(int(cfg.get("words_min_count", 1)), int(cfg.get("words_max_size", 0)))


def line_words(text: str):
    """Each line's words then ``<eos>``: the token stream of ``text``."""
    for line in text.splitlines():
        yield from line.split()
        yield EOS


def build(text: str, options: WordOptions = WordOptions()) -> list[str]:
    """The id -> word list built from the training text (module docstring)."""
    counts = collections.Counter(w for w in line_words(text) if w not in (EOS, UNK))
    words = [EOS, UNK]
    for word, n in sorted(counts.items(), key=lambda kv: -kv[1]):  # stable: first seen first
        if n < options.min_count or (options.max_size and len(words) >= options.max_size):
            break
        words.append(word)
    return words


class WordVocab:
    """Word <-> id maps with the interface of the other vocabularies (``size``,
    ``ids_from_bytes``, ``encode``, ``decode``)."""

    def __init__(self, words, path: str | None = None):
        self.words = tuple(words)
        self.index = {w: i for i, w in enumerate(self.words)}
        self.path = path

    @property
    def size(self) -> int:
        return len(self.words)

    @property
    def dtype(self):
        return np.int32

    def ids(self, tokens) -> np.ndarray:
        get = self.index.get
        return np.fromiter((get(w, UNK_ID) for w in tokens), dtype=np.int32)

    def ids_from_bytes(self, data) -> np.ndarray:
        """Token ids of a split stored as UTF-8 bytes (invalid bytes become U+FFFD)."""
        return self.ids(line_words(bytes(np.asarray(data, np.uint8)).decode("utf-8", "replace")))

    def encode(self, text: str) -> np.ndarray:
        """Ids of ``text`` without a final ``<eos>`` unless it ends with a newline."""
        ids = self.ids(line_words(text))
        return ids if text.endswith("\n") or not len(ids) else ids[:-1]

    def decode(self, ids) -> str:
        lines, line = [], []
        for i in np.asarray(ids).reshape(-1):
            word = self.words[int(i)]
            if word == EOS:
                lines.append(" ".join(line) + "\n")
                line = []
            else:
                line.append(word)
        return "".join(lines) + " ".join(line)


def vocab_path(data_dir: str, name: str, config: str, fingerprint: str, options) -> str:
    """Where the vocabulary of a prepared corpus is stored."""
    parts = [data_dir, name] + ([config] if config else [])
    return os.path.join(*parts, f"{options.tag}_{fingerprint[:16]}.json")


def ensure_vocab(path: str, train_text, options: WordOptions) -> WordVocab:
    """Loads the vocabulary at ``path``, building it from ``train_text()`` first if absent
    (written atomically, so concurrent processes agree)."""
    if not os.path.exists(path):
        words = build(train_text(), options)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"options": dataclasses.asdict(options), "words": words}, f)
        os.replace(tmp, path)
    with open(path, encoding="utf-8") as f:
        return WordVocab(json.load(f)["words"], path)
