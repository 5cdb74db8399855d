"""Preparing the TFDS data sets on first use and reading them back (`tfds.data_source`).

`dataset_key(cfg)` turns `config.data` into a small hashable, picklable `DatasetKey` (TFDS name,
builder config, data_dir, source options); `source(key, split)` prepares the data set if needed
and returns TFDS's random-access `ArrayRecordDataSource`; `tokens(key, split, vocab)` reads a whole
LM split into memory as token ids (cached per process: enwik8's train split is 90 MB).
"""

from __future__ import annotations

import dataclasses
import functools
import os

import numpy as np
import tensorflow_datasets as tfds

from seqjax.data import corpora, hf_vocab, registry, source_stamp, sources, subword
from seqjax.data import vocab as vocab_lib
from seqjax.data import words as words_lib


@dataclasses.dataclass(frozen=True)
class DatasetKey:
    """Identifies one prepared TFDS data set (hashable; compares by names, not objects)."""

    tfds_name: str
    config_name: str
    data_dir: str
    options: corpora.SourceOptions
    config: tfds.core.BuilderConfig | None = dataclasses.field(
        default=None, compare=False, hash=False
    )
    builder_cls: type | None = dataclasses.field(default=None, compare=False, hash=False)


def data_dir_of(cfg) -> str:
    """`config.data.data_dir` expanded (default `$SEQJAX_TFDS_DIR` or `~/seqjax_data/tfds`)."""
    path = cfg.data_dir or os.environ.get("SEQJAX_TFDS_DIR") or "~/seqjax_data/tfds"
    return os.path.abspath(os.path.expanduser(path))


def dataset_key(cfg) -> DatasetKey:
    """The prepared data set that `config.data` names (its `DataSet.builder_config` checks
    e.g. text_file paths and checksums)."""
    ds = registry.get(cfg.name)
    options = corpora.SourceOptions(
        manual_dir=cfg.manual_dir or os.environ.get("SEQJAX_DATA_DIR") or None,
        download=bool(cfg.download),
        accept_checksum_mismatch=bool(cfg.accept_checksum_mismatch),
    )
    config = ds.builder_config(cfg) if ds.builder_config else None
    return DatasetKey(
        tfds_name=ds.tfds_name,
        config_name=config.name if config else "",
        data_dir=data_dir_of(cfg),
        options=options,
        config=config,
        builder_cls=ds.builder,
    )


class Source:
    """Picklable lazy handle on one split's TFDS data source (grain workers open it)."""

    def __init__(self, key: DatasetKey, split: str):
        self.key, self.split = key, split

    def __call__(self):
        return source(self.key, self.split)


def _builder_kwargs(key: DatasetKey) -> dict:
    kwargs = {"options": key.options, "file_format": "array_record"}
    if key.config is not None:
        kwargs["config"] = key.config
    return kwargs


_prepare_lock = sources.prepare_lock  # (the name classification.py and older code use)


@functools.lru_cache(maxsize=32)
def builder(key: DatasetKey) -> tfds.core.DatasetBuilder:
    """The builder of `key`, prepared into `key.data_dir` on first use (array_record files)."""
    # Several processes (local multi-process runs, hosts sharing a filesystem) may reach
    # this at once: the first prepares, the others wait for it and then reuse its files
    # (the builder is created under the lock so that it reads the finished dataset's info).
    with _prepare_lock(key.data_dir, key.tfds_name):
        existed = os.path.isdir(_prepared_dir(key))
        stamp = source_stamp.stamp_path(key.data_dir, key.tfds_name, key.config_name)
        if existed:  # reused by name: a manual_dir with another archive is named
            source_stamp.check(stamp, key.options.manual_dir, _prepared_dir(key))
        try:
            b = key.builder_cls(data_dir=key.data_dir, **_builder_kwargs(key))
            with sources.recording() as found:
                b.download_and_prepare(
                    download_config=tfds.download.DownloadConfig(manual_dir=key.options.manual_dir)
                )
            if not existed:
                source_stamp.write(stamp, found)
            meta = dict(b.info.metadata)  # read lazily: a damaged metadata.json fails here
        except (sources.DataError, sources.SourceMissingError, sources.ChecksumMismatchError):
            raise
        except Exception as e:  # a damaged dataset_info.json / metadata.json of a prepared set
            if not existed:
                raise
            raise corrupt_cache_error(key, e) from e
    sources.check_prepared(
        meta,
        dataset=key.tfds_name.removeprefix("seqjax_"),
        accept_mismatch=key.options.accept_checksum_mismatch,
        where=str(b.data_dir),
    )
    return b


