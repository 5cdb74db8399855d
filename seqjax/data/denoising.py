"""BART's noising transforms (Lewis et al. 2020, §2.2 and Fig. 2), per document, numpy.

Legend: N tokens in a document (``[BOS] ... [EOS]``: the first and last tokens are never
noised, as in fairseq's ``denoising_dataset.py``), K span-length classes.

* **Token masking**: ``ratio`` of the tokens (or words, with ``word_starts``) replaced by
  ``<mask>`` (``mask_spans(..., span_probs=None)``).
* **Token deletion**: the same choice, deleted (``replace_length=0``).
* **Text infilling**: spans with lengths drawn from a Poisson(λ = 3.5) truncated where its
  mass falls below 1e-7 (``poisson_span_probs``) cover ``ratio`` (30 %) of the words; each span
  becomes *one* ``<mask>`` (``replace_length=1``); a 0-length span inserts a ``<mask>``
  (``insert_noise``).
* **Sentence permutation**: sentences (ending at ``separator_id``) shuffled
  (``permute_sentences``).
* **Document rotation**: the document rotated to start at a uniformly chosen token
  (``rotate``).

Every random choice is drawn from the ``np.random.Generator`` passed in, in the order
fairseq draws them, so the transforms equal fairseq's given the same stream
(``tests/data/test_denoising.py`` checks a step-by-step port of fairseq's functions).

Pitfalls this module refuses or avoids (each tested):

* Sentence permutation needs the separators *in* the document: a pipeline that strips the
  end-of-sentence tokens (keeping one [EOS] per document) leaves one sentence, and the
  permutation silently becomes the identity; ``permute_sentences`` raises instead.
* Padding at the end of a row is not part of the last sentence: the transforms act on the
  unpadded document and put the padding back at the end (fairseq assumes no padding; its
  last-sentence rule would move the pads into the middle).
* The padding id cannot be the separator (a padded row would count each pad run as a
  sentence): refused.
"""

from __future__ import annotations

import math

import numpy as np

POISSON_LAMBDA = 3.5  # §3.1 / §5: span lengths ~ Poisson(3.5)
INFILL_RATIO = 0.3  # §5: 30 % of the tokens in each document masked


def poisson_span_probs(lam: float = POISSON_LAMBDA, tol: float = 1e-7, max_k: int = 128):
    """P(k) of Poisson(``lam``) for k = 0, 1, ... up to the first k whose mass is below
    ``tol`` (included), normalised: ``[K]`` float64."""
    if lam <= 0:
        raise ValueError(f"poisson lambda={lam} must be > 0")
    k = np.arange(max_k)
    log_p = -lam + k * math.log(lam) - np.array([math.lgamma(i + 1) for i in k])
    p = np.exp(log_p)
    below = np.flatnonzero(p < tol)
    p = p[: below[0] + 1] if below.size else p
    return p / p.sum()


def insert_noise(tokens, rng, p: float, *, mask_id: int, vocab_size: int, random_ratio=0.0):
    """``ceil(N p)`` new tokens inserted at random places inside ``[BOS] ... [EOS]``: random
    tokens (a ``random_ratio`` share, ids ``[1, vocab_size)``) and ``<mask>``s."""
    if p == 0.0:
        return tokens
    n_tok = len(tokens)
    n = int(math.ceil(n_tok * p))
    where = rng.permutation(n_tok + n - 2)[:n] + 1
    inserted = np.zeros(n_tok + n, bool)
    inserted[where] = True
    out = np.full(n_tok + n, -1, dtype=np.asarray(tokens).dtype)
    num_random = int(math.ceil(n * random_ratio))
    out[where[num_random:]] = mask_id
    out[where[:num_random]] = rng.integers(1, vocab_size, size=num_random)
    out[~inserted] = tokens
    return out


