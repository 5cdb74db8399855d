"""Language-modelling pipelines: determinism, sharding, exact resume, eval coverage, streams."""

from __future__ import annotations

import json
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

import seqjax.data as sd
from seqjax.data import corpora, store


def _take(it, k):
    return [next(it) for _ in range(k)]


def _same(a, b) -> bool:
    return all(all(np.array_equal(x[k], y[k]) for k in x) for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="session")
def shakes_cfg(make_cfg, shakespeare):
    return lambda **kw: make_cfg(**{"name": "text_file", "path": shakespeare, **kw})


@pytest.fixture(scope="session")
def shakes_bytes(shakespeare) -> bytes:
    return Path(shakespeare).read_bytes()


def test_tiny_shakespeare_chars_and_no_tensorflow(shakes_cfg, shakes_bytes):
    info = sd.info(shakes_cfg(vocab="chars"))
    assert info.vocab_size == 65 and info.task == "lm" and info.pad_id is None
    assert info.fingerprint == "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
    n = len(shakes_bytes)
    assert info.split_sizes == {
        "train": int(0.9 * n),
        "validation": int(0.95 * n) - int(0.9 * n),
        "test": n - int(0.95 * n),
    }
    text = "First Citizen:\nBefore we proceed"
    ids = info.encode(text)
    assert ids.dtype == np.int32 and ids.max() < 65 and info.decode(ids) == text
    batch = next(sd.make(shakes_cfg(vocab="chars"), split="train"))
    for row_in, row_tg in zip(batch["inputs"], batch["targets"]):
        window = info.decode(np.concatenate([row_in, row_tg[-1:]]))
        assert window.encode() in shakes_bytes
    assert "tensorflow" not in sys.modules


def test_random_windows_are_deterministic_and_shifted(shakes_cfg, shakes_bytes):
    cfg = shakes_cfg()
    a, b = _take(sd.make(cfg, split="train"), 5), _take(sd.make(cfg, split="train"), 5)
    assert _same(a, b)
    other = _take(sd.make(shakes_cfg(seed=1), split="train"), 5)
    assert not np.array_equal(a[0]["inputs"], other[0]["inputs"])
    train = shakes_bytes[: int(0.9 * len(shakes_bytes))]
    for batch in a:
        assert batch["inputs"].shape == (8, 64) and batch["inputs"].dtype == np.int32
        assert batch["weights"].dtype == np.float32 and (batch["weights"] == 1).all()
        np.testing.assert_array_equal(batch["inputs"][:, 1:], batch["targets"][:, :-1])
        for row_in, row_tg in zip(batch["inputs"], batch["targets"]):
            assert bytes(np.append(row_in, row_tg[-1]).astype(np.uint8)) in train


@pytest.mark.parametrize("lm_batching", ["random", "stream"])
def test_process_shards_form_the_global_batch(shakes_cfg, lm_batching):
    cfg = shakes_cfg(lm_batching=lm_batching)
    whole = _take(sd.make(cfg, split="train"), 3)
    parts = [
        _take(sd.make(cfg, split="train", process_index=p, process_count=2), 3) for p in (0, 1)
    ]
    for s in range(3):
        assert parts[0][s]["inputs"].shape == (4, 64)
        for k in ("inputs", "targets", "weights"):
            joined = np.concatenate([parts[0][s][k], parts[1][s][k]])
            np.testing.assert_array_equal(joined, whole[s][k])
        assert not np.array_equal(parts[0][s]["inputs"], parts[1][s]["inputs"])


