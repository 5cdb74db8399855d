"""SentencePiece subword vocabularies (Kudo & Richardson 2018), trained once per data set.

`config.data.vocab = 'sentencepiece'` trains a BPE (Sennrich et al. 2016) or unigram (Kudo 2018)
model on the **training split only** (source and target sentences together for translation: the
shared vocabulary of Vaswani et al. 2017, §5.1) and stores it beside the prepared TFDS files,

    <data_dir>/seqjax_sentencepiece/<tfds name>/<config>/<fingerprint[:16]>-<options>.model

keyed by the data fingerprint and every vocabulary option, so evaluation, translation and sampling
decode with the very model the run trained with (`DataInfo.vocab_file`, `vocab_fingerprint`).

Id conventions (all seqjax subword and seq2seq data): 0 = `<pad>`, 1 = `<unk>`, 2 = `<s>` (BOS),
3 = `</s>` (EOS); pieces from 4. Text is not normalised (`normalization_rule_name='identity'`, no
dummy prefix, whitespace kept) and `byte_fallback` spells characters outside the model as UTF-8
bytes, so `decode(encode(s)) == s` for every string. A newline is always its own piece.

Determinism: the same sentences and options give the same model bytes: one training thread, no
sampling inside SentencePiece (a training set larger than `spm_input_sentence_size` is sub-sampled
here by a seeded hash of the sentence index) and a fixed SentencePiece random seed.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import logging
import os
from collections.abc import Sequence

import numpy as np
import sentencepiece as spm

from seqjax.data import sources
from seqjax.data.sources import DataError

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
MODEL_TYPES = ("bpe", "unigram")
SEED = 0  # of the sentence sub-sample and of SentencePiece's own generator


@dataclasses.dataclass(frozen=True)
class SpmOptions:
    """The `config.data` fields that define a SentencePiece model.

    Attributes:
      model_type: 'bpe' or 'unigram' (`config.data.spm_model_type`).
      vocab_size: pieces including the 4 special ids and 256 byte pieces (`config.data.vocab_size`).
      character_coverage: share of characters given their own piece (`spm_character_coverage`);
        the rest are spelled as bytes.
      input_sentence_size: most training sentences used (`spm_input_sentence_size`); more are
        sub-sampled deterministically (a fixed seed, not `config.data.seed`: runs that differ
        only in their data order share one vocabulary).
    """

    model_type: str = "bpe"
    vocab_size: int = 8000
    character_coverage: float = 1.0
    input_sentence_size: int = 1_000_000

    @property
    def tag(self) -> str:
        """A file-name tag naming every option (a change trains a new model)."""
        return (
            f"{self.model_type}{self.vocab_size}_cov{self.character_coverage:g}"
            f"_n{self.input_sentence_size}"
        )


def options_of(cfg) -> SpmOptions:
    return SpmOptions(
        model_type=str(cfg.spm_model_type),
        vocab_size=int(cfg.vocab_size),
        character_coverage=float(cfg.spm_character_coverage),
        input_sentence_size=int(cfg.spm_input_sentence_size),
    )


def sample(sentences: Sequence[str], size: int, seed: int) -> list[str]:
    """At most `size` sentences, chosen by a seeded hash of their index, in their original order."""
    if len(sentences) <= size:
        return list(sentences)
    from seqjax.data.pipeline import hash_u64  # grain loads only with the pipeline

    h = hash_u64(seed, 5, np.arange(len(sentences)))
    keep = np.sort(np.argsort(h, kind="stable")[:size])
    return [sentences[i] for i in keep]


def train(sentences: Sequence[str], opts: SpmOptions) -> bytes:
    """Trains a model on `sentences` and returns its serialized bytes (deterministic).

    Raises:
      DataError: SentencePiece refused the options (e.g. a vocab_size too small or too large for
        the text), with its reason and the config field to change.
    """
    sentences = [s for s in sample(sentences, opts.input_sentence_size, SEED) if s]
    if not sentences:
        raise DataError("config.data.vocab='sentencepiece': the training split has no text.")
    spm.set_random_generator_seed(SEED + 1)  # SentencePiece treats 0 as 'unseeded'
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=model,
            model_type=opts.model_type,
            vocab_size=opts.vocab_size,
            character_coverage=opts.character_coverage,
            normalization_rule_name="identity",
            add_dummy_prefix=False,
            remove_extra_whitespaces=False,
            allow_whitespace_only_pieces=True,
            split_digits=False,
            byte_fallback=True,
            user_defined_symbols=["\n"],
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            num_threads=1,
            input_sentence_size=0,
            shuffle_input_sentence=False,
            max_sentence_length=1 << 16,
            hard_vocab_limit=True,
            minloglevel=2,
        )
    except RuntimeError as e:
        first = (str(e).strip().splitlines() or [""])[-1][:300]
        raise DataError(
            f"config.data.vocab_size={opts.vocab_size} (spm_model_type={opts.model_type!r}): "
            f"SentencePiece cannot train this vocabulary ({first}); valid: a vocab_size between "
            "the text's distinct characters + 260 and the number of distinct pieces it has."
        ) from None
    return model.getvalue()


def model_path(data_dir: str, tfds_name: str, config_name: str, fingerprint: str, opts) -> str:
    """Where the model of one prepared data set and one set of options is stored."""
    folder = os.path.join(data_dir, "seqjax_sentencepiece", tfds_name, config_name or "default")
    return os.path.join(folder, f"{fingerprint[:16]}-{opts.tag}.model")


def ensure_model(path: str, sentences_fn, opts: SpmOptions) -> str:
    """Returns `path`, training and writing the model first if it is not there yet.

    Args:
      path: from `model_path`.
      sentences_fn: () -> the training split's sentences (called only when training).
      opts: the model options.
    """
    if os.path.isfile(path) and _parses(path):
        return path

    folder = os.path.dirname(path)
    with sources.prepare_lock(folder, "sentencepiece"):
        if os.path.isfile(path) and not _parses(path):
            # Damaged (truncated, overwritten): kept aside and retrained, as a deleted one is
            # (the same sentences and options give the same bytes).
            aside = f"{path}.damaged"
            os.replace(path, aside)
            _processor.cache_clear()
            logging.warning(
                "the SentencePiece model %s is damaged (it does not parse); moved it to %s "
                "and training it again from the prepared data",
                path,
                aside,
            )
        if not os.path.isfile(path):
            sentences = sentences_fn()
            logging.info(
                "training a %s SentencePiece model on %d sentences", opts.tag, len(sentences)
            )
            data = train(sentences, opts)
            tmp = f"{path}.tmp{os.getpid()}"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)  # readers never see a partial model
    return path


def _parses(path: str) -> bool:
    """Whether ``path`` holds a SentencePiece model (not a truncated or foreign file)."""
    try:
        spm.SentencePieceProcessor(model_file=path)
    except (RuntimeError, OSError):
        return False
    return True


@functools.lru_cache(maxsize=8)
def _processor(path: str) -> spm.SentencePieceProcessor:
    try:
        return spm.SentencePieceProcessor(model_file=path)
    except (RuntimeError, OSError) as e:
        reason = (str(e).strip().splitlines() or ["unreadable"])[0][:200]
        raise DataError(
            f"the SentencePiece model {path} cannot be read ({reason}); delete it and rerun the "
            "training command, which trains it again from the prepared data"
        ) from None


@dataclasses.dataclass(frozen=True)
class SentencePieceVocab:
    """A stored SentencePiece model with the interface of `vocab.Vocab` (picklable by path).

    Attributes:
      path: the `.model` file.
    """

    path: str
    kind: str = "sentencepiece"

    @property
    def processor(self) -> spm.SentencePieceProcessor:
        return _processor(self.path)

    @property
    def size(self) -> int:
        return self.processor.vocab_size()

    @property
    def dtype(self):
        return np.uint16 if self.size <= 65536 else np.uint32

    @functools.cached_property
    def fingerprint(self) -> str:
        """sha256 of the model file."""
        with open(self.path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()

    def encode_many(self, texts: Sequence[str]) -> list[list[int]]:
        """Pieces ids of each text (no BOS/EOS)."""
        return self.processor.encode(list(texts), num_threads=1)

    def ids_from_bytes(self, data: bytes | np.ndarray) -> np.ndarray:
        """An LM split's bytes -> token ids `[n]` (UTF-8; invalid bytes become U+FFFD)."""
        text = bytes(data).decode("utf-8", errors="replace")
        lines = text.splitlines(keepends=True)
        ids = [i for piece in self.encode_many(lines) for i in piece]
        return np.asarray(ids, dtype=self.dtype)

    def encode(self, text: str) -> np.ndarray:
        """str -> int32 ids `[n]` (no BOS/EOS)."""
        return np.asarray(self.processor.encode(text), dtype=np.int32)

    def decode(self, ids) -> str:
        """ids `[n]` -> str: stops at the first EOS; padding and BOS are dropped."""
        ids = [int(i) for i in np.asarray(ids).reshape(-1)]
        if EOS_ID in ids:
            ids = ids[: ids.index(EOS_ID)]
        return self.processor.decode([i for i in ids if i not in (PAD_ID, BOS_ID)])


def spm_fields(vocab) -> dict:
    """The `DataInfo` fields of a SentencePiece vocabulary (none for other vocabularies)."""
    if not isinstance(vocab, SentencePieceVocab):
        return {}
    return dict(
        bos_id=BOS_ID, eos_id=EOS_ID, vocab_file=vocab.path, vocab_fingerprint=vocab.fingerprint
    )
