"""Pieces of the accelerator benchmark that a CPU can check exactly: the FlexAttention
peers attend the same (query, key) sets as seqjax's Sparse Transformer patterns, the device
test counts are read from pytest's summary line, and the train row drops XLA's FLOP count
where it contradicts the analytic one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from seqjax.attention import sparse_patterns
from seqjax.configs import common

REPO = Path(__file__).resolve().parents[2]
ACC = REPO / "experiments/accelerator"


def _load(name):
    return common.load_file(ACC / f"{name}.py", f"acc_{name}_test")


@pytest.mark.parametrize("t, stride, c", [(64, 16, 4), (100, 8, 3), (37, 5, 5)])
def test_flex_masks_equal_the_sparse_patterns(t, stride, c):
    pytest.importorskip("torch")
    peers = _load("peers")
    strided = peers.dense_mask(peers.strided_mask(stride), t)
    fixed = peers.dense_mask(peers.fixed_mask(stride, c), t)
    np.testing.assert_array_equal(strided, sparse_patterns.pattern("strided", t, stride))
    np.testing.assert_array_equal(fixed, sparse_patterns.pattern("fixed", t, stride, c=c))
    assert not strided.all() and not fixed.all()


def test_device_test_counts_are_parsed():
    run = _load("run")
    got = run.test_counts("3 failed, 812 passed, 4 skipped, 1 error, 120 deselected in 301.2s")
    assert got == {"passed": 812, "failed": 3, "errors": 1, "skipped": 4, "deselected": 120}
    assert run.test_counts("") == {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}


def test_xla_flops_shown_only_where_it_agrees():
    bench = _load("train_bench")
    assert bench.xla_flops_note(13e12, 14e12) is None
    note = bench.xla_flops_note(0.04e12, 14.0e12)
    assert "omitted" in note and "0 FLOPs" in note
    row = dict(model="gpt2-small-class", B=16, T=1024, seconds={"seqjax": 0.04, "torch_compile":
               0.03}, mfu_by_contender={"seqjax": 0.35, "torch_compile": 0.47},
               model_flops_per_step=14e12, xla_flops_per_step=0.04e12, xla_flops_note=note,
               xent_chunk=1024, notes={})  # fmt: skip
    md = bench.markdown(row)
    assert "0.04 TFLOP" in md and "omitted" in md  # said with its reason, never bare
    assert "| torch_compile | 30.0 | 546,133 | 47.0% | 1.33x |" in md