@pytest.mark.parametrize("lm_batching", ["random", "stream"])
@pytest.mark.parametrize("process_count", [1, 2])
def test_eval_counts_every_target_once(shakes_cfg, shakes_bytes, lm_batching, process_count):
    cfg = shakes_cfg(lm_batching=lm_batching, batch_size=6, seq_len=100)
    n = len(shakes_bytes)
    val = np.frombuffer(shakes_bytes[int(0.9 * n) : int(0.95 * n)], np.uint8)
    per_process = []
    for p in range(process_count):
        it = sd.make(
            cfg, split="validation", train=False, process_index=p, process_count=process_count
        )
        batches = list(it)
        assert len(batches) == it.num_steps
        with pytest.raises(StopIteration):
            next(it)
        per_process.append(batches)
    steps = {len(b) for b in per_process}
    assert len(steps) == 1  # every process runs the same number of eval steps
    # Global rows: step s holds process 0's rows, then process 1's.
    rows = [
        [
            (b[s]["inputs"][r], b[s]["targets"][r], b[s]["weights"][r])
            for b in per_process
            for r in range(6 // process_count)
        ]
        for s in range(steps.pop())
    ]
    if lm_batching == "stream":  # read stream g through all steps, then stream g + 1
        order = [rows[s][g] for g in range(6) for s in range(len(rows))]
    else:  # window k = global row k
        order = [row for step in rows for row in step]
    inputs = np.concatenate([x[w > 0] for x, _, w in order])
    targets = np.concatenate([t[w > 0] for _, t, w in order])
    for _, _, w in order:  # zero weights only as a suffix (padding)
        k = int(w.sum())
        assert (w[:k] == 1).all() and (w[k:] == 0).all()
    # Every target 1..n-1 of the split exactly once, in order.
    np.testing.assert_array_equal(targets, val[1:])
    np.testing.assert_array_equal(inputs, val[:-1])


def test_streams_continue_row_by_row(shakes_cfg, shakes_bytes):
    cfg = shakes_cfg(lm_batching="stream", batch_size=4, seq_len=50)
    batches = _take(sd.make(cfg, split="train"), 6)
    n_train = int(0.9 * len(shakes_bytes))
    L = (n_train - 1) // 4
    train = np.frombuffer(shakes_bytes[:n_train], np.uint8)
    for r in range(4):
        row = np.concatenate([b["inputs"][r] for b in batches])
        np.testing.assert_array_equal(row, train[r * L : r * L + 300])
        for s in range(5):  # the next step starts with the previous step's last target
            assert batches[s + 1]["inputs"][r, 0] == batches[s]["targets"][r, -1]


@pytest.mark.parametrize(
    "overrides,split,train",
    [
        ({}, "train", True),
        ({"lm_batching": "stream"}, "train", True),
        ({"lm_batching": "stream", "seq_len": 500}, "validation", False),
        ({"vocab": "chars"}, "test", False),
    ],
)
def test_resume_gives_the_uninterrupted_batches(shakes_cfg, overrides, split, train):
    cfg = shakes_cfg(**overrides)
    ref = _take(sd.make(cfg, split=split, train=train), 7)
    it = sd.make(cfg, split=split, train=train)
    _take(it, 3)
    state = json.loads(json.dumps(it.get_state()))  # what a checkpoint stores
    assert state["step"] == 3
    resumed = sd.make(cfg, split=split, train=train)
    resumed.set_state(state)
    assert _same(_take(resumed, 4), ref[3:])


def test_state_from_other_config_is_refused(shakes_cfg):
    it = sd.make(shakes_cfg(), split="train")
    next(it)
    with pytest.raises(ValueError, match="seed"):
        sd.make(shakes_cfg(seed=5), split="train").set_state(it.get_state())


def test_bad_config_errors(shakes_cfg):
    with pytest.raises(ValueError, match="not divisible by process_count=3"):
        sd.make(shakes_cfg(), split="train", process_index=0, process_count=3)
    with pytest.raises(ValueError, match="config.data.name"):
        sd.make(shakes_cfg(name="wikitext"), split="train")
    with pytest.raises(ValueError, match="lm_batching"):
        sd.make(shakes_cfg(lm_batching="contiguous"), split="train")
    with pytest.raises(ValueError, match="split"):
        sd.make(shakes_cfg(), split="valid")


def test_linux_uapi_bytes(make_cfg, shared_data):
    path = shared_data / "linux_uapi" / "linux_uapi_headers.txt"
    cfg = make_cfg(name="text_file", path=str(path))
    info = sd.info(cfg)
    assert info.vocab_size == 256
    assert info.fingerprint == "e70ec253b2badb3b23fc900c58e0909ab0ad0978fdec5958bd63622ef266052d"
    assert sum(info.split_sizes.values()) == 5_492_038
    batch = next(sd.make(cfg, split="test"))
    assert batch["inputs"].max() < 256


def test_pystdlib_is_the_sorted_stdlib(make_cfg):
    cfg = make_cfg(name="pystdlib")
    info = sd.info(cfg)
    files = corpora.stdlib_files()
    assert files and not any("site-packages" in p.parts for p in files)
    rel = [p.relative_to(sysconfig.get_paths()["stdlib"]).as_posix() for p in files]
    assert rel == sorted(rel) and "os.py" in rel
    data, _ = corpora.stdlib_corpus(files)  # as UTF-8 (tests/data/test_pystdlib_text.py)
    assert sum(info.split_sizes.values()) == len(data)
    key = store.dataset_key(cfg)
    train = store.tokens(key, "train", "bytes")
    assert bytes(train) == data[: len(train)]
    assert abs(len(train) / len(data) - 0.9) < 1e-6


def test_workers_give_the_same_batches(shakes_cfg):
    cfg = shakes_cfg()
    ref = _take(sd.make(cfg, split="train"), 6)
    it = sd.make(shakes_cfg(num_workers=2), split="train")
    try:
        got = _take(it, 3)
        state = json.loads(json.dumps(it.get_state()))
        got += _take(it, 3)
    finally:
        it.close()
    assert _same(got, ref)
    single = sd.make(cfg, split="train")  # a multi-worker state restores in one process too
    single.set_state(state)
    assert _same(_take(single, 3), ref[3:])
