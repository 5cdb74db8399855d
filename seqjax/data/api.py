"""`make` and `info`: what the training loop calls.

it = seqjax.data.make(config.data, split="train", process_index=jax.process_index(),
                      process_count=jax.process_count())
batch = next(it)            # {'inputs': int32[b, T], 'targets': ..., 'weights': ...}
state = it.get_state()      # save with the checkpoint; later it.set_state(state)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

import seqjax.data.images as images
from seqjax.data import (
    classification,
    listops,
    objectives,
    packing,
    pathfinder_data,
    pipeline,
    retrieval,
    seq2seq,
    store,
    subword,
    words,
)
from seqjax.data.config import (
    CLASSIFICATION_DATASETS,
    IMAGE_DATASETS,
    PAIR_DATASETS,
    SEQ2SEQ_DATASETS,
)
from seqjax.data.sources import DataError
from seqjax.data.validation import config_problems
from seqjax.data.vocab import Vocab

SPLITS = ("train", "validation", "test")
# Input length of the classification sets when config.data.max_len is None (LRA's lengths).
DEFAULT_MAX_LEN = {"imdb_bytes": 4096, "listops": 2048}
DEFAULT_MAX_LEN.update({n: s.num_pixels for n, s in images.SPECS.items()})  # images: all pixels
DEFAULT_MAX_LEN.update(aan=4000, l10n_pairs=128)  # bytes per document (LRA Retrieval: 4K)
DEFAULT_MAX_LEN.update(pathfinder32=32 * 32, pathx=128 * 128)  # Pathfinder, Path-X: all pixels


@dataclasses.dataclass(frozen=True)
class DataInfo:
    """What a model and a sampler need to know about the data.

    Attributes:
      name: `config.data.name`.
      task: 'lm', 'classification' or 'seq2seq'.
      vocab_size: number of token ids (inputs are in [0, vocab_size)).
      seq_len: T of the batches' `inputs` [b, T] (seq2seq: S = max_source_len).
      num_classes: classes (classification), else None.
      pad_id: the padding id (0) where inputs are padded, else None.
      fingerprint: sha256 of the source bytes (of the generator spec for duplication).
      split_sizes: tokens (LM) or examples (classification, seq2seq; None: endless) per split.
      encode: str -> int32 ids [n].
      decode: ids [n] -> str (sentencepiece/seq2seq: stops at EOS, drops pad and BOS).
      target_len: seq2seq: T of `targets`/`weights` [b, T] (max_target_len), else None.
      bos_id, eos_id: sentencepiece and seq2seq: 2 and 3 (pad 0, unk 1), else None.
      vocab_file: the SentencePiece model the batches were encoded with, else None.
      vocab_fingerprint: sha256 of `vocab_file`, else None (record it with a run).
      source_lang, target_lang: translation languages, else None.
      mask_id: `config.data.objective='mlm'`: the [MASK] id appended past the data's own
        vocabulary (`seqjax.data.objectives`), else None.
      image_shape: images: `(height, width, channels)` of the raster-order sequence, else None.
    """

    name: str
    task: str
    vocab_size: int
    seq_len: int
    num_classes: int | None
    pad_id: int | None
    fingerprint: str
    split_sizes: dict
    encode: Callable[[str], np.ndarray] = dataclasses.field(repr=False)
    decode: Callable[[np.ndarray], str] = dataclasses.field(repr=False)
    target_len: int | None = None
    bos_id: int | None = None
    eos_id: int | None = None
    vocab_file: str | None = None
    vocab_fingerprint: str | None = None
    source_lang: str | None = None
    target_lang: str | None = None
    mask_id: int | None = None  # objective='mlm': the [MASK] id (= the data's vocab size)
    image_shape: tuple | None = None


def _check(cfg) -> None:
    """Raises one clear ValueError (`DataError`) for the first bad `config.data` field."""
    for field, value, valid in config_problems(cfg)[:1]:
        raise DataError(f"config.data.{field}={value!r} is invalid; valid: {valid}.")


def max_len(cfg) -> int:
    """A classification set's input length: `config.data.max_len`, else its default."""
    return int(cfg.max_len) if cfg.max_len else DEFAULT_MAX_LEN[cfg.name]


class _Tokens:
    """Picklable lazy handle on an LM split's token ids (loaded once per process)."""

    def __init__(self, key: store.DatasetKey, split: str, kind: str):
        self.key, self.split, self.kind = key, split, kind

    def __call__(self) -> np.ndarray:
        return store.tokens(self.key, self.split, self.kind)


