"""`config_problems`: every invalid `config.data` field, checked before anything is built.

The one list of data checks: `seqjax.train.config_validation` reports them with the rest of
the config, and `seqjax.data.api.info`/`make` raise the first one when called on their own
(re-exported there as `seqjax.data.api.config_problems`).
"""

from __future__ import annotations

import numbers

import seqjax.data.images as images
from seqjax.data import objectives, packing, pathfinder_data, subword
from seqjax.data.config import (
    CLASSIFICATION_DATASETS,
    DATASETS,
    IMAGE_DATASETS,
    SEQ2SEQ_DATASETS,
    TRANSLATION_DATASETS,
    VOCABS,
    WORD_VOCAB_DATASETS,
)

# Classification sets with a vocabulary choice (the rest: 'bytes' only, their fixed tokens).
SUBWORD_CLASSIFICATION_VOCABS = {"imdb_bytes": ("bytes", "sentencepiece")}
_NO_SPM_OPTIONS = tuple(sorted(set(CLASSIFICATION_DATASETS) - set(SUBWORD_CLASSIFICATION_VOCABS)))


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def config_problems(cfg) -> list[tuple[str, object, str]]:
    """Every invalid `config.data` field as `(field, value, valid)`.

    The one list of data checks: `seqjax.train.config_validation` reports them with the rest
    of the config before anything is built, and `info`/`make` raise the first one when they
    are called on their own.
    """
    problems = []

    def bad(field, value, valid):
        problems.append((field, value, valid))

    if cfg.get("name") not in DATASETS:
        bad("name", cfg.get("name"), ", ".join(DATASETS))
    name = cfg.get("name")
    if cfg.get("vocab") not in VOCABS:
        bad("vocab", cfg.get("vocab"), " or ".join(repr(v) for v in VOCABS))
    elif name in TRANSLATION_DATASETS and cfg.vocab != "sentencepiece":
        bad("vocab", cfg.vocab, f"'sentencepiece' for {name} (a subword vocabulary)")
    elif name in CLASSIFICATION_DATASETS and cfg.vocab not in SUBWORD_CLASSIFICATION_VOCABS.get(
        name, ("bytes",)
    ):
        valid = " or ".join(repr(v) for v in SUBWORD_CLASSIFICATION_VOCABS.get(name, ("bytes",)))
        bad("vocab", cfg.vocab, f"{valid} for {name}")
    if cfg.get("vocab") == "sentencepiece" and name not in _NO_SPM_OPTIONS + (
        "duplication",
        "copy",
        "reverse",
    ):
        if cfg.get("spm_model_type") not in subword.MODEL_TYPES:
            bad("spm_model_type", cfg.get("spm_model_type"), "'bpe' or 'unigram'")
        if not _is_int(cfg.get("vocab_size")) or not 262 <= cfg.vocab_size < 2**31:
            bad("vocab_size", cfg.get("vocab_size"), "an integer >= 262 (4 special + 256 bytes)")
        cov = cfg.get("spm_character_coverage")
        if not isinstance(cov, numbers.Real) or isinstance(cov, bool) or not 0.98 <= cov <= 1:
            bad("spm_character_coverage", cov, "a number in [0.98, 1]")
        if not _is_int(cfg.get("spm_input_sentence_size")) or cfg.spm_input_sentence_size < 1:
            bad("spm_input_sentence_size", cfg.get("spm_input_sentence_size"), "a positive integer")
    if cfg.get("vocab") == "words":
        if name not in WORD_VOCAB_DATASETS:
            bad("vocab", "words", f"a vocab other than 'words' for {name!r}: word vocabularies "
                f"need a text corpus ({', '.join(WORD_VOCAB_DATASETS)})")  # fmt: skip
        if not _is_int(cfg.get("words_min_count")) or cfg.words_min_count < 1:
            bad("words_min_count", cfg.get("words_min_count"), "an integer >= 1")
        size = cfg.get("words_max_size")
        if not _is_int(size) or not (size == 0 or size >= 3):
            bad("words_max_size", size, "0 (no limit) or an integer >= 3 (<eos>, <unk>, a word)")
    if name in SEQ2SEQ_DATASETS:
        for field in ("max_source_len", "max_target_len"):
            if not _is_int(cfg.get(field)) or cfg.get(field) < 2:
                bad(field, cfg.get(field), "an integer >= 2 (at least one id + EOS)")
    if name in ("copy", "reverse"):
        S, T = cfg.get("max_source_len"), cfg.get("max_target_len")
        if _is_int(S) and _is_int(T) and T < S:
            bad("max_target_len", T, f"an integer >= max_source_len={S} for {name}")
        if not _is_int(cfg.get("copy_vocab_size")) or cfg.copy_vocab_size < 5:
            bad("copy_vocab_size", cfg.get("copy_vocab_size"), "an integer >= 5 (4 special ids)")
    if name in ("duplication", "copy", "reverse"):
        if not _is_int(cfg.get("dup_eval_size")) or cfg.dup_eval_size < 1:
            bad("dup_eval_size", cfg.get("dup_eval_size"), "a positive integer")
    if name == "translation_jsonl":
        h = cfg.get("heldout_fraction")
        if not isinstance(h, numbers.Real) or isinstance(h, bool) or not 0 < h < 0.5:
            bad("heldout_fraction", h, "a number 0 < heldout_fraction < 0.5")
        if not isinstance(cfg.get("source_lang"), str) or not cfg.source_lang:
            bad("source_lang", cfg.get("source_lang"), "a language field of the file, e.g. 'en'")
    if name == "l10n_pairs":
        h = cfg.get("heldout_fraction")
        if not isinstance(h, numbers.Real) or isinstance(h, bool) or not 0 < h < 0.5:
            bad("heldout_fraction", h, "a number 0 < heldout_fraction < 0.5")
    if name == "wmt14_ende":
        pair = (cfg.get("source_lang"), cfg.get("target_lang") or None)
        if pair not in (("en", "de"), ("en", None), ("de", "en"), ("de", None)):
            bad("source_lang", pair[0], "'en' (target_lang 'de' or None) or 'de' (target 'en')")
    if name in IMAGE_DATASETS:
        images.config_problems(cfg, bad)
    if name in pathfinder_data.DATASETS:
        pathfinder_data.config_problems(cfg, bad)
    if cfg.get("lm_batching") not in ("random", "stream"):
        bad("lm_batching", cfg.get("lm_batching"), "'random' or 'stream'")
    for field in ("batch_size", "seq_len"):
        if not _is_int(cfg.get(field)) or cfg.get(field) < 1:
            bad(field, cfg.get(field), "a positive integer")
    if cfg.get("max_len") is not None and (not _is_int(cfg.max_len) or cfg.max_len < 0):
        bad("max_len", cfg.max_len, "None/0 (the data set's default) or a positive integer")
    if not _is_int(cfg.get("seed")) or not 0 <= cfg.seed < 2**32:
        bad("seed", cfg.get("seed"), "an integer 0 <= seed < 2**32")
    for field, value, valid in objectives.mlm_problems(cfg) + packing.problems(cfg):
        bad(field, value, valid)
    if cfg.get("name") == "duplication":
        seq_len = cfg.get("seq_len")
        if _is_int(seq_len) and (seq_len % 2 or seq_len < 4):
            bad("seq_len", seq_len, "an even length >= 4 for duplication (0 w 0 w)")
        if not _is_int(cfg.get("dup_vocab_size")) or cfg.dup_vocab_size < 2:
            bad("dup_vocab_size", cfg.get("dup_vocab_size"), "an integer >= 2")
    return problems