def _budgeted_lengths(rng, probs, num: int):
    """Span lengths drawn until they cover ``num`` words, the last one cut to the budget."""
    lengths = rng.choice(len(probs), size=num, p=probs)
    while lengths.sum() < num:
        lengths = np.concatenate([lengths, rng.choice(len(probs), size=num, p=probs)])
    cum = np.cumsum(lengths)
    last = int(np.argmax(cum >= num))
    lengths = lengths[: last + 1].copy()
    lengths[last] = num - (cum[last - 1] if last else 0)
    return lengths


def mask_spans(
    tokens,
    rng,
    *,
    ratio: float,
    mask_id: int,
    vocab_size: int,
    span_probs=None,
    replace_length: int = 1,
    random_ratio: float = 0.0,
    word_starts=None,
):
    """Masks (``replace_length=1``: one ``<mask>`` per span) or deletes (``0``) spans
    covering ``ceil(ratio * words)`` words of ``tokens`` ``[N]`` (fairseq's
    ``add_whole_word_mask``).

    Args:
      span_probs: span-length distribution ``[K]`` over 0..K-1 words (text infilling:
        ``poisson_span_probs()``); None: one word per choice (token masking / deletion).
      random_ratio: the share of chosen spans that get a random token instead of ``<mask>``.
      word_starts: bool ``[N]``, True where a word starts (None: every token is a word).
    """
    if replace_length not in (0, 1):
        raise ValueError(f"replace_length={replace_length} is not one of (0, 1)")
    src = np.array(tokens, copy=True)
    n = len(src)
    is_start = np.ones(n, np.int64) if word_starts is None else np.asarray(word_starts, np.int64)
    is_start = is_start.copy()
    is_start[0] = is_start[-1] = 0
    num = int(math.ceil(is_start.sum() * ratio))
    if num == 0:
        return src
    num_inserts = 0
    if span_probs is not None:
        lengths = _budgeted_lengths(rng, span_probs, num)
        nonzero = lengths[lengths > 0]
        num_inserts = len(lengths) - len(nonzero)
        num = len(nonzero)
        if num == 0:
            return insert_noise(src, rng, num_inserts / n, mask_id=mask_id,
                                vocab_size=vocab_size, random_ratio=random_ratio)  # fmt: skip
        lengths = nonzero
    else:
        lengths = np.ones(num, np.int64)
    starts = np.flatnonzero(is_start)
    chosen = starts[rng.permutation(len(starts))[:num]]
    is_random = rng.random(num) < random_ratio
    keep = np.ones(n, bool)
    if replace_length == 0:
        keep[chosen] = False
    else:
        src[chosen] = mask_id
        src[chosen[is_random]] = rng.integers(1, vocab_size, size=int(is_random.sum()))
    # A span of L words from start s also covers the following tokens up to (not including)
    # the L-th next word start; [EOS] counts as many starts, so no span runs past it.
    is_start[-1] = 255
    cum_N = np.cumsum(is_start)
    ends = np.searchsorted(cum_N, cum_N[chosen] + lengths - 1, side="right")
    covered = np.zeros(n + 1, np.int64)
    np.add.at(covered, chosen + 1, 1)
    np.add.at(covered, ends, -1)
    keep &= np.cumsum(covered)[:n] <= 0
    src = src[keep]
    if num_inserts > 0:
        src = insert_noise(src, rng, num_inserts / len(src), mask_id=mask_id,
                           vocab_size=vocab_size, random_ratio=random_ratio)  # fmt: skip
    return src


def _unpadded(tokens, pad_id):
    tokens = np.asarray(tokens)
    if pad_id is None:
        return tokens, tokens[:0]
    real = np.flatnonzero(tokens != pad_id)
    n = int(real[-1]) + 1 if real.size else 0
    return tokens[:n], tokens[n:]


