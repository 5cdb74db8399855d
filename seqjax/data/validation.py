"""`config_problems`: every invalid `config.data` field, checked before anything is built.

The one list of data checks: `seqjax.train.config_validation` reports them with the rest of
the config, and `seqjax.data.api.info`/`make` raise the first one when called on their own
(re-exported there as `seqjax.data.api.config_problems`).
"""

from __future__ import annotations

import numbers

from seqjax.data import (
    finetune_data,
    gpt1_data,
    hf_vocab,
    objectives,
    packing,
    registry,
    subword,
    token_chars,
)


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _vocab_problems(cfg, ds, bad) -> None:
    vocab = cfg.get("vocab")
    if hf_vocab.is_hf(vocab):  # a Hugging Face folder's tokenizer (seqjax.data.hf_vocab)
        if hf_vocab.KIND not in ds.vocabs:
            valid = " or ".join(repr(v) for v in ds.vocabs if v != hf_vocab.KIND)
            bad("vocab", vocab, f"{valid} for {ds.name} (it cannot read a Hugging Face "
                "tokenizer's ids)")  # fmt: skip
        elif problem := hf_vocab.folder_problem(vocab):
            bad("vocab", vocab, f"'hf:<folder>' naming a Hugging Face folder with its tokenizer "
                f"({problem})")  # fmt: skip
        return
    if vocab not in registry.VOCABS or vocab == hf_vocab.KIND:
        bad("vocab", vocab, " or ".join(repr(v) for v in registry.VOCABS))
    elif vocab == "words" and "words" not in ds.vocabs:
        corpora = ", ".join(registry.names("corpus"))
        bad("vocab", "words", f"a vocab other than 'words' for {ds.name!r}: word vocabularies "
            f"need a text corpus ({corpora})")  # fmt: skip
    elif vocab not in ds.vocabs:
        valid = " or ".join("'hf:<folder>'" if v == hf_vocab.KIND else repr(v) for v in ds.vocabs)
        bad(
            "vocab",
            vocab,
            f"{valid} for {ds.name}" + (f" ({ds.vocab_note})" if ds.vocab_note else ""),
        )
    if vocab == "sentencepiece" and ds.subword_options:
        if cfg.get("spm_model_type") not in subword.MODEL_TYPES:
            bad("spm_model_type", cfg.get("spm_model_type"), "'bpe' or 'unigram'")
        if not _is_int(cfg.get("vocab_size")) or not 262 <= cfg.vocab_size < 2**31:
            bad("vocab_size", cfg.get("vocab_size"), "an integer >= 262 (4 special + 256 bytes)")
        cov = cfg.get("spm_character_coverage")
        if not isinstance(cov, numbers.Real) or isinstance(cov, bool) or not 0.98 <= cov <= 1:
            bad("spm_character_coverage", cov, "a number in [0.98, 1]")
        if not _is_int(cfg.get("spm_input_sentence_size")) or cfg.spm_input_sentence_size < 1:
            bad("spm_input_sentence_size", cfg.get("spm_input_sentence_size"), "a positive integer")
    if vocab == "words" and "words" in ds.vocabs:
        if not _is_int(cfg.get("words_min_count")) or cfg.words_min_count < 1:
            bad("words_min_count", cfg.get("words_min_count"), "an integer >= 1")
        size = cfg.get("words_max_size")
        if not _is_int(size) or not (size == 0 or size >= 3):
            bad("words_max_size", size, "0 (no limit) or an integer >= 3 (<eos>, <unk>, a word)")


def config_problems(cfg) -> list[tuple[str, object, str]]:
    """Every invalid `config.data` field as `(field, value, valid)`.

    The one list of data checks: `seqjax.train.config_validation` reports them with the rest
    of the config before anything is built, and `info`/`make` raise the first one when they
    are called on their own. The common fields are checked here; each registered data set
    (`seqjax.data.registry.DataSet.validate`) checks its own, and the objectives and packing
    theirs.
    """
    problems = []

    def bad(field, value, valid):
        problems.append((field, value, valid))

    ds = registry.find(cfg.get("name"))
    if ds is None:
        bad("name", cfg.get("name"), ", ".join(registry.names()))
    else:
        _vocab_problems(cfg, ds, bad)
        if ds.validate is not None:
            ds.validate(cfg, bad)
    if cfg.get("lm_batching") not in ("random", "stream"):
        bad("lm_batching", cfg.get("lm_batching"), "'random' or 'stream'")
    for field in ("batch_size", "seq_len"):
        if not _is_int(cfg.get(field)) or cfg.get(field) < 1:
            bad(field, cfg.get(field), "a positive integer")
    if cfg.get("max_len") is not None and (not _is_int(cfg.max_len) or cfg.max_len < 0):
        bad("max_len", cfg.max_len, "None/0 (the data set's default) or a positive integer")
    if not _is_int(cfg.get("seed")) or not 0 <= cfg.seed < 2**32:
        bad("seed", cfg.get("seed"), "an integer 0 <= seed < 2**32")
    # Packing is judged against a valid objective only (an unknown one has its own line).
    objective = cfg.get("objective") or ""
    known = objective in objectives.OBJECTIVES or registry.objective(objective) is not None
    for field, value, valid in (
        objectives.mlm_problems(cfg)
        + finetune_data.problems(cfg)
        + gpt1_data.problems(cfg)
        + token_chars.problems(cfg)
        + (packing.problems(cfg) if known else [])
    ):
        bad(field, value, valid)
    return problems
