"""BART's denoising pre-training as a data objective (``config.data.objective='denoising'``;
Lewis et al. 2020, §2.2, Fig. 2 and Table 1): seq2seq batches whose target is a clean
document of a text corpus and whose source is that document noised by
``seqjax.data.denoising`` (the encoder reads the noised text, the decoder reconstructs the
original; task ``seq2seq``, family ``encoder_decoder``).

``config.data.noise`` picks the noise, one name or several joined by '+' (applied in
fairseq's order: permutation, then masking/deletion/infilling, then rotation):

* ``masking``: ``noise_ratio`` (30 %) of the words replaced by ``<mask>``, one word each;
* ``deletion``: the same choice, deleted;
* ``infilling``: spans of Poisson(``noise_lambda`` = 3.5) words covering ``noise_ratio`` of
  the words, each span one ``<mask>`` (a 0-length span inserts one);
* ``permutation``: the document's sentences (lines) shuffled;
* ``rotation``: the document rotated to start at a uniformly chosen token.

At most one of masking / deletion / infilling per combination (they are one slot of
fairseq's pipeline). The paper's final BART: ``infilling+permutation``.

**Documents and sentences.** The corpus (bytes or chars; ``text_file``, ``pystdlib``,
``enwik8``, ``text8``) is read in windows of ``max_target_len - 2`` ids; each window is cut
to whole lines (from after its first newline to its last newline, included), so a document
is ``[BOS] line_1 \\n ... line_k \\n [EOS]`` and the newline is the dedicated sentence
separator. A window with two newlines keeps its first (partial) line and ends at the second
newline (two sentences); one with fewer is kept uncut and is not permuted (a one-sentence
document has nothing to permute: ``permute_sentences`` would refuse it). The end-of-sentence
tokens are never stripped, the separator is never the padding id (ids are the data's + 1,
0 = padding) and the noises act on the unpadded document, padding after it (the fairseq
pitfalls; ``tests/data/test_bart_objective.py``). Words (masking, infilling) are runs of
non-whitespace ids, every whitespace id a word of its own.

Ids: the corpus's ids + 1 (0 = padding), then ``<mask>`` = V + 1, [BOS] = V + 2, [EOS] =
V + 3 (V: the corpus's vocabulary; bytes: 256, so ids 1..256 equal ``imdb_bytes``' bytes).
Batches: ``inputs [b, S]`` (noised + EOS, cut to S with EOS kept), ``targets [b, T]``
(the document), ``weights [b, T]`` (1 on its ids). Every row draws from
``numpy.random.default_rng((data.seed, 15, stream, global row))``: the same seed gives the
same noise, a resumed run the same next batch, evaluation noise is fixed per split.

Legend: b per-process batch, S ``max_source_len``, T ``max_target_len``, V corpus ids.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from seqjax.data import denoising, packing, pipeline, registry

NOISES = ("masking", "deletion", "infilling", "permutation", "rotation")
_SLOT = ("masking", "deletion", "infilling")  # one masking noise per combination
VOCABS = ("bytes", "chars")
_SALT = 15
SEPARATOR = "\n"  # the sentence separator (the corpus's line structure)


def parse_noise(value) -> tuple[str, ...]:
    """``'infilling+permutation'`` -> ``('infilling', 'permutation')``.

    Raises:
      ValueError: an unknown or repeated name, or two masking noises.
    """
    parts = tuple(value.split("+")) if isinstance(value, str) and value else ()
    ok = (parts and all(p in NOISES for p in parts) and len(set(parts)) == len(parts)
          and sum(p in _SLOT for p in parts) <= 1)  # fmt: skip
    if not ok:
        raise ValueError(
            f"config.data.noise={value!r} is invalid; valid: one of {', '.join(NOISES)} or "
            "several joined by '+' with at most one of masking, deletion, infilling "
            "(e.g. 'infilling+permutation')."
        )
    return parts


def problems(cfg) -> list[tuple[str, object, str]]:
    """Invalid ``config.data`` fields with ``objective='denoising'``."""
    out = []
    corpora = registry.names("corpus")
    if cfg.get("name") not in corpora:
        return [("objective", "denoising", "'' for this data set; 'denoising' reads a text "
                 f"corpus ({', '.join(corpora)})")]  # fmt: skip
    if cfg.get("vocab") not in VOCABS:
        out.append(("vocab", cfg.get("vocab"), "'bytes' or 'chars' with objective='denoising' "
                    "(the newline is the sentence separator)"))  # fmt: skip
    try:
        parse_noise(cfg.get("noise"))
    except ValueError:
        out.append(("noise", cfg.get("noise"), f"one of {', '.join(NOISES)} or several joined "
                    "by '+', at most one of masking/deletion/infilling"))  # fmt: skip
    r = cfg.get("noise_ratio")
    if not isinstance(r, (int, float)) or isinstance(r, bool) or not 0 < r < 1:
        out.append(("noise_ratio", r, "a number 0 < r < 1 (BART: 0.3)"))
    lam = cfg.get("noise_lambda")
    if not isinstance(lam, (int, float)) or isinstance(lam, bool) or lam <= 0:
        out.append(("noise_lambda", lam, "a number > 0 (BART: 3.5)"))
    S, T = cfg.get("max_source_len"), cfg.get("max_target_len")
    if not isinstance(T, int) or T < 8:
        out.append(("max_target_len", T, "an integer >= 8 with objective='denoising'"))
    elif not isinstance(S, int) or S < T:
        out.append(("max_source_len", S, f">= max_target_len={T} (the noised document)"))
    return out


def base_data(cfg):
    """The corpus's ``config.data`` with windows of ``max_target_len - 2`` ids."""
    base = packing.base_data(cfg)
    with base.unlocked():
        base.seq_len = int(cfg.max_target_len) - 2
    return base