class _Source:
    """Picklable lazy handle on a TFDS data source."""

    def __init__(self, key: store.DatasetKey, split: str):
        self.key, self.split = key, split

    def __call__(self):
        return store.source(self.key, self.split)


def _tfds_split(cfg, split: str) -> str:
    # LRA evaluates Text on the test set; aclImdb has no validation split.
    return "test" if cfg.name == "imdb_bytes" and split == "validation" else split


def info(cfg) -> DataInfo:
    """Vocabulary, task and fingerprint of `config.data` (prepares the data set if needed)."""
    _check(cfg)
    if cfg.get("objective") == "mlm":  # the text data set's info, [MASK] appended (task 'mlm')
        base = info(objectives.base_data(cfg))
        return dataclasses.replace(
            base, task="mlm", vocab_size=base.vocab_size + 1, mask_id=base.vocab_size
        )
    if cfg.get("objective") == "span_corruption":  # T5: seq2seq batches, sentinels appended
        return objectives.span_info(cfg)
    if cfg.get("objective") == "lm":  # a causal LM over the example texts (packing.make)
        return dataclasses.replace(info(objectives.base_data(cfg)), task="lm", num_classes=None)
    name = cfg.name
    if name in SEQ2SEQ_DATASETS:
        return DataInfo(**seq2seq.info_fields(cfg))
    if name == "duplication":
        spec = json.dumps(["duplication", int(cfg.seed), int(cfg.dup_vocab_size)])
        return DataInfo(
            name=name,
            task="lm",
            vocab_size=int(cfg.dup_vocab_size),
            seq_len=int(cfg.seq_len),
            num_classes=None,
            pad_id=None,
            fingerprint=hashlib.sha256(spec.encode()).hexdigest(),
            split_sizes={"train": None, "validation": cfg.dup_eval_size, "test": cfg.dup_eval_size},
            encode=lambda s: np.array(s.split(), dtype=np.int32),
            decode=lambda ids: " ".join(str(int(i)) for i in np.asarray(ids).reshape(-1)),
        )
    if name in IMAGE_DATASETS:
        return DataInfo(**images.info_fields(cfg, store.dataset_key(cfg), store))
    if name in pathfinder_data.DATASETS:
        return DataInfo(**pathfinder_data.info_fields(cfg))
    if name in PAIR_DATASETS:
        return DataInfo(**retrieval.info_fields(cfg, max_len(cfg)))
    key = store.dataset_key(cfg)
    meta = store.metadata(key)
    common = dict(name=name, fingerprint=meta["fingerprint"])
    if name in CLASSIFICATION_DATASETS:
        splits = store.builder(key).info.splits
        sizes = {s: splits[_tfds_split(cfg, s)].num_examples for s in SPLITS}
        lra = {  # LRA: ListOps 16 tokens / 10 classes; Text bytes + 1 (257) / 2 classes
            "listops": (listops.VOCAB_SIZE, listops.NUM_CLASSES, listops.encode, listops.decode),
            "imdb_bytes": (257, 2, _imdb_encode, _imdb_decode),
        }
        if cfg.vocab == "sentencepiece":  # imdb_bytes as subwords (classification.py)
            vocab = classification.imdb_vocab(cfg, key)
            lra[name] = (vocab.size, 2, vocab.encode, vocab.decode)
            common.update(_spm_fields(vocab))
        vocab_size, classes, enc, dec = lra[name]
        return DataInfo(
            task="classification",
            vocab_size=vocab_size,
            seq_len=max_len(cfg),
            num_classes=classes,
            pad_id=0,
            split_sizes=sizes,
            encode=enc,
            decode=dec,
            **common,
        )
    if cfg.vocab == "chars":
        _check_decodable(cfg, key, meta)
    kind = _vocab_kind(cfg)
    vocab: Vocab | subword.SentencePieceVocab = store.vocab(key, kind)
    if cfg.vocab == "bytes":
        sizes = dict(meta["num_bytes"])
    else:
        sizes = {s: len(store.tokens(key, s, kind)) for s in SPLITS}
    if cfg.lm_batching == "random" and sizes["train"] <= int(cfg.seq_len) + 1:
        raise DataError(_too_short(cfg, "train", sizes["train"], int(cfg.seq_len) + 2))
    for split in ("validation", "test"):  # evaluated after training: fail now, not then
        if sizes[split] < 2:
            raise DataError(_too_short(cfg, split, sizes[split], 2))
    return DataInfo(
        task="lm",
        vocab_size=vocab.size,
        seq_len=int(cfg.seq_len),
        num_classes=None,
        pad_id=None,
        split_sizes=sizes,
        encode=vocab.encode,
        decode=vocab.decode,
        **common,
        **_spm_fields(vocab),
    )


