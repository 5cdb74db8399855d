"""``seqjax.data.xlnet_perm`` equals a port of zihangdai/xlnet's ``_sample_mask`` /
``_local_perm`` / parser with the same injected generator (oracle 4 of issue 45), and its
random draws keep XLNet's invariants."""

from __future__ import annotations

import numpy as np
import pytest

from seqjax.data import xlnet_perm
from tests.data import _xlnet_reference as ref

T, R = 12, 6


@pytest.mark.parametrize("goal", [None, 2, 4])
@pytest.mark.parametrize("reverse", [False, True])
def test_sample_mask_equals_reference(goal, reverse):
    for seed in range(20):
        seg = np.random.default_rng(seed).integers(5, 99, R)
        a, b = np.random.default_rng(seed), np.random.default_rng(seed)
        want = ref.ref_sample_mask(a, seg, mask_alpha=3, mask_beta=1, reverse=reverse,
                                   goal_num_predict=goal)  # fmt: skip
        got = xlnet_perm.sample_mask(seg, b, goal_num_predict=goal, mask_alpha=3, mask_beta=1,
                                     reverse=reverse)  # fmt: skip
        np.testing.assert_array_equal(got, want)
        assert a.integers(1 << 30) == b.integers(1 << 30)  # the same draws were consumed
        if goal is not None:
            assert got.sum() == goal


def test_sample_mask_whole_words():
    """Spans start at a word start and end before one (the reference's scan tests the
    span's first piece instead, see the module docstring)."""
    starts = lambda tok: tok % 3 == 0  # noqa: E731
    for seed in range(30):
        seg = np.random.default_rng(seed).integers(5, 99, 24)
        got = xlnet_perm.sample_mask(seg, np.random.default_rng(seed), mask_alpha=4,
                                     is_start_piece=starts)  # fmt: skip
        edges = np.flatnonzero(np.diff(np.concatenate([[0], got.astype(int), [0]])))
        for beg, end in zip(edges[::2], edges[1::2]):
            assert starts(seg[beg]) and (end == len(seg) or starts(seg[end]))


@pytest.mark.parametrize("perm_size", [3, 6])
def test_example_equals_reference(perm_size):
    for seed in range(10):
        rng = np.random.default_rng(seed)
        inputs = rng.integers(5, 99, T)
        inputs[[4, 9, 11]] = [ref.SEP_ID, ref.SEP_ID, ref.CLS_ID]
        masked = np.zeros(T, bool)
        masked[rng.choice(T, 5, replace=False)] = True
        nxt = np.concatenate([inputs[1:], [0]])  # the reference's next-token targets
        a, b = np.random.default_rng(seed + 1), np.random.default_rng(seed + 1)
        want = ref.ref_parse(a, inputs, nxt, masked, seq_len=T, reuse_len=R,
                             perm_size=perm_size, num_predict=6)  # fmt: skip
        got = xlnet_perm.permutation_example(inputs, masked, b, reuse_len=R,
                                             perm_size=perm_size, num_predict=6)  # fmt: skip
        np.testing.assert_array_equal(got["perm_mask"], want["perm_mask"] > 0)
        for key in ("target_mapping", "input_k", "input_q", "target"):
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)
        np.testing.assert_array_equal(got["target_weight"], want["target_mask"])


def test_random_draws_keep_the_invariants():
    """A target sees exactly the lower-rank targets and all non-targets of its half (and all
    of the first half from the second); the first half never sees the second; the content
    stream keeps the original tokens; P targets per row."""
    rng = np.random.default_rng(0)
    inputs = rng.integers(5, 99, (16, T))
    ex = xlnet_perm.batch(inputs, rng, reuse_len=R, perm_size=R, num_predict=4, mask_alpha=3)
    np.testing.assert_array_equal(ex["input_k"], inputs)
    assert (ex["target_weight"].sum(1) == 4).all() and (ex["input_q"].sum(1) == 4).all()
    half = np.arange(T) >= R
    for row in range(len(inputs)):
        pm, rank, tgt = ex["perm_mask"][row], ex["rank"][row], ex["input_q"][row] > 0
        assert pm[:R, R:].all()
        np.testing.assert_array_equal(ex["target_mapping"][row].argmax(1), np.flatnonzero(tgt))
        for i in np.flatnonzero(tgt):
            same = half == half[i]
            want = (same & (~tgt | (tgt & (rank < rank[i])))) | (half < half[i])
            np.testing.assert_array_equal(~pm[i], want)
        for i in np.flatnonzero(~tgt):  # non-targets see the non-targets they may
            np.testing.assert_array_equal(~pm[i], (~tgt & (half == half[i])) | (half < half[i]))


def test_bad_options():
    with pytest.raises(ValueError, match="perm_size"):
        xlnet_perm.permutation_example(np.arange(T), np.zeros(T, bool), np.random.default_rng(0),
                                       reuse_len=R, perm_size=8)  # fmt: skip
    with pytest.raises(ValueError, match="reuse_len"):
        xlnet_perm.permutation_example(np.arange(T), np.zeros(T, bool), np.random.default_rng(0),
                                       reuse_len=T, perm_size=4)  # fmt: skip


class _Rows:
    """A stand-in batch maker: right-padded rows of 1..99 (0 = padding)."""

    def __init__(self, lengths):
        self.lengths = lengths

    def rows(self, step):
        return np.arange(len(self.lengths)) + step * len(self.lengths)

    def __call__(self, step):
        rng = np.random.default_rng(step)
        inputs = np.zeros((len(self.lengths), T), np.int32)
        for r, n in enumerate(self.lengths):
            inputs[r, :n] = rng.integers(1, 99, n)
        return {"inputs": inputs, "targets": inputs, "weights": np.ones(len(self.lengths))}


def test_objective_batches_are_the_task_s_and_resumable():
    """The 'plm' objective's batches pass the task's ``check_batch``, predict real tokens
    only (padded texts), repeat for the same (seed, step) and differ across steps."""
    import jax.numpy as jnp

    from seqjax.data import plm
    from seqjax.tasks import plm as plm_task

    opts = dict(num_predict=4, reuse_len=R, perm_size=R, mask_alpha=3, mask_beta=1, max_gram=5)
    maker = plm.PermutationLM(_Rows([12, 8, 3, 0]), seed=1, stream=0, num_tokens=0, opts=opts,
                              texts=True)  # fmt: skip
    b = maker(0)
    plm_task.TASK.check_batch({k: jnp.asarray(v) for k, v in b.items()})
    pos = b["target_mapping"].argmax(-1)
    real = b["inputs"] != 0
    for r in range(4):
        w = b["weights"][r] > 0
        assert real[r, pos[r, w]].all()  # targets are real tokens
        np.testing.assert_array_equal(b["targets"][r, w], b["inputs"][r, pos[r, w]])
    assert b["weights"][0].sum() == 4 and b["weights"][3].sum() == 0
    again = maker(0)
    for k in b:
        np.testing.assert_array_equal(again[k], b[k])
    assert not np.array_equal(maker(1)["perm_mask"], b["perm_mask"])
