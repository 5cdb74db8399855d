"""BART's noising transforms (``seqjax.data.denoising``) equal a step-by-step port of
fairseq's ``denoising_dataset.py`` given the same random stream, have the statistics of the
paper's settings, and refuse the known pitfalls."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from seqjax.data import denoising as dn
from tests.data._fairseq_denoising_port import Port

V, BOS, PAD, EOS, DOT, MASK = 60, 0, 1, 2, 3, 59


def _doc(rng, sentences=None):
    """``[BOS] s_1 . s_2 . ... s_k [EOS]`` of random words (ids 4..58)."""
    k = sentences or int(rng.integers(2, 6))
    body = []
    for i in range(k):
        body += list(rng.integers(4, MASK, size=int(rng.integers(1, 9))))
        if i < k - 1:
            body.append(DOT)
    return np.array([BOS, *body, EOS], np.int64)


NOISES = {  # name: (seqjax denoise kwargs, fairseq options)
    "infilling": (dict(mask_ratio=0.3, poisson_lambda=3.5, random_ratio=0.1),
                  dict(mask_ratio=0.3, poisson_lambda=3.5, random_ratio=0.1)),
    "token_masking": (dict(mask_ratio=0.3, poisson_lambda=None),
                      dict(mask_ratio=0.3)),
    "token_deletion": (dict(mask_ratio=0.3, poisson_lambda=None, replace_length=0),
                       dict(mask_ratio=0.3, replace_length=0)),
    "span_deletion": (dict(mask_ratio=0.3, poisson_lambda=3.5, replace_length=0),
                      dict(mask_ratio=0.3, poisson_lambda=3.5, replace_length=0)),
    "permutation": (dict(mask_ratio=0.0, permute_ratio=1.0, separator_id=DOT),
                    dict(permute_sentence_ratio=1.0, full_stop_index=DOT)),
    "half_permutation": (dict(mask_ratio=0.0, permute_ratio=0.5, separator_id=DOT),
                         dict(permute_sentence_ratio=0.5, full_stop_index=DOT)),
    "rotation": (dict(mask_ratio=0.0, rotate_ratio=1.0), dict(rotate_ratio=1.0)),
    "infilling_permutation_insertion": (
        dict(mask_ratio=0.3, poisson_lambda=3.5, permute_ratio=1.0, separator_id=DOT,
             insert_ratio=0.1, random_ratio=0.2, rotate_ratio=0.5),
        dict(mask_ratio=0.3, poisson_lambda=3.5, permute_sentence_ratio=1.0,
             full_stop_index=DOT, insert_ratio=0.1, random_ratio=0.2, rotate_ratio=0.5)),
}  # fmt: skip


@pytest.mark.parametrize("noise", sorted(NOISES))
def test_equals_fairseq_port(noise):
    ours_kw, theirs_kw = NOISES[noise]
    port = Port(vocab_size=V, mask_idx=MASK, eos=EOS, **theirs_kw)
    docs = np.random.default_rng(7)
    changed = 0
    for seed in range(60):
        doc = _doc(docs)
        ours = dn.denoise(doc, np.random.default_rng(seed), mask_id=MASK, vocab_size=V, **ours_kw)
        theirs = port.getitem(doc, np.random.default_rng(seed))
        np.testing.assert_array_equal(ours, theirs, err_msg=f"{noise}, seed {seed}")
        changed += not np.array_equal(ours, doc)
    assert changed > 20  # the noise does something


def test_whole_word_infilling_equals_fairseq_port():
    docs = np.random.default_rng(3)
    for seed in range(40):
        doc = _doc(docs, sentences=4)
        starts = docs.random(len(doc)) < 0.6  # word pieces: a start, then continuations
        port = Port(vocab_size=V, mask_idx=MASK, eos=EOS, mask_ratio=0.3, poisson_lambda=3.5,
                    mask_whole_word=starts)  # fmt: skip
        ours = dn.mask_spans(doc, np.random.default_rng(seed), ratio=0.3, mask_id=MASK,
                             vocab_size=V, span_probs=dn.poisson_span_probs(3.5),
                             word_starts=starts)  # fmt: skip
        np.testing.assert_array_equal(ours, port.getitem(doc, np.random.default_rng(seed)))


def test_span_lengths_follow_the_truncated_poisson():
    probs = dn.poisson_span_probs(3.5)
    assert probs[-1] < 1e-7 * 1.01 and probs[-2] >= 1e-7 * 0.99  # truncated at 1e-7
    rng = np.random.default_rng(0)
    lengths = np.concatenate([dn._budgeted_lengths(rng, probs, 40)[:-1] for _ in range(800)])
    k = np.arange(12)
    pmf = np.exp(-3.5) * 3.5**k / np.array([math.factorial(i) for i in k])
    hist = np.bincount(lengths, minlength=12)[:12] / len(lengths)
    np.testing.assert_allclose(hist, pmf, atol=0.012)


def test_masked_fractions():
    rng, docs = np.random.default_rng(1), np.random.default_rng(2)
    for _ in range(50):  # token masking: exactly ceil(30 %) of the inner tokens
        doc = _doc(docs)
        out = dn.mask_spans(doc, rng, ratio=0.3, mask_id=MASK, vocab_size=V)
        assert (out == MASK).sum() == int(np.ceil(0.3 * (len(doc) - 2)))
        assert len(out) == len(doc)
    covered = []
    for _ in range(300):  # infilling: spans cover ~30 % (overlaps and [EOS] cut a little)
        doc = np.array([BOS, *docs.integers(4, MASK, size=100), EOS])
        out = dn.mask_spans(doc, rng, ratio=0.3, mask_id=MASK, vocab_size=V,
                            span_probs=dn.poisson_span_probs(), replace_length=0)  # fmt: skip
        covered.append((len(doc) - len(out[out != MASK])) / 100)
    assert 0.25 < np.mean(covered) <= 0.31


def _sentences(doc):
    """The sentences of ``[BOS] ... [EOS]``, each with its trailing separator."""
    out, cur = [], []
    for t in doc[1:-1]:
        cur.append(int(t))
        if t == DOT:
            out.append(tuple(cur))
            cur = []
    return out + ([tuple(cur)] if cur else [])


def test_permutation_preserves_the_sentences():
    docs = np.random.default_rng(4)
    moved = 0
    for seed in range(50):
        doc = _doc(docs, sentences=4)
        out = dn.permute_sentences(doc, np.random.default_rng(seed), separator_id=DOT)
        assert out[0] == BOS and out[-1] == EOS and len(out) == len(doc)
        sents, body = _sentences(doc), tuple(int(t) for t in out[1:-1])
        orders = itertools.permutations(range(len(sents)))
        assert any(sum((sents[i] for i in o), ()) == body for o in orders)  # same multiset
        moved += not np.array_equal(out, doc)
    assert moved > 30


def test_permutation_refuses_a_document_without_separators():
    """The pitfall: the end-of-sentence tokens stripped, one sentence left: a silent no-op."""
    doc = _doc(np.random.default_rng(0), sentences=4)
    stripped = doc[doc != DOT]
    with pytest.raises(ValueError, match="no sentence separator"):
        dn.permute_sentences(stripped, np.random.default_rng(0), separator_id=DOT)


def test_padding_stays_at_the_end():
    doc = _doc(np.random.default_rng(5), sentences=4)
    padded = np.concatenate([doc, [PAD] * 6])
    for seed in range(20):
        out = dn.permute_sentences(padded, np.random.default_rng(seed), separator_id=DOT,
                                   pad_id=PAD)  # fmt: skip
        alone = dn.permute_sentences(doc, np.random.default_rng(seed), separator_id=DOT)
        np.testing.assert_array_equal(out, np.concatenate([alone, [PAD] * 6]))
        rot = dn.rotate(padded, np.random.default_rng(seed), pad_id=PAD)
        assert (rot[-6:] == PAD).all() and rot[len(doc) - 1] == EOS


def test_padding_cannot_be_the_separator():
    doc = _doc(np.random.default_rng(6))
    with pytest.raises(ValueError, match="separator_id=1 is the padding id"):
        dn.permute_sentences(doc, np.random.default_rng(0), separator_id=PAD, pad_id=PAD)


def test_rotation_is_a_rotation():
    doc = _doc(np.random.default_rng(8))
    inner = list(doc[1:-1])
    for seed in range(20):
        out = dn.rotate(doc, np.random.default_rng(seed))
        o = list(out[1:-1])
        assert any(o == inner[i:] + inner[:i] for i in range(len(inner)))