def metadata(key: DatasetKey) -> dict:
    """The builder's recorded metadata (`fingerprint`, `num_bytes`, `char_vocab`, ...)."""
    return dict(builder(key).info.metadata)


@functools.lru_cache(maxsize=32)
def source(key: DatasetKey, split: str):
    """TFDS random-access data source of one split (`tfds.data_source`, no TensorFlow)."""
    builder(key)  # prepared once per process, and the same object answers `metadata`
    return tfds.data_source(
        key.tfds_name,
        split=split,
        data_dir=key.data_dir,
        download=False,
        builder_kwargs=_builder_kwargs(key),
    )


def vocab(key: DatasetKey, kind):
    """The vocabulary of an LM corpus: kind 'bytes', 'chars' or a `subword.SpmOptions`.

    A SentencePiece model is trained on the training split's lines on first use and stored
    beside the prepared files (`subword.model_path`).
    """
    if kind == "bytes":
        return vocab_lib.Vocab("bytes")
    if hf_vocab.is_hf(kind):  # config.data.vocab='hf:<folder>' (a warm start's tokenizer)
        return hf_vocab.HFVocab(kind[len(hf_vocab.PREFIX) :])
    if isinstance(kind, subword.SpmOptions):
        path = subword.model_path(
            key.data_dir, key.tfds_name, key.config_name, metadata(key)["fingerprint"], kind
        )

        def lines():
            text = bytes(tokens(key, "train", "bytes")).decode("utf-8", errors="replace")
            return text.splitlines(keepends=True)

        return subword.SentencePieceVocab(subword.ensure_model(path, lines, kind))
    if isinstance(kind, words_lib.WordOptions):  # config.data.vocab='words'
        path = words_lib.vocab_path(
            key.data_dir, key.tfds_name, key.config_name, metadata(key)["fingerprint"], kind
        )

        def train_text():
            return bytes(tokens(key, "train", "bytes")).decode("utf-8", errors="replace")

        return words_lib.ensure_vocab(path, train_text, kind)
    meta = metadata(key)
    return vocab_lib.Vocab("chars", tuple(meta["char_vocab"]), bool(meta["char_unk"]))


def _prepared_dir(key: DatasetKey) -> str:
    """The folder of `key`'s prepared files (`data_dir/name/config/version`)."""
    parts = [key.data_dir, key.tfds_name] + ([key.config_name] if key.config_name else [])
    return os.path.join(*parts)


def corrupt_cache_error(key: DatasetKey, e: BaseException) -> sources.DataError:
    """A `DataError` naming the prepared folder to delete when its files cannot be read."""
    first = (str(e).strip().splitlines() or [""])[0][:300]
    return sources.DataError(
        f"the prepared data in {_prepared_dir(key)} cannot be read ({type(e).__name__}: "
        f"{first}); the cache is corrupt or incomplete: delete that folder and rerun to "
        "prepare it again from the source."
    )


@functools.lru_cache(maxsize=6)
def tokens(key: DatasetKey, split: str, kind) -> np.ndarray:
    """A whole LM split as token ids `[n]` (uint8 bytes, uint16 chars/subwords; see `vocab`)."""
    src = source(key, split)
    try:
        records = src.__getitems__(list(range(len(src))))
    except Exception as e:  # array_record/Riegeli errors of damaged files
        raise corrupt_cache_error(key, e) from e
    records.sort(key=lambda r: int(r["index"]))
    data = np.concatenate([np.asarray(r["bytes"], dtype=np.uint8) for r in records])
    ids = vocab(key, kind).ids_from_bytes(data)
    ids.setflags(write=False)
    return ids
