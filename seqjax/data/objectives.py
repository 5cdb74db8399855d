"""Pre-training objectives over the text data sets: BERT's masked LM (``config.data.objective
= 'mlm'``).

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

Every choice is a counter-based hash of ``(data.seed, global row, position)``
(``pipeline.hash_u64``), like every other batch: the same seed gives the same masks, and a
resumed run's grain iterator state restores the exact next masked batch. Evaluation masks
are fixed per split (the same positions at every evaluation).

Legend: B global batch, b per-process batch, T sequence length, V data vocabulary.
"""

from __future__ import annotations

import math

import numpy as np

from seqjax.data import pipeline

OBJECTIVES = ("", "mlm")
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
) -> dict[str, np.ndarray]:
    """BERT masking of ``tokens_bT`` (Devlin et al. 2019, §3.1): 80% [MASK] / 10% random /
    10% unchanged of the chosen ``probability`` share of the real positions.

    Args:
      tokens_bT: int ids ``[b, T]``.
      real_bT: bool ``[b, T]``, True where a token may be chosen (not padding).
      rows_b: the global row ids of the rows (the hash keys with ``seed`` and ``stream``).
      seed, stream: hash keys (``stream`` separates training from each evaluation split).
      mask_id: the [MASK] id; low, high: random replacements are uniform in ``[low, high)``.
      probability: the share of real tokens chosen.

    Returns:
      ``{'inputs': int32 [b, T], 'targets': int32 [b, T] (the original tokens),
      'weights': float32 [b, T] (1 at the chosen positions)}``.
    """
    pos_T = np.arange(tokens_bT.shape[1], dtype=np.int64)
    keys = (seed, stream, rows_b[:, None], pos_T[None, :])
    unit = 1.0 / float(2**53)

    def uniform(salt):  # [b, T] floats in [0, 1) from the top 53 bits of the hash
        return (pipeline.hash_u64(salt, *keys) >> np.uint64(11)).astype(np.float64) * unit

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
                 probability: float, num_tokens: int = 0):  # fmt: skip
        self.base, self.real, self.seed, self.stream = base, real, seed, stream
        self.mask_id, self.low, self.probability = mask_id, low, probability
        self.num_tokens = num_tokens

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
        )  # fmt: skip
        if self.real == "segments":
            out.update(segment_ids=batch["segment_ids"], positions=batch["positions"])
        return out


def mlm_problems(cfg) -> list[tuple[str, object, str]]:
    """Invalid ``config.data`` fields of the objectives as ``(field, value, valid)``."""
    problems = []
    objective = cfg.get("objective") or ""
    if objective not in OBJECTIVES:
        problems.append(("objective", objective, "'' (the data set's own task) or 'mlm'"))
    if objective == "mlm":
        p = cfg.get("mlm_probability")
        if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0 < p < 1:
            problems.append(("mlm_probability", p, "a number 0 < p < 1 (BERT: 0.15)"))
        if cfg.get("name") in ("duplication", "translation_jsonl", "wmt14_ende", "copy", "reverse"):
            problems.append(("objective", objective,
                             "'' for this data set; 'mlm' needs a text data set (pystdlib, "
                             "text_file, enwik8, text8, imdb_bytes, listops)"))  # fmt: skip
        if cfg.get("lm_batching") == "stream":
            problems.append(("lm_batching", "stream", "'random' with objective='mlm'"))
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
    )


def mlm_low(info) -> int:
    """The first ordinary id (random replacements are in ``[low, mask_id)``)."""
    if info.bos_id is not None:  # sentencepiece: 0 pad, 1 unk, 2 BOS, 3 EOS
        return 4
    return 1 if info.pad_id == 0 else 0


def eval_windows(n: int, seq_len: int) -> int:
    """LM evaluation windows of a split of ``n`` tokens (``pipeline.LMEvalWindows``)."""
    return math.ceil((n - 1) / seq_len)
