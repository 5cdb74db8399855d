"""Corpus BLEU and chrF through sacreBLEU (Post 2018), with its signature recorded.

BLEU (Papineni et al. 2002) and chrF (Popović 2015) are computed on detokenised text: the
hypotheses are the decoded strings (SentencePiece decoding restores the original spacing)
and the references the untokenised target strings of the split, so the numbers are
comparable with published sacreBLEU scores (``13a`` tokenisation inside sacreBLEU).
"""

from __future__ import annotations

from collections.abc import Sequence


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
