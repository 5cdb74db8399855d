"""TFDS builders for the LRA classification tasks: ListOps and byte-level IMDB (Text).

Both store variable-length `tokens` (uint8) and a `label`; padding and truncation to
`config.data.max_len` happen when batches are made, so one prepared data set serves the 1K and 4K
configs. Metadata: `fingerprint` (sha256 of the source tarball for IMDB; of the generated
examples for ListOps).

IMDB as subwords (`config.data.vocab='sentencepiece'`; the BPE input of Linformer §5 / RoBERTa
§4.4, at a smaller vocabulary): a SentencePiece model trained on the **train** reviews' text
(`seqjax.data.subword`: deterministic, stored under the tarball's fingerprint and the options),
and every review of a split encoded once, in batches, into a cache beside the model
(`SubwordReviews`: flat ids + offsets + labels, the same example order as the byte reviews).
Batches read it through `SubwordSource`, a drop-in for the TFDS source (`tokens`, `label`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import logging
import os
import re
import tarfile
import time
import zlib
from collections.abc import Iterator

import numpy as np
import tensorflow_datasets as tfds

from seqjax.data import hf_vocab, listops, pipeline, registry, sources, store, subword
from seqjax.data.corpora import _CorpusBuilder


class _ClassificationBuilder(_CorpusBuilder, skip_registration=True):
    """Variable-length uint8 `tokens` plus a class `label`."""

    NUM_CLASSES = 2
    LABEL_NAMES: tuple[str, ...] | None = None

    def _info(self) -> tfds.core.DatasetInfo:
        label = (
            tfds.features.ClassLabel(names=list(self.LABEL_NAMES))
            if self.LABEL_NAMES
            else tfds.features.ClassLabel(num_classes=self.NUM_CLASSES)
        )
        return tfds.core.DatasetInfo(
            builder=self,
            description=self.ABOUT,
            features=tfds.features.FeaturesDict(
                {
                    # Raw bytes (not TFDS's default int64 list: 8x smaller, 20x faster to write).
                    "tokens": tfds.features.Tensor(shape=(None,), dtype=np.uint8, encoding="bytes"),
                    "label": label,
                }
            ),
            # Examples stay in generation order; the pipeline shuffles with its own seed.
            disable_shuffling=True,
            metadata=tfds.core.MetadataDict(),
        )

    def _generate_examples(self, examples):
        for key, (tokens, label) in enumerate(examples):
            yield key, {"tokens": np.frombuffer(tokens, dtype=np.uint8), "label": label}


# ------------------------------------------------------------------------------------ ListOps


@dataclasses.dataclass(eq=False)
class ListOpsConfig(tfds.core.BuilderConfig):
    """Config of `seqjax_listops` (named by its generator parameters)."""

    spec: listops.ListOpsSpec = dataclasses.field(default_factory=listops.ListOpsSpec)
    num_procs: int = 0


def listops_config(spec: listops.ListOpsSpec, num_procs: int = 0) -> ListOpsConfig:
    return ListOpsConfig(name=spec.name, spec=spec, num_procs=num_procs)


class SeqjaxListops(_ClassificationBuilder):
    """LRA ListOps, generated with a seed (see `seqjax.data.listops`)."""

    ABOUT = "LRA ListOps: nested MIN/MAX/MED/SM over digits, 10 classes, 500 < length < 2000."
    NUM_CLASSES = listops.NUM_CLASSES

    def _split_generators(self, dl_manager):
        spec = self.builder_config.spec
        splits = listops.generate(spec, num_procs=self.builder_config.num_procs)
        digest = hashlib.sha256(spec.name.encode())
        for split in ("train", "validation", "test"):
            for tokens, label in splits[split]:
                digest.update(len(tokens).to_bytes(4, "little") + tokens + bytes([label]))
        self.info.metadata.update(fingerprint=digest.hexdigest())
        return {k: self._generate_examples(v) for k, v in splits.items()}


# -------------------------------------------------------------------------------- IMDB (bytes)


def _tar_gz_files(path) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of the regular files in a .tar.gz.

    Plain ustar archives (like aclImdb) are read by a small header parser, 3x faster than
    `tarfile` on 50k small members; anything else (long names, pax headers) goes to `tarfile`.
    """
    with open(path, "rb") as f:
        data = zlib.decompress(f.read(), 16 + zlib.MAX_WBITS)
    files, pos = [], 0
    while pos + 512 <= len(data) and data[pos : pos + 512].strip(b"\0"):
        header = data[pos : pos + 512]
        kind = header[156:157]
        if kind not in (b"0", b"\0", b"5") or header[257:262] != b"ustar":
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
                yield from ((m.name, tar.extractfile(m).read()) for m in tar if m.isfile())
            return
        name = header[:100].split(b"\0", 1)[0]
        prefix = header[345:500].split(b"\0", 1)[0]
        name = (prefix + b"/" + name if prefix else name).decode("utf-8")
        size = int(header[124:136].split(b"\0", 1)[0].strip() or b"0", 8)
        if kind != b"5":
            files.append((name, data[pos + 512 : pos + 512 + size]))
        pos += 512 + -(-size // 512) * 512
    yield from files


_IMDB_MEMBER = re.compile(r"(?:^|/)aclImdb/(train|test)/(pos|neg)/[^/]+\.txt$")


class SeqjaxImdbBytes(_ClassificationBuilder):
    """IMDB reviews (Maas et al. 2011) as raw bytes: LRA's byte-level Text task."""

    ABOUT = "aclImdb v1 reviews as raw UTF-8 bytes; label 0 = neg, 1 = pos; 25k train / 25k test."
    LABEL_NAMES = ("neg", "pos")
    MANUAL_DOWNLOAD_INSTRUCTIONS = "Put aclImdb_v1.tar.gz in config.data.manual_dir."
    VERSION = tfds.core.Version("1.1.0")
    RELEASE_NOTES = {
        "1.0.0": "First seqjax release (reviews sorted by member name: all neg, then all pos).",
        "1.1.0": "Reviews in a fixed pseudo-random order (sha256 of the member name), so any "
        "prefix of an evaluation pass is a fair sample of both labels.",
    }

    def _split_generators(self, dl_manager):
        path = sources.find_source(
            ["aclImdb_v1_labeled.tar.gz", "aclImdb_v1.tar.gz"],
            dataset="imdb",
            manual_dir=self._options.manual_dir,
            dl_manager=dl_manager,
            download=self._options.download,
        )
        digest = sources.check_sha256(path, accept_mismatch=self._options.accept_checksum_mismatch)
        splits: dict[str, list[tuple[str, bytes, int]]] = {"train": [], "test": []}
        try:
            for name, text in _tar_gz_files(path):
                m = _IMDB_MEMBER.search(name)
                if m:
                    splits[m.group(1)].append((name, text, int(m.group(2) == "pos")))
        except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
            raise sources.ChecksumMismatchError(
                f"seqjax.data 'imdb_bytes': cannot read {path}: {e}. The tarball is corrupt; get "
                f"it again from {sources.KNOWN_SOURCES['aclImdb_v1.tar.gz'].url}."
            ) from e
        for split, examples in splits.items():
            if not examples:
                raise sources.SourceMissingError(
                    f"seqjax.data 'imdb_bytes': {path} has no aclImdb/{split}/{{pos,neg}}/*.txt "
                    "reviews; it is not the aclImdb v1 tarball."
                )
            # A fixed shuffle, independent of the tarball's member order: by sha256 of the
            # member name. Sorting by name would put every 'neg' review before every 'pos'
            # one, so a partial evaluation (eval.max_batches) would read one label only.
            examples.sort(key=lambda ex: (hashlib.sha256(ex[0].encode()).digest(), ex[0]))
        self.info.metadata.update(fingerprint=digest, known_sha256=sources.known_sha256(path))
        return {
            k: self._generate_examples([(text, label) for _, text, label in v])
            for k, v in splits.items()
        }


# ------------------------------------------------------------------------ IMDB (subwords)

_ENCODE_CHUNK = 2000  # reviews per SentencePiece batch call (bounds the Python lists' memory)


def _review_text(tokens) -> str:
    return bytes(np.asarray(tokens, np.uint8)).decode("utf-8", errors="replace")


def _split_reviews(key, split: str) -> tuple[list[str], np.ndarray]:
    """(texts, labels `[N]`) of a prepared `imdb_bytes` split, in the byte reviews' order."""

    src = store.source(key, split)
    try:
        examples = src.__getitems__(list(range(len(src))))
    except Exception as e:  # array_record errors of damaged files
        raise store.corrupt_cache_error(key, e) from e
    texts = [_review_text(ex["tokens"]) for ex in examples]
    return texts, np.array([int(ex["label"]) for ex in examples], np.uint8)


def imdb_vocab(cfg, key) -> subword.SentencePieceVocab:
    """The SentencePiece model of the IMDB train reviews for `config.data` (trained on first
    use, one review a sentence; `subword.model_path` keyed by the tarball's fingerprint and
    the `spm_*`/`vocab_size` options, so pre-training and fine-tuning share the file)."""

    opts = subword.options_of(cfg)
    fingerprint = store.metadata(key)["fingerprint"]
    path = subword.model_path(key.data_dir, key.tfds_name, key.config_name, fingerprint, opts)
    return subword.SentencePieceVocab(
        subword.ensure_model(path, lambda: _split_reviews(key, "train")[0], opts)
    )


@dataclasses.dataclass(frozen=True)
class SubwordReviews:
    """One split's reviews as SentencePiece ids, read like a TFDS source.

    Attributes:
      ids_N: every review's ids, concatenated (uint16/uint32; no BOS/EOS, never 0).
      offsets_R1: review r is `ids_N[offsets_R1[r]:offsets_R1[r + 1]]` (int64 `[R + 1]`).
      labels_R: 0 = neg, 1 = pos (uint8 `[R]`).
    """

    ids_N: np.ndarray
    offsets_R1: np.ndarray
    labels_R: np.ndarray

    def __len__(self) -> int:
        return len(self.labels_R)

    def __getitem__(self, r: int) -> dict:
        return {"tokens": self.ids_N[self.offsets_R1[r] : self.offsets_R1[r + 1]],
                "label": int(self.labels_R[r])}  # fmt: skip

    def __getitems__(self, rows) -> list[dict]:
        return [self[int(r)] for r in rows]

    def lengths(self) -> np.ndarray:
        """Tokens of each review `[R]` (untruncated)."""
        return np.diff(self.offsets_R1)


def encode_reviews(vocab: subword.SentencePieceVocab, texts, labels) -> SubwordReviews:
    """Encodes `texts` with `vocab` in batches of `_ENCODE_CHUNK` (SentencePiece's list API)."""
    parts, lengths = [], []
    for i in range(0, len(texts), _ENCODE_CHUNK):
        for ids in vocab.encode_many(texts[i : i + _ENCODE_CHUNK]):
            parts.append(np.asarray(ids, vocab.dtype))
            lengths.append(len(ids))
    offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
    ids = np.concatenate(parts) if parts else np.zeros(0, vocab.dtype)
    return SubwordReviews(ids, offsets, np.asarray(labels, np.uint8))


def encoded_path(vocab, split: str, key=None) -> str:
    """The split's encoded reviews beside the model, named by the builder version (which
    fixes the review order) and the model's sha256 (a retrained model re-encodes); a Hugging
    Face tokenizer's (`hf_vocab.HFVocab`) under the data_dir, by the tokenizer's sha256."""
    if isinstance(vocab, hf_vocab.HFVocab):
        stem = os.path.join(key.data_dir, "seqjax_hf_encoded", key.tfds_name, "reviews")
        os.makedirs(os.path.dirname(stem), exist_ok=True)
    else:
        stem = vocab.path.removesuffix(".model")
    return f"{stem}.{split}-v{SeqjaxImdbBytes.VERSION}-{vocab.fingerprint[:12]}.npz"


def hf_pad_id(vocab) -> int:
    """The padding of reviews in a Hugging Face tokenizer's ids: its pad id (RoBERTa's 1,
    BERT's 0), 0 when it names none."""
    return 0 if vocab.pad_id is None else int(vocab.pad_id)


def _vocab_of(model_file: str):
    """A SentencePiece model file, or `hf:<folder>` (a Hugging Face tokenizer)."""
    if hf_vocab.is_hf(model_file):
        return hf_vocab.HFVocab(model_file[len(hf_vocab.PREFIX) :])
    return subword.SentencePieceVocab(model_file)


@functools.lru_cache(maxsize=4)
def load_reviews(key, split: str, model_file: str) -> SubwordReviews:
    """A split's `SubwordReviews` (encoded and written on first use; read once per process);
    `model_file` a SentencePiece model or `hf:<folder>`."""

    vocab = _vocab_of(model_file)
    path = encoded_path(vocab, split, key)
    if not os.path.isfile(path):
        with sources.prepare_lock(os.path.dirname(path), "sentencepiece_encode"):
            if not os.path.isfile(path):
                t0 = time.perf_counter()
                texts, labels = _split_reviews(key, split)
                reviews = encode_reviews(vocab, texts, labels)
                logging.info("imdb_bytes/%s: %d reviews encoded with %s in %.1f s", split,
                             len(texts), os.path.basename(model_file.rstrip("/")),
                             time.perf_counter() - t0)  # fmt: skip
                tmp = f"{path}.tmp{os.getpid()}.npz"
                np.savez(tmp, ids=reviews.ids_N, offsets=reviews.offsets_R1,
                         labels=reviews.labels_R)  # fmt: skip
                os.replace(tmp, path)  # readers never see a partial file
    with np.load(path) as f:
        reviews = SubwordReviews(f["ids"], f["offsets"], f["labels"])
    for a in (reviews.ids_N, reviews.offsets_R1, reviews.labels_R):
        a.setflags(write=False)
    return reviews


class SubwordSource:
    """Picklable lazy handle on a split's `SubwordReviews` (`store.Source`'s counterpart)."""

    def __init__(self, key, split: str, model_file: str):
        self.key, self.split, self.model_file = key, split, model_file

    def __call__(self) -> SubwordReviews:
        return load_reviews(self.key, self.split, self.model_file)


# ------------------------------------------------- the registered data sets (LRA ListOps, Text)


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


def _tfds_split(cfg, split: str) -> str:
    # LRA evaluates Text on the test set; aclImdb has no validation split.
    return "test" if cfg.name == "imdb_bytes" and split == "validation" else split


def imdb_encode(text: str) -> np.ndarray:
    """LRA Text ids: UTF-8 byte + 1 (0 is padding)."""
    return np.frombuffer(text.encode("utf-8"), np.uint8).astype(np.int32) + 1


def imdb_decode(ids) -> str:
    ids = np.asarray(ids).reshape(-1)
    return bytes((ids[ids > 0] - 1).astype(np.uint8).tolist()).decode("utf-8", errors="replace")


def max_len(cfg) -> int:
    """The input length: `config.data.max_len`, else the data set's LRA default."""
    return int(cfg.max_len) if cfg.max_len else int(registry.get(cfg.name).default_max_len)


def _info(cfg) -> dict:
    key = store.dataset_key(cfg)
    splits = store.builder(key).info.splits
    fields = dict(name=cfg.name, fingerprint=store.metadata(key)["fingerprint"])
    if cfg.name == "listops":  # 16 tokens, 10 classes
        vocab_size, enc, dec = listops.VOCAB_SIZE, listops.encode, listops.decode
    elif cfg.vocab == "sentencepiece":  # imdb_bytes as subwords
        vocab = imdb_vocab(cfg, key)
        vocab_size, enc, dec = vocab.size, vocab.encode, vocab.decode
        fields.update(subword.spm_fields(vocab))
    elif hf_vocab.is_hf(cfg.vocab):  # a warm start's tokenizer, padded with its pad id
        vocab = _vocab_of(cfg.vocab)
        vocab_size, enc, dec = vocab.size, vocab.encode, vocab.decode
        fields.update(pad_id=hf_pad_id(vocab))
    else:  # bytes + 1 (257 ids)
        vocab_size, enc, dec = 257, imdb_encode, imdb_decode
    return dict(
        task="classification",
        vocab_size=vocab_size,
        seq_len=max_len(cfg),
        num_classes=listops.NUM_CLASSES if cfg.name == "listops" else 2,
        pad_id=fields.pop("pad_id", 0),
        split_sizes={
            s: splits[_tfds_split(cfg, s)].num_examples for s in ("train", "validation", "test")
        },
        encode=enc,
        decode=dec,
        **fields,
    )


def _make(cfg, split: str, train: bool, layout: tuple):
    key = store.dataset_key(cfg)
    tfds_split = _tfds_split(cfg, split)
    n = store.builder(key).info.splits[tfds_split].num_examples
    length = max_len(cfg)
    offset = 1 if cfg.name == "imdb_bytes" else 0
    src = store.Source(key, tfds_split)
    spec = {}
    if cfg.vocab == "sentencepiece":  # imdb_bytes as subwords
        vocab = imdb_vocab(cfg, key)
        load_reviews(key, tfds_split, vocab.path)  # encoded here, once
        src, offset = SubwordSource(key, tfds_split, vocab.path), 0
        spec.update(vocab=f"sentencepiece_{subword.options_of(cfg).tag}")
    pad = 0
    if hf_vocab.is_hf(cfg.vocab):  # a Hugging Face tokenizer, likewise (its pad id)
        vocab = _vocab_of(cfg.vocab)
        load_reviews(key, tfds_split, cfg.vocab)
        src, offset, pad = SubwordSource(key, tfds_split, cfg.vocab), 0, hf_pad_id(vocab)
        spec.update(vocab=vocab.tag)
    maker = pipeline.Classification(
        src, n, length, offset, int(cfg.seed) if train else None, *layout, pad_id=pad
    )
    num_steps = None if train else -(-n // layout[0])
    spec.update(max_len=length, fingerprint=store.metadata(key)["fingerprint"])
    return maker, num_steps, spec


registry.register(
    registry.DataSet(
        "listops",
        kind="texts",
        task="classification",
        info=_info,
        make=_make,
        builder=SeqjaxListops,
        builder_config=lambda cfg: listops_config(listops_spec(cfg), int(cfg.listops_num_procs)),
        default_max_len=2048,  # LRA: ListOps sequences are < 2,000 tokens
    )
)
registry.register(
    registry.DataSet(
        "imdb_bytes",
        kind="texts",
        task="classification",
        info=_info,
        make=_make,
        vocabs=("bytes", "sentencepiece", "hf"),
        builder=SeqjaxImdbBytes,
        default_max_len=4096,  # LRA Text 4K (1K: config.data.max_len=1024)
        subword_options=True,
    )
)