def _vocab_kind(cfg):
    """`store.vocab`'s kind: 'bytes', 'chars' or the SentencePiece options."""
    if cfg.vocab == "words":
        return words.options_of(cfg)
    return subword.options_of(cfg) if cfg.vocab == "sentencepiece" else cfg.vocab


def _spm_fields(vocab) -> dict:
    if not isinstance(vocab, subword.SentencePieceVocab):
        return {}
    return dict(
        bos_id=subword.BOS_ID,
        eos_id=subword.EOS_ID,
        vocab_file=vocab.path,
        vocab_fingerprint=vocab.fingerprint,
    )


def references(cfg, split: str, side: str = "target") -> list[str]:
    """A translation split's raw strings, in the order of `make(cfg, split, train=False)` rows.

    Row g of the evaluation batches (global row numbering: step * batch_size + row) is
    `references(cfg, split)[g]`; rows past the end are zero-weight padding. Use these
    untokenised, untruncated strings as the BLEU references (`side='source'`: the inputs).
    """
    _check(cfg)
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is invalid; valid: {', '.join(SPLITS)}.")
    if side not in ("source", "target"):
        raise ValueError(f"side={side!r} is invalid; valid: 'source', 'target'.")
    return seq2seq.references(cfg, split, side)


def _what(cfg) -> str:
    return f"config.data.path={cfg.path!r}" if cfg.name == "text_file" else cfg.name


def _too_short(cfg, split: str, n: int, need: int) -> str:
    share = {"train": "90%", "validation": "5%", "test": "5%"}[split]
    return (
        f"{_what(cfg)}: its {split} split ({share} of the data) has {n:,} tokens, fewer than "
        f"the {need:,} that one sequence of config.data.seq_len={int(cfg.seq_len)} needs; use "
        "more text or a smaller config.data.seq_len."
    )


def _check_decodable(cfg, key, meta: dict) -> None:
    """vocab='chars' needs UTF-8: invalid bytes would silently become U+FFFD characters."""
    paths = getattr(key.config, "paths", None) if key.config is not None else None
    for path in paths or ():
        data = Path(path).read_bytes()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataError(
                f"{path} is not valid UTF-8 (byte {e.start:,}: {data[e.start : e.start + 4]!r}), "
                "so config.data.vocab='chars' would turn such bytes into U+FFFD characters; set "
                "config.data.vocab=bytes (one token per byte), or convert the file to UTF-8."
            ) from None
    # Corpora with invalid UTF-8 are named once, when prepared (corpora._warn_invalid_utf8).


def _imdb_encode(text: str) -> np.ndarray:
    """LRA Text ids: UTF-8 byte + 1 (0 is padding)."""
    return np.frombuffer(text.encode("utf-8"), np.uint8).astype(np.int32) + 1


def _imdb_decode(ids) -> str:
    ids = np.asarray(ids).reshape(-1)
    return bytes((ids[ids > 0] - 1).astype(np.uint8).tolist()).decode("utf-8", errors="replace")


