"""Pre-training objectives over the text data sets: BERT's masked LM (``config.data.objective
= 'mlm'``) and the LM of example texts (``'lm'``); T5's span corruption is
``span_corruption.py``.

Masked LM (Devlin et al. 2019, §3.1 "Task #1" and Appendix A.1): of every sequence's real
tokens, each is *chosen* with probability ``mlm_probability`` (15%); a chosen token is
replaced by ``[MASK]`` with probability 0.8, by a uniformly random token with probability
0.1, and left unchanged otherwise. The loss counts only the chosen positions: ``weights``
is 1 there and 0 elsewhere; ``targets`` holds the original tokens.

The ``[MASK]`` id is appended past the data's own vocabulary, so every vocabulary has one and
no existing id moves: ``mask_id = V`` and the model's vocabulary is ``V + 1`` (bytes: 256;
chars: the training split's characters (+ <unk>); sentencepiece: ``data.vocab_size``; LRA
Text ``imdb_bytes``: 257 (0 pad, byte + 1); ListOps: its 16 symbols). Random replacements are
drawn from the data's ordinary ids ``[low, V)`` (``low``: 1 past the pad id 0 of padded
data, 4 past SentencePiece's pad/unk/BOS/EOS), never ``[MASK]`` or padding.

Whole-word masking (``config.data.mlm_whole_word``; BERT's released "whole word masking"
models, Devlin et al. 2019, README of google-research/bert; Cui et al. 2019): the choice is
drawn once per *word* and all of a chosen word's pieces are chosen together, with one 80/10/10
decision per word (the random replacements are drawn per piece). A word is, for SentencePiece,
a piece starting with '▁' (or after a whitespace piece) plus the continuation pieces; for
bytes and chars (imdb_bytes, text corpora), a run of non-whitespace characters, every
whitespace character being a word of its own. A window's or an example's first token always
starts a word. ListOps and the word vocabulary (``vocab='words'``), whose tokens are whole
words already, refuse it.

Every choice is a counter-based hash of ``(data.seed, global row, position)``
(``pipeline.hash_u64``), like every other batch: the same seed gives the same masks, and a
resumed run's grain iterator state restores the exact next masked batch. Evaluation masks
are fixed per split (the same positions at every evaluation).

Legend: B global batch, b per-process batch, T sequence length, V data vocabulary.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from seqjax.data import packing, pipeline, registry, span_corruption

OBJECTIVES = ("", "mlm", "span_corruption")
OBJECTIVES += ("lm",)  # causal LM over the example texts of imdb_bytes/listops (packing.py)
OBJECTIVES += ("plm",)  # XLNet's permutation LM over corpus windows (plm.py)
OBJECTIVES += ("bilm",)  # ELMo's forward and backward LMs (bilm.py)
OBJECTIVES += ("denoising",)  # BART's noises over corpus documents (bart_noise.py)
OBJECTIVES += ("sop",)  # ALBERT's sentence order + n-gram masking over corpus windows (sop.py)
# Registered objectives that make the masked-LM batches too (checked like 'mlm').
MASKED_LM_READERS = ("distill",)  # seqjax.data.distill_data
# The task (seqjax.tasks) whose batches each objective makes.
TASK_OF = {"mlm": "mlm", "span_corruption": "seq2seq", "lm": "lm", "plm": "plm", "bilm": "bilm"}
TASK_OF["denoising"] = "seq2seq"
TASK_OF["sop"] = "mlm_pair"


def _example_texts() -> tuple[str, ...]:  # 'lm' and 'mlm' read their example texts
    return registry.names("texts")


def _corpora() -> tuple[str, ...]:  # 'span_corruption' and 'mlm' read windows of a corpus
    return registry.names("corpus")


# Salts that keep the objectives' hash streams apart from the pipelines' own (1, 2, 3).
_SALT_CHOOSE, _SALT_ACTION, _SALT_RANDOM = 11, 12, 13


def mask_tokens(
    tokens_bT: np.ndarray,
    real_bT: np.ndarray,
    rows_b: np.ndarray,
    *,
    seed: int,
    stream: int,
    mask_id: int,
    low: int,
    high: int,
    probability: float = 0.15,
    word_start_bT: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """BERT masking of ``tokens_bT`` (Devlin et al. 2019, §3.1): 80% [MASK] / 10% random /
    10% unchanged of the chosen ``probability`` share of the real positions.

    Args:
      tokens_bT: int ids ``[b, T]``.
      real_bT: bool ``[b, T]``, True where a token may be chosen (not padding).
      rows_b: the global row ids of the rows (the hash keys with ``seed`` and ``stream``).
      seed, stream: hash keys (``stream`` separates training from each evaluation split).
      mask_id: the [MASK] id; low, high: random replacements are uniform in ``[low, high)``.
      probability: the share of real tokens (whole-word: of words) chosen.
      word_start_bT: bool ``[b, T]``, True where a word starts (whole-word masking; None:
        every token is its own word). A token takes its choice and its 80/10/10 decision
        from the hash of its word's first position.

    Returns:
      ``{'inputs': int32 [b, T], 'targets': int32 [b, T] (the original tokens),
      'weights': float32 [b, T] (1 at the chosen positions)}``.
    """
    pos_T = np.arange(tokens_bT.shape[1], dtype=np.int64)
    keys = (seed, stream, rows_b[:, None], pos_T[None, :])
    word_keys = keys
    if word_start_bT is not None:  # every position keyed by its word's first position
        start_bT = np.asarray(word_start_bT, bool).copy()
        start_bT[:, 0] = True
        anchor_bT = np.maximum.accumulate(np.where(start_bT, pos_T[None, :], 0), axis=1)
        word_keys = (seed, stream, rows_b[:, None], anchor_bT)
    unit = 1.0 / float(2**53)

    def uniform(salt, k=word_keys):  # [b, T] floats in [0, 1) from the top 53 bits
        return (pipeline.hash_u64(salt, *k) >> np.uint64(11)).astype(np.float64) * unit

    chosen = (uniform(_SALT_CHOOSE) < probability) & real_bT
    action = uniform(_SALT_ACTION)
    rand = pipeline.hash_u64(_SALT_RANDOM, *keys) % np.uint64(high - low)
    targets = tokens_bT.astype(np.int32)
    inputs = np.where(chosen & (action < 0.8), mask_id, targets)
    inputs = np.where(
        chosen & (action >= 0.8) & (action < 0.9), rand.astype(np.int32) + low, inputs
    )
    return {
        "inputs": inputs.astype(np.int32),
        "targets": targets,
        "weights": chosen.astype(np.float32),
    }


class MaskedLM:
    """Wraps a batch maker: its ``inputs`` (and which positions are real) get BERT masking.

    ``real`` says which positions of the base batch are real tokens: 'all' (LM training
    windows), 'nonpad' (padded classification inputs; rows with weight 0 are padding),
    'windows' (LM evaluation windows: positions before the split's end) or 'segments'
    (packed rows, ``seqjax.data.packing``: ``segment_ids`` > 0; ``segment_ids`` and
    ``positions`` pass through).
    """

    def __init__(self, base, *, real: str, seed: int, stream: int, mask_id: int, low: int,
                 probability: float, num_tokens: int = 0, words=None):  # fmt: skip
        self.base, self.real, self.seed, self.stream = base, real, seed, stream
        self.mask_id, self.low, self.probability = mask_id, low, probability
        self.num_tokens = num_tokens
        self.words = words  # whole-word masking: (starts_V, space_V) of ``word_tables``

    def word_starts(self, tokens_bT, batch) -> np.ndarray | None:
        """bool ``[b, T]``: where a word starts (None without whole-word masking)."""
        if self.words is None:
            return None
        starts_V, space_V = self.words
        ids_bT = np.clip(tokens_bT, 0, len(starts_V) - 1)
        space_bT = space_V[ids_bT]
        start_bT = starts_V[ids_bT] | space_bT
        start_bT[:, 1:] |= space_bT[:, :-1]
        if "positions" in batch:  # packed rows: every example starts a word
            start_bT |= batch["positions"] == 0
        return start_bT

    def __call__(self, step: int) -> dict[str, np.ndarray]:
        batch = self.base(step)
        tokens_bT = batch["inputs"]
        rows_b = self.base.rows(step)
        if self.real == "all":
            real_bT = np.ones(tokens_bT.shape, bool)
        elif self.real == "nonpad":
            real_bT = (tokens_bT != 0) & (batch["weights"] > 0)[:, None]
        elif self.real == "segments":  # packed rows (seqjax.data.packing)
            real_bT = batch["segment_ids"] > 0
        else:  # evaluation windows [g*T, (g+1)*T) over a split of num_tokens tokens
            T = tokens_bT.shape[1]
            idx_bT = rows_b[:, None] * T + np.arange(T)
            live_b = rows_b < eval_windows(self.num_tokens, T)
            real_bT = (idx_bT < self.num_tokens) & live_b[:, None]
        out = mask_tokens(
            tokens_bT, real_bT, rows_b, seed=self.seed, stream=self.stream,
            mask_id=self.mask_id, low=self.low, high=self.mask_id, probability=self.probability,
            word_start_bT=self.word_starts(tokens_bT, batch),
        )  # fmt: skip
        if self.real == "segments":
            out.update(segment_ids=batch["segment_ids"], positions=batch["positions"])
        return out


def mlm_problems(cfg) -> list[tuple[str, object, str]]:
    """Invalid ``config.data`` fields of the objectives as ``(field, value, valid)``."""
    problems = []
    objective = cfg.get("objective") or ""
    masked = objective == "mlm" or objective in MASKED_LM_READERS
    if objective not in OBJECTIVES and registry.objective(objective) is None:
        problems.append(("objective", objective, "'' (the data set's own task), 'mlm', "
                         "'span_corruption', 'lm', 'plm', 'bilm', 'denoising' or "
                         "'sop'"))  # fmt: skip
    if objective == "lm" and cfg.get("name") not in _example_texts():
        problems.append(("objective", objective, "'' for this data set (an LM corpus is the "
                         "LM task already); 'lm' reads the example texts of "
                         f"{' or '.join(_example_texts())}, one document per example"))  # fmt: skip
    texts = _corpora() + _example_texts()
    if objective == "bilm" and cfg.get("name") not in texts:
        problems.append(("objective", objective, "'' for this data set; 'bilm' reads a corpus "
                         f"or example texts ({', '.join(texts)})"))  # fmt: skip
    if masked:
        p = cfg.get("mlm_probability")
        if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0 < p < 1:
            problems.append(("mlm_probability", p, "a number 0 < p < 1 (BERT: 0.15)"))
        ww = cfg.get("mlm_whole_word", False)
        if not isinstance(ww, bool):
            problems.append(("mlm_whole_word", ww, "True or False"))
        elif ww and (cfg.get("name") == "listops" or cfg.get("vocab") == "words"):
            problems.append(("mlm_whole_word", ww, "False for listops and vocab='words' (their "
                             "tokens are whole words already; whole-word masking is for "
                             "sentencepiece pieces, bytes and chars)"))  # fmt: skip
        texts = _corpora() + _example_texts()
        if cfg.get("name") in registry.names() and cfg.get("name") not in texts:
            problems.append(("objective", objective, "'' for this data set; 'mlm' needs a "
                             f"text data set ({', '.join(texts)})"))  # fmt: skip
    if not masked and cfg.get("mlm_whole_word", False) not in (False, None):
        problems.append(("mlm_whole_word", cfg.get("mlm_whole_word"), "False unless "
                         "objective='mlm'"))  # fmt: skip
    if objective not in ("", None, "plm") and cfg.get("lm_batching") == "stream":
        problems.append(("lm_batching", "stream", f"'random' with objective={objective!r} "
                         "(streams serve 'plm' with model.kind='xlnet')"))  # fmt: skip
    if objective == "span_corruption":
        problems += span_corruption.problems(cfg)
    if objective == "plm":
        from seqjax.data import plm

        problems += plm.problems(cfg)
    if objective == "denoising":
        from seqjax.data import bart_noise

        problems += bart_noise.problems(cfg)
    if objective == "sop":
        from seqjax.data import sop

        problems += sop.problems(cfg)
    return problems


def wrap_mlm(maker, cfg, info, *, split: str, train: bool, kind: str, num_tokens: int = 0):
    """``maker`` with MLM masking; ``kind`` is 'lm' or 'classification' (the base data)."""
    if kind in ("classification", "packed"):
        real = "nonpad" if kind == "classification" else "segments"
    else:
        real = "all" if train else "windows"
    stream = 0 if train else 1 + ("train", "validation", "test").index(split)
    return MaskedLM(
        maker,
        real=real,
        seed=int(cfg.seed),
        stream=stream,
        mask_id=int(info.mask_id),
        low=mlm_low(info),
        probability=float(cfg.mlm_probability),
        num_tokens=num_tokens,
        words=word_tables(info) if cfg.get("mlm_whole_word") else None,
    )


_ASCII_SPACE_HEX = {b"%02X" % c for c in b" \t\n\r\x0b\x0c"}  # '<0x0A>' -> b'0A'


def word_tables(info) -> tuple[np.ndarray, np.ndarray]:
    """``(starts_V, space_V)`` bool over the data's ids ``[0, mask_id)``: ids that start a
    word (SentencePiece pieces beginning with '▁', control and unknown pieces) and ids that
    are whitespace (a word of their own, after which a word starts: bytes and chars, where a
    word is a run of non-whitespace ids, and SentencePiece's whitespace pieces)."""
    V = int(info.mask_id)
    if info.vocab_file:
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=info.vocab_file)
        pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
        starts = np.array([p.startswith("\u2581") for p in pieces], bool)
        starts |= np.array([sp.is_control(i) or sp.is_unknown(i) for i in range(len(pieces))])
        # whitespace pieces ('\n', '▁▁'; no dummy prefix): a word each, the next starts one
        space = np.array([p.replace("\u2581", " ").isspace() for p in pieces], bool)
        # byte-fallback pieces ('<0x09>'): characters outside the model (reviews of a split
        # the model was not trained on); an ASCII whitespace byte is a space like its piece
        space |= np.array([sp.is_byte(i) and p[3:5].encode() in _ASCII_SPACE_HEX
                           for i, p in enumerate(pieces)])  # fmt: skip
        pad = max(V - len(pieces), 0)
        return np.pad(starts, (0, pad))[:V], np.pad(space, (0, pad))[:V]
    space = np.array([info.decode(np.array([i], np.int32)).isspace() for i in range(V)], bool)
    return np.zeros(V, bool), space


def mlm_low(info) -> int:
    """The first ordinary id (random replacements are in ``[low, mask_id)``)."""
    if info.bos_id is not None:  # sentencepiece: 0 pad, 1 unk, 2 BOS, 3 EOS
        return 4
    return 1 if info.pad_id == 0 else 0


def eval_windows(n: int, seq_len: int) -> int:
    """LM evaluation windows of a split of ``n`` tokens (``pipeline.LMEvalWindows``)."""
    return math.ceil((n - 1) / seq_len)


# ------------------------------------ the objectives' DataInfo and iterators (`api` calls)


def base_data(cfg):
    """`config.data` without its objective: the text data set the objective reads."""
    return packing.base_data(cfg)


def make_mlm(cfg, split, process_index, process_count, train, base_make, base_info):
    """The base data set's batches with BERT masking (`api.make` with objective='mlm');
    `base_make`/`base_info` are `api.make`/`api.info`."""
    base_cfg = base_data(cfg)
    base = packing.base_iterator(base_cfg, split, process_index, process_count, train, base_make)
    maker, num_steps = base.maker, base.num_steps
    kind = "lm" if registry.get(cfg.name).task_of(base_cfg) == "lm" else "classification"
    n = len(maker.tokens()) if isinstance(maker, pipeline.LMEvalWindows) else 0
    eff = None
    if cfg.get("packing"):
        layout = (maker.global_batch, process_index, process_count)
        ex = packing.TextExamples(maker.source, maker.size, maker.max_len, maker.offset)
        maker = packing.PackedRows(ex, (maker.max_len,), maker.seed, *layout,
                                   align=int(cfg.get("packing_align", 1)))  # fmt: skip
        eff = packing.log_efficiency(maker, split)
        num_steps = None if train else math.ceil(maker.num_rows() / maker.global_batch)
        kind = "packed"
    wrapped = wrap_mlm(maker, cfg, mlm_info(cfg, base_info), split=split, train=train, kind=kind,
                       num_tokens=n)  # fmt: skip
    spec = {**base.spec, "objective": "mlm", "mlm_probability": float(cfg.mlm_probability),
            "packing": bool(cfg.get("packing"))}  # fmt: skip
    if cfg.get("mlm_whole_word"):
        spec["mlm_whole_word"] = True
    if cfg.get("packing") and int(cfg.get("packing_align", 1)) != 1:
        spec["packing_align"] = int(cfg.packing_align)
    it = pipeline.DataIterator(
        wrapped, num_steps, spec, num_workers=int(cfg.num_workers), prefetch=int(cfg.prefetch)
    )
    if eff is not None:
        it.packing_efficiency = eff
    return it


def mlm_info(cfg, base_info):
    """The text data set's info, [MASK] appended (task 'mlm'); `base_info` is `api.info`."""
    base = base_info(base_data(cfg))
    return dataclasses.replace(
        base, task="mlm", vocab_size=base.vocab_size + 1, mask_id=base.vocab_size
    )


def lm_info(cfg, base_info):
    """The LM of example texts (`packing.make` without packing): the texts' info, task 'lm'."""
    return dataclasses.replace(base_info(base_data(cfg)), task="lm", num_classes=None)


def _make_lm(cfg, split, process_index, process_count, train, base_make, base_info):
    return packing.make(cfg, split, process_index, process_count, train, base_make)


registry.register_objective(registry.Objective("mlm", "mlm", mlm_info, make_mlm))
registry.register_objective(registry.Objective("lm", "lm", lm_info, _make_lm))
