"""LRA ListOps and byte-level IMDB, and the Reformer duplication task."""

from __future__ import annotations

import dataclasses
import json
import statistics

import numpy as np
import pytest

import seqjax.data as sd
from seqjax.data import listops, store

SMALL = {"listops_train_size": 240, "listops_validation_size": 40, "listops_test_size": 40}


def evaluate(text: str) -> tuple[int, int, list[int]]:
    """Independent ListOps evaluator: (value, operator depth, argument counts) of `[MAX 2 9 ]`."""
    ops = {
        "[MIN": min,
        "[MAX": max,
        "[MED": lambda a: int(statistics.median(a)),
        "[SM": lambda a: sum(a) % 10,
    }
    stack: list[list] = [[None]]
    depth = max_depth = 0
    arg_counts = []
    for tok in text.split():
        if tok in ops:
            stack.append([tok])
            depth += 1
            max_depth = max(max_depth, depth)
        elif tok == "]":
            op, *args = stack.pop()
            arg_counts.append(len(args))
            stack[-1].append(ops[op](args))
            depth -= 1
        else:
            stack[-1].append(int(tok))
    assert len(stack) == 1 and len(stack[0]) == 2, "unbalanced tree"
    return stack[0][1], max_depth, arg_counts


@pytest.fixture(scope="session")
def listops_cfg(make_cfg):
    return lambda **kw: make_cfg(**{"name": "listops", "listops_num_procs": 1, **SMALL, **kw})


def test_listops_labels_lengths_dedup(listops_cfg):
    cfg = listops_cfg(batch_size=50)
    info = sd.info(cfg)
    assert (info.num_classes, info.vocab_size, info.pad_id) == (10, 16, 0)
    assert info.split_sizes == {"train": 240, "validation": 40, "test": 40}
    seen = set()
    labels = []
    for split in ("train", "validation", "test"):
        for batch in sd.make(cfg, split=split, train=False):
            for x, y, w in zip(batch["inputs"], batch["targets"], batch["weights"]):
                if w == 0:
                    assert not x.any()
                    continue
                n = int((x > 0).sum())
                assert (x[:n] > 0).all() and not x[n:].any()  # tokens then padding
                assert 500 < n < 2000
                value, depth, arg_counts = evaluate(info.decode(x))
                assert value == y
                assert 1 <= depth <= 9 and all(2 <= a <= 10 for a in arg_counts)
                seen.add(x[:n].tobytes())
                labels.append(int(y))
    assert len(seen) == 320  # no duplicates within or across splits
    assert len(set(labels)) == 10  # all classes occur


def test_listops_generation_is_seeded_and_parallel_safe():
    spec = listops.ListOpsSpec(train_size=100, validation_size=10, test_size=10, seed=3)
    one = listops.generate(spec, num_procs=1, job_size=15)
    two = listops.generate(spec, num_procs=2, job_size=15)  # 9 jobs in 2 processes
    assert one == two
    other = listops.generate(dataclasses.replace(spec, seed=4), num_procs=1, job_size=15)
    assert one["train"] != other["train"]


def test_listops_training_epochs_and_shards(listops_cfg):
    cfg = listops_cfg(batch_size=48)  # 240 = 5 steps of 48: one epoch
    parts = []
    for p in (0, 1):
        it = sd.make(cfg, split="train", process_index=p, process_count=2)
        parts.append([next(it) for _ in range(10)])
    epoch1 = [
        b["inputs"][r].tobytes()
        for s in range(5)
        for b in (parts[0][s], parts[1][s])
        for r in range(24)
    ]
    epoch2 = [
        b["inputs"][r].tobytes()
        for s in range(5, 10)
        for b in (parts[0][s], parts[1][s])
        for r in range(24)
    ]
    assert len(set(epoch1)) == 240 and set(epoch1) == set(epoch2)  # each epoch: every example
    assert epoch1 != epoch2  # reshuffled per epoch
    p0 = {x for b in parts[0][:5] for x in map(bytes, b["inputs"])}
    p1 = {x for b in parts[1][:5] for x in map(bytes, b["inputs"])}
    assert not p0 & p1  # disjoint shards that together cover the epoch


