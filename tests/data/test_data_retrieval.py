"""Pair data: LRA Retrieval's AAN files (written here in the release's format) and the
offline l10n_pairs stand-in (real software_l10n pairs)."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

import seqjax.data as sd
from seqjax.data import retrieval, translation
from seqjax.data.sources import DataError, SourceMissingError


def _doc(rng, n) -> bytes:
    return bytes(rng.integers(32, 127, size=n, dtype=np.uint8))


@pytest.fixture(scope="module")
def aan_dir(tmp_path_factory):
    """Small files named and laid out as the LRA release's tsv_data/ (label, id1, id2, t1, t2)."""
    root = tmp_path_factory.mktemp("lra") / "lra_release" / "tsv_data"
    root.mkdir(parents=True)
    rng = np.random.default_rng(0)
    rows = {}
    for split, n in (("train", 12), ("validation", 5), ("test", 7)):
        rows[split] = []
        lines = []
        for i in range(n):
            a, b = _doc(rng, int(rng.integers(5, 40))), _doc(rng, int(rng.integers(5, 40)))
            label = int(rng.integers(0, 2))
            rows[split].append((a, b, label))
            lines.append(b"\t".join([f"{label}".encode(), b"id%d" % i, b"id%dx" % i, a, b]))
        (root / retrieval.AAN_FILES[split]).write_bytes(b"\n".join(lines) + b"\n")
    return root.parent.parent, rows


def test_aan_batches_are_the_files_bytes_plus_one(make_cfg, aan_dir):
    manual, rows = aan_dir
    cfg = make_cfg(name="aan", max_len=24, batch_size=4, manual_dir=str(manual))
    info = sd.info(cfg)
    assert (info.task, info.vocab_size, info.num_classes, info.pad_id) == (
        "pair_classification", 257, 2, 0)  # fmt: skip
    assert info.split_sizes == {"train": 12, "validation": 5, "test": 7}
    it = sd.make(cfg, split="test", train=False)
    batches = list(it)
    assert len(batches) == 2 and it.num_steps == 2
    got = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
    assert got["inputs"].shape == got["inputs2"].shape == (8, 24)
    assert got["inputs"].dtype == np.int32 and got["targets"].dtype == np.int32
    np.testing.assert_array_equal(got["weights"], [1] * 7 + [0])
    for r, (a, b, label) in enumerate(rows["test"]):
        for field, doc in (("inputs", a), ("inputs2", b)):
            want = np.zeros(24, np.int32)
            t = np.frombuffer(doc[:24], np.uint8).astype(np.int32) + 1
            want[: len(t)] = t
            np.testing.assert_array_equal(got[field][r], want)
        assert got["targets"][r] == label
    assert not got["inputs"][7].any() and got["targets"][7] == 0
    # training: seeded, a permutation of the split each epoch
    tr = [next(sd.make(cfg, split="train")) for _ in range(2)]
    np.testing.assert_array_equal(tr[0]["inputs"], tr[1]["inputs"])
    epoch = np.concatenate([b["targets"] for b in _take(sd.make(cfg, split="train"), 3)])
    assert sorted(epoch.tolist()) == sorted(label for *_, label in rows["train"])


def _take(it, k):
    return [next(it) for _ in range(k)]


@pytest.mark.parametrize(
    "line, column",
    [(b"1\tid1\tid2\tabc", "column 5 (text2)"), (b"1\tid1", "column 3 (id2)"),
     (b"maybe\tid1\tid2\tx\ty", "column 1 (label)")],
)  # fmt: skip
def test_aan_bad_line_names_file_line_and_column(tmp_path, line, column):
    path = tmp_path / "new_aan_pairs.train.tsv"
    path.write_bytes(b"0\ta\tb\tdoc one\tdoc two\n" + line + b"\n")
    with pytest.raises(DataError) as e:
        retrieval.read_aan_tsv(path)
    msg = str(e.value)
    assert str(path) in msg and "line 2" in msg and column in msg


def test_aan_missing_files_name_what_and_where(make_cfg, tmp_path):
    cfg = make_cfg(name="aan", manual_dir=str(tmp_path), download=False)
    cfg.data_dir = str(tmp_path / "tfds")  # not the session folder where aan is prepared
    with pytest.raises(SourceMissingError, match=r"new_aan_pairs\.train\.tsv.*manual_dir"):
        sd.info(cfg)


def test_l10n_pairs_are_true_or_mismatched_translations(shared_data):
    path = shared_data / "software_l10n" / "en-de.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = [line for _, line in zip(range(3000), f)]
    pairs = [(o["en"], o["de"]) for o in map(json.loads, lines)]
    true = set(pairs)
    splits = retrieval.l10n_pair_splits(pairs, 0.05)
    assert splits == retrieval.l10n_pair_splits(pairs, 0.05)  # deterministic
    n = sum(len(v) for v in splits.values())
    assert n == len(true)
    for split, rows in splits.items():
        for en, de, label in rows:
            assert translation.heldout_split(en.decode(), 0.05) == split
            assert ((en.decode(), de.decode()) in true) == bool(label)
    labels = [lab for rows in splits.values() for *_, lab in rows]
    assert 0.45 < np.mean(labels) < 0.55  # about half positive


def test_l10n_pairs_end_to_end(make_cfg, shared_data, tmp_path):
    # a 1,500-line slice: the builder reads the JSONL file of config.data.path
    src = shared_data / "software_l10n" / "en-de.jsonl.gz"
    path = tmp_path / "slice.jsonl.gz"
    with gzip.open(src, "rt", encoding="utf-8") as f:
        lines = [line for _, line in zip(range(1500), f)]
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines(lines)
    cfg = make_cfg(name="l10n_pairs", path=str(path), heldout_fraction=0.1, batch_size=8)
    info = sd.info(cfg)
    assert info.task == "pair_classification" and info.seq_len == 128
    assert sum(info.split_sizes.values()) > 1400 and info.split_sizes["test"] > 80
    b = next(sd.make(cfg, split="validation", train=False))
    assert b["inputs"].shape == b["inputs2"].shape == (8, 128)
    assert set(np.unique(b["targets"])) <= {0, 1}
    bad = make_cfg(name="l10n_pairs", path=str(path), heldout_fraction=0.7)
    with pytest.raises(DataError, match=r"config.data.heldout_fraction=0.7"):
        sd.info(bad)


def test_aan_files_from_the_download_manager(aan_dir, tmp_path):
    """Without a manual dir the release is fetched (TFDS download manager) and searched."""
    manual, _ = aan_dir
    asked = []

    class FakeDownloads:
        def download_and_extract(self, resource):
            asked.append(resource)
            return str(manual)  # the extracted release: lra_release/tsv_data/...

    found = retrieval.find_aan_files(None, FakeDownloads(), download=True)
    assert sorted(found) == ["test", "train", "validation"]
    assert found["validation"].name == "new_aan_pairs.eval.tsv"
    assert asked[0].url == retrieval.LRA_RELEASE_URL
    with pytest.raises(SourceMissingError, match="Downloads are off"):
        retrieval.find_aan_files(str(tmp_path), FakeDownloads(), download=False)