@dataclasses.dataclass(frozen=True)
class Ids:
    """The objective's special ids and the per-id tables (shifted ids)."""

    mask: int
    bos: int
    eos: int
    separator: int
    space: np.ndarray  # bool [V + 4]: whitespace ids (a word each)


def special_ids(base) -> Ids:
    """The ids of the objective over a corpus with ``DataInfo`` ``base``."""
    V = int(base.vocab_size)
    sep = np.asarray(base.encode(SEPARATOR)).reshape(-1)
    if sep.size != 1:
        raise ValueError(
            f"config.data.vocab: the corpus vocabulary has no single id for the sentence "
            f"separator {SEPARATOR!r}; valid: a bytes or chars vocabulary containing it"
        )
    space = np.zeros(V + 4, bool)
    for i in range(V):
        space[i + 1] = base.decode(np.array([i], np.int32)).isspace()
    return Ids(mask=V + 1, bos=V + 2, eos=V + 3, separator=int(sep[0]) + 1, space=space)


def document(window, ids: Ids) -> tuple[np.ndarray, int]:
    """``[BOS] whole lines [EOS]`` of a shifted window, and its number of sentences."""
    window = np.asarray(window)
    seps = np.flatnonzero(window == ids.separator)
    if len(seps) >= 3:  # at least two whole lines
        body, sentences = window[seps[0] + 1 : seps[-1] + 1], len(seps) - 1
    elif len(seps) == 2:  # a line's end and one whole line
        body, sentences = window[: seps[-1] + 1], 2
    else:
        body, sentences = window, 1
    return np.concatenate([[ids.bos], body, [ids.eos]]).astype(np.int32), sentences


def word_starts(doc, ids: Ids) -> np.ndarray:
    """bool ``[N]``: a whitespace id, or a non-whitespace id after whitespace or [BOS]."""
    space = ids.space[np.clip(doc, 0, len(ids.space) - 1)]
    prev = np.concatenate([[True], space[:-1]])
    return space | prev


def noise_document(doc, sentences: int, rng, noise: tuple[str, ...], ids: Ids, *,
                   ratio: float, lam: float, vocab_size: int) -> np.ndarray:  # fmt: skip
    """The noised source of one document (``[BOS] ... [EOS]``, unpadded)."""
    src = np.asarray(doc)
    if "permutation" in noise and sentences >= 2:
        src = denoising.permute_sentences(src, rng, separator_id=ids.separator, p=1.0, pad_id=0)
    slot = [n for n in noise if n in _SLOT]
    if slot:
        src = denoising.mask_spans(
            src, rng, ratio=ratio, mask_id=ids.mask, vocab_size=vocab_size,
            span_probs=denoising.poisson_span_probs(lam) if slot[0] == "infilling" else None,
            replace_length=0 if slot[0] == "deletion" else 1, word_starts=word_starts(src, ids),
        )  # fmt: skip
    if "rotation" in noise:
        src = denoising.rotate(src, rng, pad_id=0)
    return src.astype(np.int32)


