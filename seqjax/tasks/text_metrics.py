"""Corpus BLEU and chrF through sacreBLEU (Post 2018), with its signature recorded.

BLEU (Papineni et al. 2002) and chrF (Popović 2015) are computed on detokenised text: the
hypotheses are the decoded strings (SentencePiece decoding restores the original spacing)
and the references the untokenised target strings of the split, so the numbers are
comparable with published sacreBLEU scores (``13a`` tokenisation inside sacreBLEU).
``bleu_by_length`` splits the corpus by source length in words (Bahdanau et al. 2015,
Figure 2: BLEU against sentence length).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    """``{'bleu', 'chrf', 'bleu_signature', 'chrf_signature'}`` of a whole corpus.

    Args:
      hypotheses: one detokenised output per example.
      references: one reference per example, in the same order.

    Raises:
      ValueError: the two lists differ in length.
    """
    import sacrebleu

    if len(hypotheses) != len(references):
        raise ValueError(
            f"{len(hypotheses)} hypotheses for {len(references)} references: "
            "they must be the same examples in the same order"
        )
    bleu = sacrebleu.metrics.BLEU()
    chrf = sacrebleu.metrics.CHRF()
    hyps, refs = list(hypotheses), [list(references)]
    return {
        "bleu": float(bleu.corpus_score(hyps, refs).score),
        "chrf": float(chrf.corpus_score(hyps, refs).score),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }


def source_words(text: str) -> int:
    """A source sentence's length in whitespace-separated words (Bahdanau et al. 2015,
    Figure 2's x-axis)."""
    return len(text.split())


def bleu_by_length(
    sources: Sequence[str],
    hypotheses: Sequence[str],
    references: Sequence[str],
    edges: Sequence[int],
    length: Callable[[str], int] = source_words,
) -> list[dict]:
    """Corpus BLEU (sacreBLEU) per source-length bucket: Bahdanau et al. 2015, Figure 2.

    Bucket ``i`` holds the examples whose ``length(source)`` is in
    ``[edges[i], edges[i + 1])``; the last bucket is ``[edges[-1], inf)``. Examples shorter
    than ``edges[0]`` fall in no bucket. Each bucket's BLEU is the corpus BLEU of its own
    examples (not an average of sentence scores).

    Returns:
      One dict a bucket, in order: ``lo``, ``hi`` (``None`` for the open last bucket),
      ``count``, ``bleu`` (``None`` for an empty bucket).

    Raises:
      ValueError: the three lists differ in length, or ``edges`` is not a non-empty, strictly
        increasing sequence of integers >= 0.
    """
    import sacrebleu

    if not len(sources) == len(hypotheses) == len(references):
        raise ValueError(
            f"{len(sources)} sources, {len(hypotheses)} hypotheses and {len(references)} "
            "references: they must be the same examples in the same order"
        )
    edges = list(edges)
    ok = edges and all(isinstance(e, int) and e >= 0 for e in edges)
    if not ok or any(b <= a for a, b in zip(edges, edges[1:])):
        raise ValueError(f"edges={edges}; valid: strictly increasing integers >= 0, e.g. [0, 10]")
    lengths = [length(s) for s in sources]
    out = []
    for i, lo in enumerate(edges):
        hi = edges[i + 1] if i + 1 < len(edges) else None
        idx = [j for j, n in enumerate(lengths) if n >= lo and (hi is None or n < hi)]
        bleu = None
        if idx:
            hyps = [hypotheses[j] for j in idx]
            refs = [[references[j] for j in idx]]
            bleu = float(sacrebleu.metrics.BLEU().corpus_score(hyps, refs).score)
        out.append({"lo": lo, "hi": hi, "count": len(idx), "bleu": bleu})
    return out
