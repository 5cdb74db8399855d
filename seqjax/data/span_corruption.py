"""T5's span corruption (Raffel et al. 2020, §3.1.4 / §3.3.4) over a text corpus
(``config.data.objective='span_corruption'``): windows of a SentencePiece corpus whose
noise spans (15% of the tokens, mean length 3) are replaced by sentinel ids past the
vocabulary in the source, and spelt out after their sentinels in the target (seq2seq batches
of ``max_source_len`` / ``max_target_len``). With a warm start's tokenizer
(``config.data.vocab='hf:<folder>'``) the sentinels are its own ``<extra_id_0>``,
``<extra_id_1>``, ... (T5's: the top ids, downwards), and its pad and EOS ids are used.
Every span is a counter-based hash of ``(data.seed, global row)``, so resumed runs continue
exactly.

Legend: T window length (raw tokens), S max_source_len, K sentinels.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from seqjax.data import hf_vocab, packing, pipeline, registry, sources, subword

# ------------------------------------------------------------------ span corruption (T5)

SPAN_NOISE, SPAN_MEAN = 0.15, 3.0  # Raffel et al. 2020, §3.1.4 / §3.3.4
_SALT_SPANS = 14


def span_lengths(raw_len: int, noise: float = SPAN_NOISE, mean: float = SPAN_MEAN):
    """``(noise tokens, spans)`` of a ``raw_len``-token window (T5's rounding, >= 1 each)."""
    n_noise = min(max(int(round(raw_len * noise)), 1), raw_len - 1)
    n_spans = max(int(round(n_noise / mean)), 1)
    return n_noise, n_spans


def corrupted_lengths(raw_len: int) -> tuple[int, int]:
    """``(source, target)`` lengths, EOS included, of a corrupted ``raw_len`` window."""
    n_noise, n_spans = span_lengths(raw_len)
    return raw_len - n_noise + n_spans + 1, n_noise + n_spans + 1


def raw_length(max_source_len: int) -> int:
    """The longest window whose corrupted source fits ``max_source_len`` (EOS included)."""
    raw = max_source_len
    while raw > 2 and corrupted_lengths(raw)[0] > max_source_len:
        raw -= 1
    while corrupted_lengths(raw + 1)[0] <= max_source_len:
        raw += 1
    return raw


def _segments(n: int, k: int, keys) -> np.ndarray:
    """Lengths of a uniformly random split of ``n`` items into ``k`` non-empty segments."""
    if k <= 1:
        return np.array([n], np.int64)
    order = np.argsort(pipeline.hash_u64(*keys, np.arange(n - 1)), kind="stable")
    cuts = np.sort(order[: k - 1] + 1)
    return np.diff(np.concatenate([[0], cuts, [n]]))


def corrupt_spans(tokens: np.ndarray, keys, *, sentinel0: int = 0, eos_id: int,
                  sentinels=None):  # fmt: skip
    """T5 span corruption of one window (Raffel et al. 2020, §3.1.4, Fig. 2): 15% of the
    tokens in spans of mean length 3, each span replaced in the source by one sentinel
    (``sentinels[i]`` when given, else ``sentinel0 + i``); the target lists each sentinel
    and its span.

    Returns ``(source ids + EOS, target ids + EOS)`` (int32).
    """
    n = len(tokens)
    n_noise, n_spans = span_lengths(n)
    noise = _segments(n_noise, n_spans, (*keys, 1))
    keep = _segments(n - n_noise, n_spans, (*keys, 2))
    src, tgt, at = [], [], 0
    for i in range(n_spans):  # keep, then noise: the window starts with kept text
        sentinel = int(sentinels[i]) if sentinels is not None else sentinel0 + i
        src.append(tokens[at : at + keep[i]])
        at += keep[i]
        src.append([sentinel])
        tgt.append([sentinel])
        tgt.append(tokens[at : at + noise[i]])
        at += noise[i]
    src.append(tokens[at:])
    src.append([eos_id])
    tgt.append([eos_id])
    return np.concatenate(src).astype(np.int32), np.concatenate(tgt).astype(np.int32)


def num_sentinels(max_source_len: int) -> int:
    """Sentinel ids appended past the vocabulary: the spans of the longest window."""
    return span_lengths(raw_length(max_source_len))[1]


class SpanCorruption:
    """Wraps an LM window maker (``pipeline.LMRandomWindows`` / ``LMEvalWindows`` of
    ``raw_length`` tokens) into seq2seq batches: ``inputs [b, S]``, ``targets [b, T]``,
    ``weights [b, T]`` (1 on real target tokens), ``pad_id`` = padding, sentinels
    ``sentinels`` (default ``V, V+1, ...`` from ``sentinel0``)."""

    def __init__(self, base, *, seed: int, stream: int, sentinel0: int, eos_id: int,
                 source_len: int, target_len: int, num_tokens: int = 0, sentinels=None,
                 pad_id: int = 0):  # fmt: skip
        self.base, self.seed, self.stream = base, seed, stream
        self.sentinel0, self.eos_id = sentinel0, eos_id
        self.sentinels = None if sentinels is None else tuple(int(i) for i in sentinels)
        self.pad_id = int(pad_id)
        self.source_len, self.target_len, self.num_tokens = source_len, target_len, num_tokens

    def rows(self, step: int) -> np.ndarray:
        return self.base.rows(step)

    def __call__(self, step: int) -> dict[str, np.ndarray]:
        batch = self.base(step)
        windows = batch["inputs"]
        rows_b = self.base.rows(step)
        raw = windows.shape[1]
        b = len(rows_b)
        inputs = np.full((b, self.source_len), self.pad_id, np.int32)
        targets = np.full((b, self.target_len), self.pad_id, np.int32)
        for r, g in enumerate(rows_b.tolist()):
            n = raw
            if self.num_tokens:  # evaluation windows: only the split's tokens
                n = int(np.clip(self.num_tokens - g * raw, 0, raw))
            if n < 2:
                continue
            src, tgt = corrupt_spans(windows[r, :n], (self.seed, _SALT_SPANS, self.stream, g),
                                     sentinel0=self.sentinel0, eos_id=self.eos_id,
                                     sentinels=self.sentinels)  # fmt: skip
            inputs[r, : len(src)] = src
            targets[r, : len(tgt)] = tgt
        weights = (targets != self.pad_id).astype(np.float32)
        return {"inputs": inputs, "targets": targets, "weights": weights}


def base_data(cfg):
    """The corpus's `config.data` whose windows are the raw (uncorrupted) length."""
    base = packing.base_data(cfg)
    with base.unlocked():
        base.seq_len = raw_length(int(cfg.max_source_len))
    return base


def problems(cfg) -> list[tuple[str, object, str]]:
    """Invalid ``config.data`` fields with ``objective='span_corruption'``."""
    problems = []
    corpora = registry.names("corpus")
    if cfg.get("name") not in corpora:
        problems.append(("objective", "span_corruption", "'' for this data set; 'span_corruption' "
                         f"needs a text corpus ({', '.join(corpora)})"))  # fmt: skip
    if cfg.get("vocab") != "sentencepiece" and not hf_vocab.is_hf(cfg.get("vocab")):
        problems.append(("vocab", cfg.get("vocab"), "'sentencepiece' or 'hf:<folder>' with "
                         "objective='span_corruption' (pad, EOS, sentinels; T5)"))  # fmt: skip
    S, T = cfg.get("max_source_len"), cfg.get("max_target_len")
    if isinstance(S, int) and S >= 8 and isinstance(T, int):
        need = corrupted_lengths(raw_length(S))[1]
        if T < need:
            problems.append(("max_target_len", T, f">= {need} (the spans of a "
                             f"max_source_len={S} window, EOS included)"))  # fmt: skip
    elif not isinstance(S, int) or S < 8:
        problems.append(("max_source_len", S, "an integer >= 8"))
    return problems


def hf_specials(cfg, K: int):
    """``(pad, eos, sentinel ids)`` of an ``hf:<folder>`` vocabulary (its own tokens; one
    sentence when it lacks one), else None (SentencePiece: sentinels past the vocabulary)."""
    if not hf_vocab.is_hf(cfg.vocab):
        return None
    from seqjax.data import seq2seq

    v = hf_vocab.HFVocab(cfg.vocab[len(hf_vocab.PREFIX) :])
    pad, _, eos = seq2seq.special_ids(v)
    sentinels = v.sentinel_ids(K)
    if sentinels is None:
        raise sources.DataError(
            f"config.data.vocab={cfg.vocab!r}: span corruption of max_source_len="
            f"{cfg.max_source_len} needs the sentinel tokens <extra_id_0> .. <extra_id_{K - 1}>, "
            "which its tokenizer lacks (a T5 tokenizer has them)"
        )
    return pad, eos, sentinels


def span_info(cfg, base_info):
    """The corpus's SentencePiece info as seq2seq data with T5 sentinels past its vocabulary
    (a Hugging Face tokenizer's: its own sentinels, pad and EOS)."""
    base = base_info(base_data(cfg))
    V, K = base.vocab_size, num_sentinels(int(cfg.max_source_len))
    hf = hf_specials(cfg, K)
    if hf is not None:
        from seqjax.data import seq2seq

        pad, eos = hf[0], hf[1]
        v = hf_vocab.HFVocab(cfg.vocab[len(hf_vocab.PREFIX) :])
        return dataclasses.replace(
            base, task="seq2seq", seq_len=int(cfg.max_source_len),
            target_len=int(cfg.max_target_len), pad_id=pad, eos_id=eos, bos_id=v.bos_id,
            decode=functools.partial(seq2seq.decode_until_eos, v, pad, eos),
            encode=functools.partial(v.encode, special=False),
        )  # fmt: skip

    def decode(ids):
        ids = np.asarray(ids).reshape(-1)
        parts, run = [], []
        for i in ids.tolist():
            if i >= V:
                parts.append(base.decode(np.array(run, np.int32)) + f"<extra_id_{i - V}>")
                run = []
            else:
                run.append(i)
        return "".join(parts) + base.decode(np.array(run, np.int32))

    return dataclasses.replace(
        base, task="seq2seq", vocab_size=V + K, seq_len=int(cfg.max_source_len),
        target_len=int(cfg.max_target_len), pad_id=subword.PAD_ID, decode=decode,
    )  # fmt: skip


def make_spans(cfg, split, process_index, process_count, train, base_make, base_info):
    """The corpus's windows, T5 span-corrupted into seq2seq batches (`api.make`)."""
    base_cfg = base_data(cfg)
    base = packing.base_iterator(base_cfg, split, process_index, process_count, train, base_make)
    maker = base.maker
    n = len(maker.tokens()) if isinstance(maker, pipeline.LMEvalWindows) else 0
    inf = span_info(cfg, base_info)
    stream = 0 if train else 1 + ("train", "validation", "test").index(split)
    K = num_sentinels(int(cfg.max_source_len))
    pad, eos, sentinels = hf_specials(cfg, K) or (subword.PAD_ID, subword.EOS_ID, None)
    wrapped = SpanCorruption(
        maker, seed=int(cfg.seed), stream=stream, sentinel0=inf.vocab_size - K,
        eos_id=eos, source_len=int(cfg.max_source_len), target_len=int(cfg.max_target_len),
        num_tokens=n, sentinels=sentinels, pad_id=pad,
    )  # fmt: skip
    spec = {**base.spec, "objective": "span_corruption", "max_source_len": int(cfg.max_source_len),
            "max_target_len": int(cfg.max_target_len)}  # fmt: skip
    return pipeline.DataIterator(
        wrapped, base.num_steps, spec, num_workers=int(cfg.num_workers), prefetch=int(cfg.prefetch)
    )


registry.register_objective(registry.Objective("span_corruption", "seq2seq", span_info, make_spans))