class Denoising:
    """Wraps an LM window maker into BART's seq2seq batches (module docstring)."""

    def __init__(self, base, *, seed: int, stream: int, noise, ids: Ids, ratio: float,
                 lam: float, vocab_size: int, source_len: int, target_len: int,
                 num_tokens: int = 0):  # fmt: skip
        self.base, self.seed, self.stream, self.noise, self.ids = base, seed, stream, noise, ids
        self.ratio, self.lam, self.vocab_size = ratio, lam, vocab_size
        self.source_len, self.target_len, self.num_tokens = source_len, target_len, num_tokens

    def rows(self, step: int) -> np.ndarray:
        return self.base.rows(step)

    def __call__(self, step: int) -> dict[str, np.ndarray]:
        windows = np.asarray(self.base(step)["inputs"])
        rows_b = self.base.rows(step)
        raw = windows.shape[1]
        b = len(rows_b)
        inputs = np.zeros((b, self.source_len), np.int32)
        targets = np.zeros((b, self.target_len), np.int32)
        for r, g in enumerate(rows_b.tolist()):
            n = raw
            if self.num_tokens:  # evaluation windows: only the split's tokens
                n = int(np.clip(self.num_tokens - g * raw, 0, raw))
            if n < 2:
                continue
            doc, sentences = document(windows[r, :n] + 1, self.ids)
            rng = np.random.default_rng((self.seed, _SALT, self.stream, g))
            src = noise_document(doc, sentences, rng, self.noise, self.ids, ratio=self.ratio,
                                 lam=self.lam, vocab_size=self.vocab_size)  # fmt: skip
            if len(src) > self.source_len:  # (insertions only) cut, EOS kept
                src = np.concatenate([src[: self.source_len - 1], [self.ids.eos]])
            inputs[r, : len(src)] = src
            targets[r, : len(doc)] = doc
        return {"inputs": inputs, "targets": targets, "weights": (targets > 0).astype(np.float32)}


def denoising_info(cfg, base_info):
    """The corpus's info as seq2seq data: ids + 1, ``<mask>``, [BOS], [EOS] appended."""
    base = base_info(base_data(cfg))
    ids = special_ids(base)
    V = int(base.vocab_size)

    def encode(text):
        return np.asarray(base.encode(text), np.int32) + 1

    def decode(ids_):
        out = []
        for i in np.asarray(ids_).reshape(-1).tolist():
            if i == ids.eos:
                break
            if i == ids.mask:
                out.append("<mask>")
            elif 0 < i <= V:
                out.append(base.decode(np.array([i - 1], np.int32)))
        return "".join(out)

    return dataclasses.replace(
        base, task="seq2seq", vocab_size=V + 4, seq_len=int(cfg.max_source_len),
        target_len=int(cfg.max_target_len), pad_id=0, bos_id=ids.bos, eos_id=ids.eos,
        mask_id=ids.mask, encode=encode, decode=decode, num_classes=None,
    )  # fmt: skip


def make_denoising(cfg, split, process_index, process_count, train, base_make, base_info):
    """The corpus's windows, BART-noised into seq2seq batches (``api.make``)."""
    base = packing.base_iterator(base_data(cfg), split, process_index, process_count, train,
                                 base_make)  # fmt: skip
    maker = base.maker
    n = len(maker.tokens()) if isinstance(maker, pipeline.LMEvalWindows) else 0
    inf = denoising_info(cfg, base_info)
    stream = 0 if train else 1 + ("train", "validation", "test").index(split)
    noise = parse_noise(cfg.noise)
    wrapped = Denoising(
        maker, seed=int(cfg.seed), stream=stream, noise=noise,
        ids=special_ids(base_info(base_data(cfg))), ratio=float(cfg.noise_ratio),
        lam=float(cfg.noise_lambda), vocab_size=inf.vocab_size,
        source_len=int(cfg.max_source_len), target_len=int(cfg.max_target_len), num_tokens=n,
    )  # fmt: skip
    spec = {**base.spec, "objective": "denoising", "noise": "+".join(noise),
            "noise_ratio": float(cfg.noise_ratio), "noise_lambda": float(cfg.noise_lambda),
            "max_source_len": int(cfg.max_source_len),
            "max_target_len": int(cfg.max_target_len)}  # fmt: skip
    return pipeline.DataIterator(
        wrapped, base.num_steps, spec, num_workers=int(cfg.num_workers), prefetch=int(cfg.prefetch)
    )


registry.register_objective(
    registry.Objective("denoising", "seq2seq", denoising_info, make_denoising)
)