def test_listops_resume(listops_cfg):
    cfg = listops_cfg(batch_size=16)
    ref = [next(it) for it in [sd.make(cfg, split="train")] for _ in range(6)]
    it = sd.make(cfg, split="train")
    for _ in range(2):
        next(it)
    state = json.loads(json.dumps(it.get_state()))
    again = sd.make(cfg, split="train")
    again.set_state(state)
    for want in ref[2:]:
        got = next(again)
        assert all(np.array_equal(got[k], want[k]) for k in want)


def test_imdb_counts_balance_and_bytes(make_cfg, shared_data):
    # One test builds the (~20 s) IMDB data set, so that xdist workers do not both build it.
    cfg = make_cfg(name="imdb_bytes", manual_dir=str(shared_data), max_len=1024, batch_size=1000)
    info = sd.info(cfg)
    assert (info.vocab_size, info.num_classes, info.pad_id, info.seq_len) == (257, 2, 0, 1024)
    assert info.fingerprint == "cf42aa15ecc01fa8642ce0b8a788578e754afd6a4527d9133ee53234f4af340d"
    assert info.split_sizes["train"] == info.split_sizes["test"] == 25_000
    key = store.dataset_key(cfg)
    train = store.source(key, "train")
    train_labels = [int(ex["label"]) for ex in train.__getitems__(list(range(len(train))))]
    assert len(train_labels) == 25_000 and sum(train_labels) == 12_500
    # One evaluation pass over the test split: every review once, byte + 1, truncated to 1K.
    labels, lengths = [], []
    for batch in sd.make(cfg, split="test", train=False):
        live = batch["weights"] > 0
        labels += batch["targets"][live].tolist()
        x = batch["inputs"][live]
        assert x.max() <= 256 and x.dtype == np.int32
        n = (x > 0).sum(1)
        assert all(not row[k:].any() for row, k in zip(x, n))  # padding only at the end
        lengths += n.tolist()
    assert len(labels) == 25_000 and labels.count(1) == labels.count(0) == 12_500
    assert 16 < sum(labels[:64]) < 48  # a fixed shuffle: any prefix holds both labels
    assert min(lengths) > 0 and lengths.count(1024) > 1000  # many reviews exceed 1K bytes
    test = store.source(key, "test")
    for i in (0, 777, 24_999):  # example i of the pass is review i, as bytes + 1
        raw = np.asarray(test[i]["tokens"][:1024], np.int32)
        assert lengths[i] == len(raw) and labels[i] == test[i]["label"]
    batch = next(sd.make(cfg, split="train"))
    text = info.decode(batch["inputs"][0])
    ids = info.encode(text)
    np.testing.assert_array_equal(ids[:1024], batch["inputs"][0][: len(ids)])


@pytest.mark.parametrize("split", ["train", "validation"])
def test_duplication_task(make_cfg, split):
    cfg = make_cfg(name="duplication", seq_len=64, dup_vocab_size=10, batch_size=4, dup_eval_size=6)
    info = sd.info(cfg)
    assert info.vocab_size == 10 and info.task == "lm"
    it = sd.make(cfg, split=split, train=split == "train")
    batches = [next(it) for _ in range(2)]
    n = 64 // 2 - 1
    for b in batches:
        x, y, w = b["inputs"], b["targets"], b["weights"]
        live = w.sum(1) > 0
        assert x.shape == y.shape == w.shape == (4, 64)
        np.testing.assert_array_equal(x[:, 1:], y[:, :-1])
        xl, wl = x[live], w[live]
        assert (xl[:, 0] == 0).all() and (xl[:, n + 1] == 0).all()
        np.testing.assert_array_equal(xl[:, 1 : n + 1], xl[:, n + 2 :])  # 0 w 0 w
        assert xl[:, 1 : n + 1].min() >= 1 and xl[:, 1 : n + 1].max() <= 9
        mask = np.zeros(64, bool)
        mask[n + 1 : 2 * n + 1] = True  # targets = the second copy of w
        assert (wl[:, mask] == 1).all() and (wl[:, ~mask] == 0).all()
        np.testing.assert_array_equal(y[live][:, mask], xl[:, 1 : n + 1])
    if split == "validation":  # 6 sequences in batches of 4: the second is half padding
        assert it.num_steps == 2 and batches[1]["weights"].sum(1).tolist() == [n, n, 0, 0]
        with pytest.raises(StopIteration):
            next(it)
    again = sd.make(cfg, split=split, train=split == "train")
    np.testing.assert_array_equal(next(again)["inputs"], batches[0]["inputs"])
