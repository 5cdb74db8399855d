"""Preparing the TFDS data sets on first use and reading them back (`tfds.data_source`).

`dataset_key(cfg)` turns `config.data` into a small hashable, picklable `DatasetKey` (TFDS name,
builder config, data_dir, source options); `source(key, split)` prepares the data set if needed
and returns TFDS's random-access `ArrayRecordDataSource`; `tokens(key, split, vocab)` reads a whole
LM split into memory as token ids (cached per process: enwik8's train split is 90 MB).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import os

import numpy as np
import tensorflow_datasets as tfds

import seqjax.data.images as images
from seqjax.data import (
    classification,
    corpora,
    imagenet64,
    listops,
    retrieval,
    source_stamp,
    sources,
    subword,
    translation,
    wmt14,
)
from seqjax.data import vocab as vocab_lib
from seqjax.data import wikitext as wikitext_lib
from seqjax.data import words as words_lib

# config.data.name -> TFDS builder name (classes in corpora.py and classification.py).
TFDS_NAMES = {
    "pystdlib": "seqjax_pystdlib",
    "text_file": "seqjax_text_file",
    "enwik8": "seqjax_enwik8",
    "text8": "seqjax_text8",
    "listops": "seqjax_listops",
    "imdb_bytes": "seqjax_imdb_bytes",
    "translation_jsonl": "seqjax_translation_jsonl",
    "wmt14_ende": "seqjax_wmt14_ende",
    "fashion_mnist": "seqjax_fashion_mnist",
    "cifar10": "seqjax_cifar10",
    "imagenet64": "seqjax_imagenet64",
    "wikitext103": "seqjax_wikitext103",
    "wikitext2": "seqjax_wikitext2",
    "aan": "seqjax_aan",
    "l10n_pairs": "seqjax_l10n_pairs",
}
_BUILDERS = {
    "seqjax_pystdlib": corpora.SeqjaxPystdlib,
    "seqjax_text_file": corpora.SeqjaxTextFile,
    "seqjax_enwik8": corpora.SeqjaxEnwik8,
    "seqjax_text8": corpora.SeqjaxText8,
    "seqjax_listops": classification.SeqjaxListops,
    "seqjax_imdb_bytes": classification.SeqjaxImdbBytes,
    "seqjax_translation_jsonl": translation.SeqjaxTranslationJsonl,
    "seqjax_wmt14_ende": wmt14.SeqjaxWmt14Ende,
    "seqjax_fashion_mnist": images.SeqjaxFashionMnist,
    "seqjax_cifar10": images.SeqjaxCifar10,
    "seqjax_imagenet64": imagenet64.SeqjaxImagenet64,
    "seqjax_wikitext103": wikitext_lib.SeqjaxWikitext103,
    "seqjax_wikitext2": wikitext_lib.SeqjaxWikitext2,
    "seqjax_aan": retrieval.SeqjaxAan,
    "seqjax_l10n_pairs": retrieval.SeqjaxL10nPairs,
}


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


def data_dir_of(cfg) -> str:
    """`config.data.data_dir` expanded (default `$SEQJAX_TFDS_DIR` or `~/seqjax_data/tfds`)."""
    path = cfg.data_dir or os.environ.get("SEQJAX_TFDS_DIR") or "~/seqjax_data/tfds"
    return os.path.abspath(os.path.expanduser(path))


def listops_spec(cfg) -> listops.ListOpsSpec:
    return listops.ListOpsSpec(
        seed=int(cfg.seed),
        train_size=int(cfg.listops_train_size),
        validation_size=int(cfg.listops_validation_size),
        test_size=int(cfg.listops_test_size),
        min_length=int(cfg.listops_min_length),
        max_length=int(cfg.listops_max_length),
        max_depth=int(cfg.listops_max_depth),
        max_args=int(cfg.listops_max_args),
    )


def dataset_key(cfg) -> DatasetKey:
    """The prepared data set that `config.data` names (checks text_file paths and checksums)."""
    name = cfg.name
    options = corpora.SourceOptions(
        manual_dir=cfg.manual_dir or os.environ.get("SEQJAX_DATA_DIR") or None,
        download=bool(cfg.download),
        accept_checksum_mismatch=bool(cfg.accept_checksum_mismatch),
    )
    if name == "pystdlib":
        config = corpora.pystdlib_config()
    elif name == "text_file":
        config = corpora.text_file_config(
            cfg.path or "", accept_checksum_mismatch=options.accept_checksum_mismatch
        )
    elif name == "listops":
        config = classification.listops_config(listops_spec(cfg), int(cfg.listops_num_procs))
    elif name == "translation_jsonl":
        config = translation.translation_jsonl_config(cfg)
    elif name == "wmt14_ende":
        config = wmt14.wmt14_config(cfg)
    elif name == "l10n_pairs":
        config = retrieval.l10n_pairs_config(cfg)
    elif name in ("pathfinder32", "pathx"):  # the module registers its builders here
        from seqjax.data import pathfinder_data  # noqa: PLC0415 (it imports this module)

        config = pathfinder_data.builder_config(cfg)
    else:
        config = None
    return DatasetKey(
        tfds_name=TFDS_NAMES[name],
        config_name=config.name if config else "",
        data_dir=data_dir_of(cfg),
        options=options,
        config=config,
    )


def _builder_kwargs(key: DatasetKey) -> dict:
    kwargs = {"options": key.options, "file_format": "array_record"}
    if key.config is not None:
        kwargs["config"] = key.config
    return kwargs


@contextlib.contextmanager
def _prepare_lock(data_dir: str, name: str):
    """An exclusive ``flock`` on ``data_dir/.name.lock`` (no-op for non-local paths)."""
    if "://" in str(data_dir):
        yield
        return
    os.makedirs(data_dir, exist_ok=True)
    with open(os.path.join(data_dir, f".{name}.lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


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
            b = _BUILDERS[key.tfds_name](data_dir=key.data_dir, **_builder_kwargs(key))
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
