"""ALBERT's pre-training examples as a data objective (``config.data.objective='sop'``; Lan
et al. 2020, §3.1 and §4.1): sentence-order prediction pairs with n-gram masking over the
windows of a text corpus, for the ``mlm_pair`` task (masked LM + the pair head's loss).

Each row reads one window of ``2 (seq_len - 3)`` corpus ids (bytes or chars); its sentences
are the whole lines (each with its newline) after the window's first newline, as many as fit
``seq_len - 3`` ids (``target`` below). They are cut in two at a uniformly chosen sentence boundary
(``integers(1, k)`` of the reference's ``create_instances_from_document``); A is the first
part, B the second; with probability 1/2 they are swapped (label 1: the SOP negative is the
same two segments in the wrong order, never a random sentence). Whole lines on both sides
leave no positional cue (a segment that ends mid-line would tell the order). A row with
fewer than two whole lines that fit is its one line (or, when none of two ids or more
fits, the window's first ``seq_len - 3`` ids) cut at a uniformly chosen position instead,
and its pair weighs 0 (its masked LM counts; its order label would be readable from where
the newlines are). With probability ``short_seq_prob`` (0.1) the row's length is a random
shorter ``target`` (the reference's short sequences: the lines then fill that). The row is
``[CLS] A [SEP] B [SEP]`` (segment ids 0 / 1, then padding), masked by
``albert_pretraining.ngram_mask`` (n-grams of up to ``sop_ngram`` = 3 words, P(n) ∝ 1/n,
15 % of the tokens, 80/10/10); a word is a run of letters and digits together with the one
character before it (as SentencePiece's '▁' pieces: a space, punctuation or a
newline starts a word).

Ids: the corpus's + 1 (0 = padding), then [MASK] = V + 1, [CLS] = V + 2, [SEP] = V + 3.
Batches: ``inputs [b, T]`` (masked), ``token_types [b, T]``, ``targets [b, T]`` (the
unmasked ids), ``weights [b, T]`` (1 at the masked positions), ``pair_labels [b]`` (1 =
swapped), ``pair_weights [b]`` (1 for a row of whole lines). Every row draws from
``numpy.random.default_rng((data.seed, 16, stream, global row))``.

Legend: b per-process batch, T ``seq_len``, V corpus ids.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from seqjax.data import albert_pretraining, packing, pipeline, registry

VOCABS = ("bytes", "chars")
_SALT = 16
SEPARATOR = "\n"


def problems(cfg) -> list[tuple[str, object, str]]:
    """Invalid ``config.data`` fields with ``objective='sop'``."""
    corpora = registry.names("corpus")
    if cfg.get("name") not in corpora:
        return [("objective", "sop", "'' for this data set; 'sop' reads a text corpus "
                 f"({', '.join(corpora)})")]  # fmt: skip
    out = []
    if cfg.get("vocab") not in VOCABS:
        out.append(("vocab", cfg.get("vocab"), "'bytes' or 'chars' with objective='sop' (the "
                    "newline ends a sentence)"))  # fmt: skip
    t = cfg.get("seq_len")
    if not isinstance(t, int) or t < 8:
        out.append(("seq_len", t, "an integer >= 8 with objective='sop'"))
    n = cfg.get("sop_ngram")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        out.append(("sop_ngram", n, "an integer >= 1 (ALBERT: 3)"))
    p = cfg.get("mlm_probability")
    if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0 < p < 1:
        out.append(("mlm_probability", p, "a number 0 < p < 1 (ALBERT: 0.15)"))
    return out


def base_data(cfg):
    """The corpus's ``config.data`` with windows of ``2 (seq_len - 3)`` ids (whole lines that
    fill a row are found in them)."""
    base = packing.base_data(cfg)
    with base.unlocked():
        base.seq_len = 2 * (int(cfg.seq_len) - 3)
    return base


@dataclasses.dataclass(frozen=True)
class Ids:
    special: albert_pretraining.Special
    separator: int
    word_start: np.ndarray  # bool [V + 4]: ids that start a word


def special_ids(base) -> Ids:
    V = int(base.vocab_size)
    sep = np.asarray(base.encode(SEPARATOR)).reshape(-1)
    if sep.size != 1:
        raise ValueError(
            f"config.data.vocab: the corpus vocabulary has no single id for {SEPARATOR!r}; "
            "valid: a bytes or chars vocabulary containing it"
        )
    start = np.ones(V + 4, bool)
    for i in range(V):
        start[i + 1] = not base.decode(np.array([i], np.int32)).isalnum()
    special = albert_pretraining.Special(cls=V + 2, sep=V + 3, mask=V + 1,
                                         vocab=tuple(range(1, V + 1)))  # fmt: skip
    return Ids(special=special, separator=int(sep[0]) + 1, word_start=start)


def sentences(window: list, separator: int, max_tokens: int) -> list[list[int]]:
    """The whole lines of ``window`` (each ending with ``separator``), from after its first
    separator, as many as fit ``max_tokens`` in all; ``[]`` when not even one fits."""
    seps = [i for i, t in enumerate(window) if t == separator]
    out, used = [], 0
    for begin, end in zip(seps, seps[1:]):
        line = window[begin + 1 : end + 1]
        if used + len(line) > max_tokens:
            break
        out.append(line)
        used += len(line)
    return out


def pair_example(window, rng, ids: Ids, *, seq_len: int, short_seq_prob: float = 0.1,
                 masked_lm_prob: float = 0.15, ngram: int = 3) -> dict:  # fmt: skip
    """One row: the SOP pair of ``window`` (shifted ids), n-gram masked (module docstring)."""
    window = [int(t) for t in window]
    max_tokens = seq_len - 3
    target = max_tokens
    if rng.random() < short_seq_prob:
        target = int(rng.integers(2, max_tokens + 1))
    lines = sentences(window, ids.separator, target)
    if len(lines) >= 2:  # a_end over the sentences, as the reference's
        a_end = int(rng.integers(1, len(lines)))
        a, b = sum(lines[:a_end], []), sum(lines[a_end:], [])
    else:  # one sentence (or none) fits: it is cut at a uniform position
        text = lines[0] if lines and len(lines[0]) >= 2 else window[:max_tokens]
        cut = int(rng.integers(1, len(text)))
        a, b = text[:cut], text[cut:]
    swapped = bool(rng.random() < 0.5)
    if swapped:
        a, b = b, a
    albert_pretraining._truncate_pair(a, b, target, rng)
    tokens = [ids.special.cls, *a, ids.special.sep, *b, ids.special.sep]
    types = [0] * (len(a) + 2) + [1] * (len(b) + 1)
    masked, positions, labels, _ = albert_pretraining.ngram_mask(
        tokens, rng, ids.special, masked_lm_prob=masked_lm_prob,
        max_predictions=max(1, round(seq_len * masked_lm_prob)), ngram=ngram,
        is_start=lambda tok: bool(ids.word_start[tok]),
    )  # fmt: skip
    return dict(tokens=tokens, masked=masked, types=types, positions=positions,
                swapped=swapped, whole_lines=len(lines) >= 2)  # fmt: skip


class SentenceOrder:
    """Wraps an LM window maker into ``mlm_pair`` batches (module docstring)."""

    def __init__(self, base, *, seed: int, stream: int, ids: Ids, seq_len: int, ngram: int,
                 probability: float, num_tokens: int = 0):  # fmt: skip
        self.base, self.seed, self.stream, self.ids = base, seed, stream, ids
        self.seq_len, self.ngram, self.probability = seq_len, ngram, probability
        self.num_tokens = num_tokens

    def rows(self, step: int) -> np.ndarray:
        return self.base.rows(step)

    def __call__(self, step: int) -> dict[str, np.ndarray]:
        windows = np.asarray(self.base(step)["inputs"])
        rows_b = self.base.rows(step)
        raw, T, b = windows.shape[1], self.seq_len, len(rows_b)
        out = {k: np.zeros((b, T), np.int32) for k in ("inputs", "token_types", "targets")}
        out["weights"] = np.zeros((b, T), np.float32)
        out["pair_labels"] = np.zeros(b, np.int32)
        out["pair_weights"] = np.zeros(b, np.float32)
        for r, g in enumerate(rows_b.tolist()):
            n = raw
            if self.num_tokens:  # evaluation windows: only the split's tokens
                n = int(np.clip(self.num_tokens - g * raw, 0, raw))
            if n < 2:
                continue
            rng = np.random.default_rng((self.seed, _SALT, self.stream, g))
            ex = pair_example(windows[r, :n] + 1, rng, self.ids, seq_len=T,
                              masked_lm_prob=self.probability, ngram=self.ngram)  # fmt: skip
            k = len(ex["tokens"])
            out["inputs"][r, :k] = ex["masked"]
            out["targets"][r, :k] = ex["tokens"]
            out["token_types"][r, :k] = ex["types"]
            out["weights"][r, ex["positions"]] = 1.0
            out["pair_labels"][r] = int(ex["swapped"])
            out["pair_weights"][r] = float(ex["whole_lines"])
        return out


def sop_info(cfg, base_info):
    """The corpus's info, ids + 1, [MASK], [CLS], [SEP] appended (task ``mlm_pair``)."""
    base = base_info(base_data(cfg))
    V = int(base.vocab_size)

    def encode(text):
        return np.asarray(base.encode(text), np.int32) + 1

    def decode(ids_):
        names = {V + 1: "[MASK]", V + 2: "[CLS]", V + 3: "[SEP]"}
        return "".join(names.get(i) or base.decode(np.array([i - 1], np.int32))
                       for i in np.asarray(ids_).reshape(-1).tolist() if i > 0)  # fmt: skip

    return dataclasses.replace(
        base, task="mlm_pair", vocab_size=V + 4, seq_len=int(cfg.seq_len), pad_id=0,
        mask_id=V + 1, num_classes=2, encode=encode, decode=decode,
    )  # fmt: skip


