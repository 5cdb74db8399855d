"""Document-pair data: LRA Retrieval (AAN) and an offline stand-in, two byte documents a row.

``aan`` is the Long Range Arena's byte-level document matching task (Tay et al. 2020, §2.4,
"Byte-level document retrieval"): do two papers of the ACL Anthology Network cite one
another? The LRA release ships it as tab-separated files
``new_aan_pairs.{train,eval,test}.tsv`` (``lra_release/tsv_data/``), one pair a line with the
five columns ``label, id1, id2, text1, text2`` (label 0/1). They are found in
``config.data.manual_dir`` (directly, in ``aan/``, ``tsv_data/`` or ``lra_release/tsv_data/``)
or, when downloads are allowed, fetched with TFDS's download manager from the release tarball.

``l10n_pairs`` is **a stand-in, not AAN**, made from data present offline
(``../shared/data/software_l10n/en-de.jsonl.gz``): is the German message the translation of
the English one? Positives are the file's own pairs, negatives pair the English message with
the German side of another pair; which rows are negative and their partners are functions
of sha256 of the strings (no seed). Splits follow ``translation.heldout_split`` on the English
string (``config.data.heldout_fraction``), so an English string never lands in two splits.

Both store ``tokens1``/``tokens2`` (uint8, whole documents) and ``label``; batches
(``PairBatches``) hold ``inputs``/``inputs2`` int32 ``[B, T]`` = byte + 1 (0 = padding,
vocabulary 257, as LRA's byte-level tasks), truncated to ``T = config.data.max_len``
(LRA Retrieval: 4,000 a document), ``targets`` int32 ``[B]`` and ``weights`` float32 ``[B]``.

Legend: B global batch, b per-process batch, T bytes per document.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
from pathlib import Path

import numpy as np
import tensorflow_datasets as tfds

from seqjax.data import classification, pipeline, registry, sources, store, translation
from seqjax.data.corpora import _CorpusBuilder
from seqjax.data.sources import DataError

# config.data.name of the pair data sets -> the file names of their splits (AAN only).
AAN_FILES = {
    "train": "new_aan_pairs.train.tsv",
    "validation": "new_aan_pairs.eval.tsv",
    "test": "new_aan_pairs.test.tsv",
}
AAN_COLUMNS = ("label", "id1", "id2", "text1", "text2")
# The LRA release (Tay et al. 2020), tsv_data/ inside; about 7 GB.
LRA_RELEASE_URL = "https://storage.googleapis.com/long-range-arena/lra_release.gz"
VOCAB_SIZE = 257  # bytes + 1; 0 = padding
NUM_CLASSES = 2


def read_aan_tsv(path) -> list[tuple[bytes, bytes, int]]:
    """``(text1, text2, label)`` of every line of an LRA AAN pair file, in file order.

    Raises:
      DataError: one message naming the file, the line and the missing or bad column.
    """
    rows = []
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip(b"\r\n")
            if not line.strip():
                continue
            cols = line.split(b"\t")
            if len(cols) < len(AAN_COLUMNS):
                k = len(cols)
                raise DataError(
                    f"{path} line {lineno}: column {k + 1} ({AAN_COLUMNS[k]}) is missing: an AAN "
                    f"pair file has {len(AAN_COLUMNS)} tab-separated columns "
                    f"{', '.join(AAN_COLUMNS)}; this line has {k}."
                )
            if len(cols) > len(AAN_COLUMNS):
                raise DataError(
                    f"{path} line {lineno}: {len(cols)} tab-separated columns; an AAN pair file "
                    f"has {len(AAN_COLUMNS)}: {', '.join(AAN_COLUMNS)}."
                )
            try:
                label = float(cols[0])
            except ValueError:
                label = -1.0
            if label not in (0.0, 1.0):
                raise DataError(
                    f"{path} line {lineno}: column 1 (label) is {cols[0][:20]!r}; valid: 0 or 1."
                )
            rows.append((cols[3], cols[4], int(label)))
    if not rows:
        raise DataError(f"{path} has no AAN pairs.")
    return rows


def l10n_pair_splits(pairs, heldout_fraction: float) -> dict[str, list[tuple[bytes, bytes, int]]]:
    """The stand-in's ``(english, german, label)`` rows of each split from translation pairs.

    Within a split the pairs are ordered by ``h = sha256(en \\0 de)``; a row is a true pair
    (label 1) when ``h`` is odd, else its German side is that of the pair
    ``1 + (h >> 1) mod (n - 1)`` places further on (the next one whose English and German
    strings both differ), label 0.
    """
    by_split: dict[str, list] = {"train": [], "validation": [], "test": []}
    for en, de in dict.fromkeys(pairs):  # exact duplicates once
        by_split[translation.heldout_split(en, heldout_fraction)].append((en, de))
    out = {}
    for split, rows in by_split.items():
        keyed = sorted(
            (int.from_bytes(hashlib.sha256(f"{en}\0{de}".encode()).digest()[:8], "big"), en, de)
            for en, de in rows
        )
        n, examples = len(keyed), []
        for i, (h, en, de) in enumerate(keyed):
            if h & 1 or n < 2:
                examples.append((en.encode(), de.encode(), 1))
                continue
            j = (i + 1 + (h >> 1) % (n - 1)) % n
            for _ in range(n):
                if keyed[j][1] != en and keyed[j][2] != de:
                    break
                j = (j + 1) % n
            examples.append((en.encode(), keyed[j][2].encode(), 0))
        out[split] = examples
    return out


class _PairBuilder(_CorpusBuilder, skip_registration=True):
    """Examples ``{'tokens1', 'tokens2': uint8 bytes, 'label'}`` in source order."""

    def _info(self) -> tfds.core.DatasetInfo:
        doc = tfds.features.Tensor(shape=(None,), dtype=np.uint8, encoding="bytes")
        return tfds.core.DatasetInfo(
            builder=self,
            description=self.ABOUT,
            features=tfds.features.FeaturesDict(
                {"tokens1": doc, "tokens2": doc, "label": tfds.features.ClassLabel(num_classes=2)}
            ),
            disable_shuffling=True,  # the pipeline shuffles with its own seed
            metadata=tfds.core.MetadataDict(),
        )

    def _generate_examples(self, rows):
        for key, (a, b, label) in enumerate(rows):
            yield (
                key,
                {
                    "tokens1": np.frombuffer(a, np.uint8),
                    "tokens2": np.frombuffer(b, np.uint8),
                    "label": label,
                },
            )


def find_aan_files(manual_dir, dl_manager=None, download: bool = True) -> dict[str, Path]:
    """The three AAN pair files: from ``manual_dir``, else from the downloaded LRA release."""
    found, searched = {}, []
    if manual_dir:
        root = Path(os.path.expanduser(manual_dir))
        for split, name in AAN_FILES.items():
            for sub in ("", "aan", "tsv_data", "lra_release/tsv_data",
                        "lra_release/lra_release/tsv_data"):  # fmt: skip
                path = root / sub / name
                searched.append(str(path))
                if path.is_file():
                    found[split] = path
                    break
    if len(found) == len(AAN_FILES):
        return found
    if download and dl_manager is not None:
        release = tfds.download.Resource(  # a tar.gz despite its name
            url=LRA_RELEASE_URL, extract_method=tfds.download.ExtractMethod.TAR_GZ
        )
        root = Path(dl_manager.download_and_extract(release))
        for split, name in AAN_FILES.items():
            hits = sorted(root.rglob(name))
            if hits:
                found.setdefault(split, hits[0])
        if len(found) == len(AAN_FILES):
            return found
    missing = [AAN_FILES[s] for s in AAN_FILES if s not in found]
    raise sources.SourceMissingError(
        f"seqjax.data 'aan': the LRA pair file(s) {', '.join(missing)} were not found. Put the "
        f"LRA release's tsv_data/ files in config.data.manual_dir (now {manual_dir!r}) or its "
        f"'aan/' sub-folder; get them from {LRA_RELEASE_URL}."
        + (f" Searched: {', '.join(searched)}." if searched else "")
        + ("" if download else " Downloads are off (config.data.download=False).")
    )


class SeqjaxAan(_PairBuilder):
    """LRA Retrieval: the AAN citation pairs of the LRA release, as bytes."""

    ABOUT = "LRA byte-level document retrieval (AAN citation pairs); label 1 = linked."
    MANUAL_DOWNLOAD_INSTRUCTIONS = "Put new_aan_pairs.{train,eval,test}.tsv in manual_dir."

    def _split_generators(self, dl_manager):
        files = find_aan_files(self._options.manual_dir, dl_manager, self._options.download)
        splits = {split: read_aan_tsv(path) for split, path in files.items()}
        order = [files[s] for s in AAN_FILES]
        self.info.metadata.update(fingerprint=sources.sha256_of_files(order))
        return {k: self._generate_examples(v) for k, v in splits.items()}


@dataclasses.dataclass(eq=False)
class L10nPairsConfig(tfds.core.BuilderConfig):
    """Config of ``seqjax_l10n_pairs``: the JSONL file, its languages and the held-out share."""

    path: str = ""
    source_lang: str = "en"
    target_lang: str = ""
    heldout_fraction: float = 0.01


def l10n_pairs_config(cfg) -> L10nPairsConfig:
    """Checks ``config.data.path`` (a translation JSONL file) and names the builder config."""
    t = translation.translation_jsonl_config(cfg)
    return L10nPairsConfig(
        name=t.name, path=t.path, source_lang=t.source_lang, target_lang=t.target_lang,
        heldout_fraction=t.heldout_fraction, description=t.path,
    )  # fmt: skip


class SeqjaxL10nPairs(_PairBuilder):
    """Stand-in pair task (not AAN): is the second message a translation of the first?"""

    ABOUT = "Translation-pair matching from a JSONL parallel file; 1 = a true pair (stand-in)."

    def _split_generators(self, dl_manager):
        c = self.builder_config
        pairs, _ = translation.read_jsonl(c.path, c.source_lang, c.target_lang)
        splits = l10n_pair_splits(pairs, c.heldout_fraction)
        self.info.metadata.update(
            fingerprint=sources.sha256_of_files([c.path]),
            known_sha256=sources.known_sha256(c.path),
        )
        return {k: self._generate_examples(v) for k, v in splits.items()}


# ---------------------------------------------------------------------------------- batches


class PairBatches(pipeline._Maker):
    """Pair batches from a TFDS source: the ``pipeline.Classification`` order (a seeded
    permutation per epoch for training; each example once, then zero-weight rows, for
    evaluation) with both documents as byte + 1, padded/cut to ``max_len``."""

    def __init__(self, source, size: int, max_len: int, seed, *args):
        super().__init__(*args)
        self.source, self.size, self.max_len, self.seed = source, size, max_len, seed
        self._perm: dict[int, np.ndarray] = {}

    def _index(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.seed is None:
            live = g < self.size
            return np.where(live, g, 0), live
        out = []
        for e, i in zip(*np.divmod(g, self.size)):
            perm = self._perm.get(int(e))
            if perm is None:
                perm = np.random.default_rng([self.seed, 5, int(e)]).permutation(self.size)
                self._perm = {**dict(list(self._perm.items())[-2:]), int(e): perm}
            out.append(perm[i])
        return np.array(out, np.int64), np.ones(len(g), bool)

    def __call__(self, step):
        index, live = self._index(self.rows(step))
        examples = self.source().__getitems__([int(i) for i in index])
        batch = {}
        for field, key in (("inputs", "tokens1"), ("inputs2", "tokens2")):
            x_bT = np.zeros((len(index), self.max_len), np.int32)
            for r, ex in enumerate(examples):
                t = np.asarray(ex[key][: self.max_len], dtype=np.int32)
                x_bT[r, : len(t)] = t + 1
            batch[field] = x_bT * live[:, None]
        labels = np.array([int(ex["label"]) for ex in examples], np.int32)
        return {**batch, "targets": labels * live, "weights": live.astype(np.float32)}


def _key_and_sizes(cfg):
    key = store.dataset_key(cfg)
    splits = store.builder(key).info.splits
    return key, {s: splits[s].num_examples for s in ("train", "validation", "test")}


def info_fields(cfg) -> dict:
    """``DataInfo`` fields of a pair data set (prepares it on first use)."""
    key, sizes = _key_and_sizes(cfg)
    return dict(
        name=cfg.name,
        task="pair_classification",
        vocab_size=VOCAB_SIZE,
        seq_len=classification.max_len(cfg),
        num_classes=NUM_CLASSES,
        pad_id=0,
        fingerprint=store.metadata(key)["fingerprint"],
        split_sizes=sizes,
        encode=classification.imdb_encode,
        decode=classification.imdb_decode,
    )


def maker(cfg, split: str, train: bool, layout: tuple):
    """``(maker, num_steps, spec additions)`` of one split (``seqjax.data.api.make``)."""
    key, sizes = _key_and_sizes(cfg)
    n, max_len = sizes[split], classification.max_len(cfg)
    source = store.Source(key, split)
    made = PairBatches(source, n, max_len, int(cfg.seed) if train else None, *layout)
    num_steps = None if train else math.ceil(n / layout[0])
    return made, num_steps, {"max_len": max_len, "fingerprint": store.metadata(key)["fingerprint"]}


def _heldout_problems(cfg, bad) -> None:
    h = cfg.get("heldout_fraction")
    if not isinstance(h, (int, float)) or isinstance(h, bool) or not 0 < h < 0.5:
        bad("heldout_fraction", h, "a number 0 < heldout_fraction < 0.5")


_PAIRS = dict(kind="pairs", task="pair_classification", info=info_fields, make=maker)
registry.register(registry.DataSet("aan", builder=SeqjaxAan, default_max_len=4000, **_PAIRS))
registry.register(
    registry.DataSet(
        "l10n_pairs",
        builder=SeqjaxL10nPairs,
        builder_config=l10n_pairs_config,
        validate=_heldout_problems,
        default_max_len=128,
        **_PAIRS,
    )
)