def make(cfg, *, split: str, process_index: int = 0, process_count: int = 1, train: bool = True):
    """Returns this process's batch iterator for one split of `config.data`.

    Args:
      cfg: `config.data` (see `default_config`).
      split: 'train', 'validation' or 'test'.
      process_index: this JAX process (`jax.process_index()`).
      process_count: number of processes (`jax.process_count()`); must divide `batch_size`.
      train: True: endless, shuffled/random, seeded by `cfg.seed`. False: one deterministic pass
        over the whole split, the last batch padded with zero weights, then StopIteration.

    Returns:
      A `DataIterator` yielding numpy dicts with per-process batch b = batch_size/process_count:
      LM `{'inputs': int32[b, T], 'targets': int32[b, T], 'weights': float32[b, T]}`;
      classification `{'inputs': int32[b, max_len], 'targets': int32[b], 'weights': float32[b]}`;
      seq2seq `{'inputs': int32[b, S], 'targets': int32[b, T], 'weights': float32[b, T]}`
      (see `seq2seq.py`).
      It has `get_state() -> dict` and `set_state(dict)`, and `num_steps` (None when endless).
    """
    _check(cfg)
    if cfg.get("objective") == "mlm":
        return objectives.make_mlm(cfg, split, process_index, process_count, train)
    if cfg.get("objective") == "span_corruption":
        return objectives.make_spans(cfg, split, process_index, process_count, train)
    if cfg.get("packing") or cfg.get("objective") == "lm":  # seqjax.data.packing
        return packing.make(cfg, split, process_index, process_count, train)
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is invalid; valid: {', '.join(SPLITS)}.")
    if not 0 <= process_index < process_count:
        raise ValueError(f"process_index={process_index} not in [0, process_count={process_count})")
    B = int(cfg.batch_size)
    if B % process_count:
        raise ValueError(
            f"config.data.batch_size={B} (the global batch) is not divisible by "
            f"process_count={process_count}; use a multiple of {process_count}."
        )
    layout = (B, process_index, process_count)
    T = int(cfg.seq_len)
    name = cfg.name
    spec = {
        "name": name,
        "split": split,
        "train": train,
        "seed": int(cfg.seed),
        "batch_size": B,
        "process_index": process_index,
        "process_count": process_count,
    }
    if name in SEQ2SEQ_DATASETS:
        maker, num_steps, extra = seq2seq.maker(cfg, split, train, layout)
        spec.update(extra)
    elif name == "duplication":
        split_id = SPLITS.index(split)
        size = None if train else int(cfg.dup_eval_size)
        maker = pipeline.Duplication(
            T, int(cfg.dup_vocab_size), int(cfg.seed), split_id, size, *layout
        )
        num_steps = None if train else math.ceil(size / B)
        spec.update(seq_len=T, dup_vocab_size=int(cfg.dup_vocab_size))
    elif name in IMAGE_DATASETS:
        key = store.dataset_key(cfg)
        maker, num_steps, extra = images.maker(
            cfg, split, train, layout, key, _Source(key, split), store
        )
    elif name in PAIR_DATASETS:
        maker, num_steps, extra = retrieval.maker(cfg, split, train, layout, max_len(cfg))
        spec.update(extra)
    elif name in pathfinder_data.DATASETS:
        maker, num_steps, extra = pathfinder_data.maker(cfg, split, train, layout, _Source)
        spec.update(extra)
    elif name in CLASSIFICATION_DATASETS:
        key = store.dataset_key(cfg)
        tfds_split = _tfds_split(cfg, split)
        n = store.builder(key).info.splits[tfds_split].num_examples
        length = max_len(cfg)
        offset = 1 if name == "imdb_bytes" else 0
        src = _Source(key, tfds_split)
        if cfg.vocab == "sentencepiece":  # imdb_bytes as subwords (classification.py)
            vocab = classification.imdb_vocab(cfg, key)
            classification.load_reviews(key, tfds_split, vocab.path)  # encoded here, once
            src, offset = classification.SubwordSource(key, tfds_split, vocab.path), 0
            spec.update(vocab=f"sentencepiece_{subword.options_of(cfg).tag}")
        maker = pipeline.Classification(
            src, n, length, offset, int(cfg.seed) if train else None, *layout
        )
        num_steps = None if train else math.ceil(n / B)
        spec.update(max_len=length, fingerprint=store.metadata(key)["fingerprint"])
    else:
        key = store.dataset_key(cfg)
        kind = _vocab_kind(cfg)
        tokens = _Tokens(key, split, kind)
        n = len(tokens())
        spec.update(
            seq_len=T,
            vocab=cfg.vocab if isinstance(kind, str) else f"sentencepiece_{kind.tag}",
            lm_batching=cfg.lm_batching,
            fingerprint=store.metadata(key)["fingerprint"],
        )
        if cfg.lm_batching == "stream":
            L = pipeline.LMStreams.stream_len(n, B, train)
            if (L // T if train else L) < 1:
                raise DataError(
                    f"{_what(cfg)}/{split} has {n:,} tokens: too few for {B} streams of at "
                    f"least seq_len={T} tokens; lower config.data.batch_size or seq_len."
                )
            maker = pipeline.LMStreams(tokens, T, train, *layout)
            num_steps = None if train else math.ceil(L / T)
        elif train:
            if n <= T + 1:
                raise DataError(_too_short(cfg, split, n, T + 2))
            maker = pipeline.LMRandomWindows(tokens, T, int(cfg.seed), *layout)
            num_steps = None
        else:
            windows = pipeline.LMEvalWindows.num_windows(n, T)
            if n < 2:
                raise DataError(_too_short(cfg, split, n, 2))
            maker = pipeline.LMEvalWindows(tokens, T, *layout)
            num_steps = math.ceil(windows / B)
    return pipeline.DataIterator(
        maker, num_steps, spec, num_workers=int(cfg.num_workers), prefetch=int(cfg.prefetch)
    )
