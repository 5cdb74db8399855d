"""ALBERT's pre-training examples (Lan et al. 2020, §3.1 and §4.1; google-research/albert
``create_pretraining_data.py``): sentence-order prediction pairs and n-gram masking, over
token ids, with an injected ``np.random.Generator``.

Legend: N tokens in an example, K n-gram lengths (1..``ngram``).

* **Sentence-order prediction** (§3.1 "Inter-sentence coherence loss"): two consecutive
  segments A, B of one document; with probability 1/2 they are swapped (label 1) — the
  negative is the same two segments in the wrong order, not a random next sentence
  (BERT's NSP, which ``random_next_sentence=True`` gives: B from another document).
* **N-gram masking** (§4.1, Joshi et al. 2019): masked spans of n words, n ≤ ``ngram`` (3)
  chosen with probability ∝ 1/n (shorter n-grams favoured), up to ``round(N · 15 %)``
  (at most ``max_predictions``) tokens, each replaced 80/10/10 by [MASK] / itself / a random
  vocabulary id.

The draws are the reference's, in its order (Python's ``random`` calls become the
generator's: ``random()``, ``integers(a, b + 1)`` for ``randint(a, b)``, ``shuffle``; its
``np.random.choice`` of n the generator's ``choice``), so given the same generator the
examples equal the reference's (``tests/data/test_albert_pretraining.py``).
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Special:
    """The special token ids and the ids random replacements are drawn from."""

    cls: int
    sep: int
    mask: int
    vocab: tuple  # every id a random replacement may take


def _word_candidates(tokens, special: Special, is_start, whole_word: bool):
    """Candidate positions, grouped by word (whole-word masking), and token boundaries."""
    cands, boundary = [], [0] * len(tokens)
    for i, tok in enumerate(tokens):
        if tok in (special.cls, special.sep):
            boundary[i] = 1
            continue
        start = is_start(tok)
        if whole_word and cands and not start:
            cands[-1].append(i)
            continue
        cands.append([i])
        boundary[i] = int(start)
    return cands, boundary


def ngram_probs(ngram: int = 3, favor_shorter: bool = True):
    """P(n) ∝ 1/n for n = 1..``ngram`` (reversed without ``favor_shorter``)."""
    p = 1.0 / np.arange(1, ngram + 1)
    p /= p.sum(keepdims=True)
    return p if favor_shorter else p[::-1]


def _pick_span(rng, spans, probs, ngrams, used: int, budget: int):
    """The positions of one n-gram starting at a word: n drawn, then shortened until it fits
    the budget; None when even one word does not fit."""
    n = int(rng.choice(ngrams, p=probs / probs.sum(keepdims=True)))
    while True:
        positions = [i for word in spans[n - 1] for i in word]
        if used + len(positions) <= budget or n == 1:
            break
        n -= 1
    return positions if used + len(positions) <= budget else None


def ngram_mask(
    tokens,
    rng,
    special: Special,
    *,
    masked_lm_prob: float = 0.15,
    max_predictions: int = 20,
    ngram: int = 3,
    favor_shorter: bool = True,
    whole_word: bool = True,
    is_start=None,
):
    """N-gram masking of one example (module docstring).

    Returns:
      ``(tokens, positions, labels, boundary)``: the masked tokens, the masked positions in
      increasing order, their original ids, and 1 where a word starts.
    """
    is_start = is_start or (lambda tok: True)
    tokens = list(tokens)
    cands, boundary = _word_candidates(tokens, special, is_start, whole_word)
    out = list(tokens)
    if masked_lm_prob == 0:
        return out, [], [], boundary
    budget = min(max_predictions, max(1, int(round(len(tokens) * masked_lm_prob))))
    ngrams = np.arange(1, ngram + 1, dtype=np.int64)
    probs = ngram_probs(ngram, favor_shorter)
    spans_by_word = [[cands[w : w + n] for n in ngrams] for w in range(len(cands))]
    rng.shuffle(spans_by_word)
    chosen, covered = [], set()
    for spans in spans_by_word:
        if len(chosen) >= budget:
            break
        positions = _pick_span(rng, spans, probs, ngrams, len(chosen), budget)
        if positions is None or covered.intersection(positions):
            continue
        for i in positions:
            covered.add(i)
            if rng.random() < 0.8:
                out[i] = special.mask
            elif rng.random() >= 0.5:  # else: kept
                out[i] = special.vocab[int(rng.integers(0, len(special.vocab)))]
            chosen.append(i)
    rng.shuffle(spans_by_word)  # the reference shuffles again (for its permutation mode)
    chosen.sort()
    return out, chosen, [tokens[i] for i in chosen], boundary


def _truncate_pair(a: list, b: list, max_tokens: int, rng) -> None:
    """Removes tokens from the front or back (1/2 each) of the longer segment until the pair
    fits ``max_tokens`` (in place)."""
    while len(a) + len(b) > max_tokens:
        longer = a if len(a) > len(b) else b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def sop_examples(
    documents,
    index: int,
    rng,
    special: Special,
    *,
    max_seq_length: int = 512,
    short_seq_prob: float = 0.1,
    random_next_sentence: bool = False,
    **mask_options,
):
    """The examples of ``documents[index]`` (each document a list of sentences, each a list
    of ids): ``[CLS] A [SEP] B [SEP]`` with segment ids 0/1, ``swapped`` (SOP's label; with
    ``random_next_sentence``, BERT's NSP label "B is random"), and ``ngram_mask``'s fields.
    """
    doc = documents[index]
    max_tokens = max_seq_length - 3  # [CLS], [SEP], [SEP]
    target = max_tokens
    if rng.random() < short_seq_prob:
        target = int(rng.integers(2, max_tokens + 1))
    examples, chunk, length, i = [], [], 0, 0
    while i < len(doc):
        chunk.append(doc[i])
        length += len(doc[i])
        if i == len(doc) - 1 or length >= target:
            if chunk:
                a_end = int(rng.integers(1, len(chunk))) if len(chunk) >= 2 else 1
                a = [t for s in chunk[:a_end] for t in s]
                b, swapped = [], False
                if len(chunk) == 1 or (random_next_sentence and rng.random() < 0.5):
                    swapped = True  # B from another document (BERT's NSP; a 1-chunk SOP)
                    b = _random_continuation(documents, index, rng, target - len(a))
                    i -= len(chunk) - a_end  # the unused sentences go back
                else:
                    b = [t for s in chunk[a_end:] for t in s]
                    if not random_next_sentence and rng.random() < 0.5:
                        swapped, a, b = True, b, a  # SOP's negative: the same pair, swapped
                _truncate_pair(a, b, max_tokens, rng)
                tokens = [special.cls, *a, special.sep, *b, special.sep]
                segments = [0] * (len(a) + 2) + [1] * (len(b) + 1)
                masked, positions, labels, boundary = ngram_mask(
                    tokens, rng, special, **mask_options
                )
                example = dict(tokens=masked, segment_ids=segments, swapped=swapped)
                examples.append(example | dict(positions=positions, labels=labels,
                                               boundary=boundary))  # fmt: skip
            chunk, length = [], 0
        i += 1
    return examples


def _random_continuation(documents, index, rng, want: int) -> list:
    for _ in range(10):
        other = int(rng.integers(0, len(documents)))
        if other != index:
            break
    doc = documents[other]
    out = []
    for sentence in doc[int(rng.integers(0, len(doc))) :]:
        out.extend(sentence)
        if len(out) >= want:
            break
    return out