def permute_sentences(tokens, rng, *, separator_id: int, p: float = 1.0, pad_id=None):
    """A share ``p`` of the sentences of ``[BOS] s_1 ... s_k [EOS]`` (each ending at a run of
    ``separator_id``; the last ends before [EOS]) shuffled among themselves (fairseq's
    ``permute_sentences``); trailing ``pad_id`` padding stays at the end.

    Raises:
      ValueError: ``separator_id == pad_id``, or the document has no separator before its
        last two tokens (one sentence: the permutation would silently do nothing; the
        end-of-sentence tokens were probably stripped).
    """
    if pad_id is not None and separator_id == pad_id:
        raise ValueError(
            f"separator_id={separator_id} is the padding id; valid: a sentence-end token id "
            "other than the padding's"
        )
    doc, pads = _unpadded(tokens, pad_id)
    stops = doc == separator_id
    if not stops[1:-2].any():
        raise ValueError(
            f"the document has no sentence separator (id {separator_id}) before its end, so "
            "sentence permutation would be a no-op; keep the end-of-sentence tokens in the "
            "documents"
        )
    stops = stops.copy()
    stops[-2] = True  # the last sentence ends before [EOS]
    ends = np.flatnonzero(stops[1:] & ~stops[:-1]) + 2
    k = len(ends)
    num = int(math.ceil(k * 2 * p / 2.0))
    subs = rng.permutation(k)[:num]
    order = np.arange(k)
    order[subs] = subs[rng.permutation(num)]
    begins = np.concatenate([[1], ends[:-1]])
    body = [doc[begins[i] : ends[i]] for i in order]
    out = np.concatenate([doc[:1], *body, doc[1 + sum(map(len, body)) :], pads])
    return out.astype(np.asarray(tokens).dtype)


def rotate(tokens, rng, *, pad_id=None):
    """``[BOS] x_1 ... x_n [EOS]`` rotated to start at a uniform ``x_o`` (o in 1..n; o = 1 is
    the identity), keeping [BOS], [EOS] and trailing padding in place (fairseq's
    ``add_rolling_noise``)."""
    doc, pads = _unpadded(tokens, pad_id)
    offset = int(rng.integers(1, max(1, len(doc) - 1) + 1))
    return np.concatenate([doc[:1], doc[offset:-1], doc[1:offset], doc[-1:], pads])


def denoise(
    tokens,
    rng,
    *,
    mask_id: int,
    vocab_size: int,
    mask_ratio: float = INFILL_RATIO,
    poisson_lambda: float | None = POISSON_LAMBDA,
    replace_length: int = 1,
    random_ratio: float = 0.0,
    insert_ratio: float = 0.0,
    permute_ratio: float = 0.0,
    separator_id: int | None = None,
    rotate_ratio: float = 0.0,
    word_starts=None,
):
    """The source of one BART example from a document ``[BOS] ... [EOS]``, with fairseq's
    order of noises: sentence permutation, masking/infilling/deletion, insertion, then
    rotation with probability ``rotate_ratio``; the target is the document itself.
    ``poisson_lambda=None``: single-word choices (token masking / deletion)."""
    src = np.asarray(tokens)
    if permute_ratio > 0.0:
        if separator_id is None:
            raise ValueError("permute_ratio > 0 needs separator_id (the sentence-end token id)")
        src = permute_sentences(src, rng, separator_id=separator_id, p=permute_ratio)
    if mask_ratio > 0:
        probs = None if poisson_lambda is None else poisson_span_probs(poisson_lambda)
        src = mask_spans(src, rng, ratio=mask_ratio, mask_id=mask_id, vocab_size=vocab_size,
                         span_probs=probs, replace_length=replace_length,
                         random_ratio=random_ratio, word_starts=word_starts)  # fmt: skip
    if insert_ratio > 0:
        src = insert_noise(src, rng, insert_ratio, mask_id=mask_id, vocab_size=vocab_size,
                           random_ratio=random_ratio)  # fmt: skip
    if rotate_ratio > 0.0 and rng.random() < rotate_ratio:
        src = rotate(src, rng)
    return src
