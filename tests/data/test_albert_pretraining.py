"""ALBERT's pre-training examples (``seqjax.data.albert_pretraining``) equal a step-by-step
port of google-research/albert's ``create_pretraining_data.py`` given the same random
stream (sentence-order and next-sentence modes, whole-word n-gram masking), and have the
objective's properties: SOP negatives are the same two segments swapped, about half the
examples are swapped, the masked count respects the budget, shorter n-grams are favoured."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from seqjax.data import albert_pretraining as ap
from tests.data import _albert_port as port

CLS, SEP, MASK = 1, 2, 3
SPECIAL = ap.Special(cls=CLS, sep=SEP, mask=MASK, vocab=tuple(range(4, 80)))


def _is_start(tok):  # ids >= 60 continue a word (like '##' pieces)
    return tok < 60


def _corpus(seed=0, n_docs=6):
    rng = np.random.default_rng(seed)
    return [
        [list(map(int, rng.integers(4, 80, size=int(rng.integers(2, 12)))))
         for _ in range(int(rng.integers(1, 9)))]
        for _ in range(n_docs)
    ]  # fmt: skip


@pytest.mark.parametrize("random_next", [False, True], ids=["sop", "nsp"])
@pytest.mark.parametrize("whole_word", [True, False])
def test_equals_reference_port(random_next, whole_word):
    docs = _corpus()
    flags = dict(random_next_sentence=random_next, do_whole_word_mask=whole_word, ngram=3,
                 favor_shorter_ngram=True, cls=CLS, sep=SEP, mask=MASK,
                 is_start_piece=_is_start)  # fmt: skip
    total = 0
    for seed in range(12):
        for d in range(len(docs)):
            ours = ap.sop_examples(docs, d, np.random.default_rng(seed), SPECIAL,
                                   max_seq_length=24, short_seq_prob=0.2,
                                   random_next_sentence=random_next, whole_word=whole_word,
                                   is_start=_is_start, max_predictions=5)  # fmt: skip
            theirs = port.create_instances_from_document(
                docs, d, 24, 0.2, 0.15, 5, list(SPECIAL.vocab), np.random.default_rng(seed), flags
            )
            assert ours == theirs, (seed, d)
            total += len(ours)
    assert total > 100


def test_sop_negatives_are_the_pair_swapped():
    docs = _corpus(1, n_docs=30)
    swapped = kept = 0
    for d in range(len(docs)):
        for ex in ap.sop_examples(docs, d, np.random.default_rng(d), SPECIAL, max_seq_length=512,
                                  short_seq_prob=0.0, masked_lm_prob=0.0):  # fmt: skip
            toks, seg = ex["tokens"], ex["segment_ids"]
            a = [t for t, s in zip(toks[1:], seg[1:]) if s == 0][:-1]
            b = [t for t, s in zip(toks, seg) if s == 1][:-1]
            whole = [t for s in docs[d] for t in s]
            if ex["swapped"] and len(docs[d]) > 1 and all(t in whole for t in a + b):
                swapped += 1  # B then A is a contiguous run of the document
                assert _contiguous(whole, b + a)
            elif not ex["swapped"]:
                kept += 1
                assert _contiguous(whole, a + b)
    assert swapped > 10 and kept > 10 and abs(swapped - kept) < 0.5 * (swapped + kept)


def _contiguous(whole, part):
    n = len(part)
    return any(whole[i : i + n] == part for i in range(len(whole) - n + 1))


def test_ngram_masking_budget_and_shorter_ngrams_favoured():
    rng = np.random.default_rng(0)
    lengths, total, masked = Counter(), 0, Counter()
    for _ in range(400):
        body = list(map(int, rng.integers(4, 60, size=60)))  # every token a word
        tokens = [CLS, *body, SEP]
        out, pos, labels, _ = ap.ngram_mask(tokens, rng, SPECIAL, max_predictions=40)
        assert len(pos) <= min(40, round(len(tokens) * 0.15)) and pos == sorted(pos)
        assert [tokens[i] for i in pos] == labels and CLS not in labels
        runs, start = [], 0
        for k in range(1, len(pos) + 1):  # runs of adjacent masked positions
            if k == len(pos) or pos[k] != pos[k - 1] + 1:
                runs.append(k - start)
                start = k
        lengths.update(runs)
        total += len(pos)
        masked.update("mask" if out[i] == MASK else "same" if out[i] == tokens[i] else "rand"
                      for i in pos)  # fmt: skip
    assert lengths[1] > lengths[2] > lengths[3] > 0  # P(n) ∝ 1/n (adjacent spans merge)
    assert abs(masked["mask"] / total - 0.8) < 0.03