def make_sop(cfg, split, process_index, process_count, train, base_make, base_info):
    """The corpus's windows as SOP pairs with n-gram masking (``api.make``)."""
    bcfg = base_data(cfg)
    base = packing.base_iterator(bcfg, split, process_index, process_count, train, base_make)
    maker = base.maker
    n = len(maker.tokens()) if isinstance(maker, pipeline.LMEvalWindows) else 0
    stream = 0 if train else 1 + ("train", "validation", "test").index(split)
    wrapped = SentenceOrder(
        maker, seed=int(cfg.seed), stream=stream, ids=special_ids(base_info(bcfg)),
        seq_len=int(cfg.seq_len), ngram=int(cfg.sop_ngram),
        probability=float(cfg.mlm_probability), num_tokens=n,
    )  # fmt: skip
    spec = {**base.spec, "objective": "sop", "seq_len": int(cfg.seq_len),
            "sop_ngram": int(cfg.sop_ngram),
            "mlm_probability": float(cfg.mlm_probability)}  # fmt: skip
    return pipeline.DataIterator(
        wrapped, base.num_steps, spec, num_workers=int(cfg.num_workers), prefetch=int(cfg.prefetch)
    )


registry.register_objective(registry.Objective("sop", "mlm_pair", sop_info, make_sop))
