"""Fine-tuning data built from a text corpus, for BERT's per-token heads (Devlin et al. 2019,
§4.2 SQuAD, §5.3 CoNLL-2003 NER). The shared data folder has no QA or NER set (no SQuAD, no
CoNLL: ``../shared/data/README.md``), so these are **synthetic tasks on real text**, honest
stand-ins that exercise the same heads, inputs and losses:

* ``data.objective='span_qa'`` (task 'qa'): extractive "find the span". From each corpus window
  (the context, ``seq_len`` tokens) a span of 1..``qa_max_answer`` tokens is chosen; the
  question is that span's text; the answer is its **first** occurrence in the context. The
  input is BERT's ``[CLS] question [SEP] context [SEP]`` (question padded to
  ``qa_max_answer``) with segment ids 0 then 1; ``start``/``end`` are the answer's first and
  last input positions. Ids past the corpus vocabulary V: ``[CLS]`` = V, ``[SEP]`` = V + 1,
  padding = V + 2.
* ``data.objective='word_tags'`` (task 'tagging'): each word (a run of letters) is tagged on
  its **first** token by its capitalisation and length: ``3 * capitalised + (0: 1-3 letters,
  1: 4-6, 2: 7 or more)`` (6 tags; the length needs the tokens to the right). Its other tokens
  and every non-word token are ignored (weight 0), as Hugging Face labels only a word's first
  sub-token (``-100`` elsewhere); so is a word cut by the window's edges.

Both read a corpus with ``vocab='bytes'`` or ``'chars'`` (a token is one character; the rule
reads ``DataInfo.decode``), e.g. ``text_file`` on ``../shared/data/tinyshakespeare/input.txt``.
Windows are the corpus's LM windows (random in training, the split's in evaluation); the
choices are functions of ``(data.seed, split, row)``.

Legend: b rows per process, C = ``data.seq_len`` context tokens, Q = ``qa_max_answer``,
T = Q + C + 3 input tokens.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from seqjax.data import packing, pipeline, registry

NUM_TAGS = 6
FIELDS = {"qa_max_answer": 4}


def qa_length(cfg) -> int:
    """Input tokens of a ``span_qa`` example: ``[CLS] Q [SEP] C [SEP]``."""
    return int(cfg.get("qa_max_answer", 4)) + int(cfg.seq_len) + 3


def qa_example(window_C: np.ndarray, rng, *, max_answer: int, vocab_size: int) -> dict:
    """One ``span_qa`` example of a context window (module docstring)."""
    c = len(window_C)
    length = int(rng.integers(1, max_answer + 1))
    s = int(rng.integers(0, c - length + 1))
    span = window_C[s : s + length]
    first = next(i for i in range(c - length + 1) if np.array_equal(window_C[i : i + length], span))
    cls, sep, pad = vocab_size, vocab_size + 1, vocab_size + 2
    question = np.full(max_answer, pad, np.int64)
    question[:length] = span
    inputs = np.concatenate([[cls], question, [sep], window_C, [sep]])
    types = np.zeros(len(inputs), np.int64)
    types[max_answer + 2 :] = 1
    start = 1 + max_answer + 1 + first
    return {"inputs": inputs, "token_types": types, "start": start, "end": start + length - 1}


def word_tags(chars: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """``(tags [C], weights [C])`` of one window's characters (module docstring)."""
    c = len(chars)
    tags, weights = np.zeros(c, np.int64), np.zeros(c, np.float32)
    i = 0
    while i < c:
        if not chars[i].isalpha():
            i += 1
            continue
        j = i
        while j < c and chars[j].isalpha():
            j += 1
        if i > 0 and j < c:  # a whole word inside the window
            size = j - i
            tags[i] = 3 * chars[i].isupper() + (0 if size <= 3 else 1 if size <= 6 else 2)
            weights[i] = 1.0
        i = j
    return tags, weights


class _Wrapped:
    """Wraps an LM window maker; each row's example is a function of (seed, stream, row)."""

    def __init__(self, base, *, seed: int, stream: int, info, max_answer: int, kind: str):
        self.base, self.seed, self.stream = base, seed, stream
        self.vocab_size, self.max_answer, self.kind = int(info.vocab_size), max_answer, kind
        self.chars = [info.decode(np.array([i])) for i in range(self.vocab_size)]

    def rows(self, step):
        return self.base.rows(step)

    def __call__(self, step: int) -> dict[str, np.ndarray]:
        batch = self.base(step)
        windows_bC = np.asarray(batch["inputs"])
        valid_b = (np.asarray(batch["weights"]) > 0).all(1)  # an eval window past the end: 0
        if self.kind == "tagging":
            out = [word_tags([self.chars[t] for t in w]) for w in windows_bC]
            tags = np.stack([o[0] for o in out]).astype(np.int32)
            weights = np.stack([o[1] for o in out]) * valid_b[:, None]
            return {"inputs": windows_bC.astype(np.int32), "targets": tags,
                    "weights": weights.astype(np.float32)}  # fmt: skip
        ex = []
        for row, w in zip(self.base.rows(step), windows_bC):
            rng = np.random.default_rng((self.seed, self.stream, int(row)))
            ex.append(qa_example(w, rng, max_answer=self.max_answer, vocab_size=self.vocab_size))
        return {
            "inputs": np.stack([e["inputs"] for e in ex]).astype(np.int32),
            "token_types": np.stack([e["token_types"] for e in ex]).astype(np.int32),
            "start": np.array([e["start"] for e in ex], np.int32),
            "end": np.array([e["end"] for e in ex], np.int32),
            "weights": valid_b.astype(np.float32),
        }


def _make(kind: str):
    def make(cfg, split, process_index, process_count, train, base_make, base_info):
        base_cfg = packing.base_data(cfg)
        base = packing.base_iterator(base_cfg, split, process_index, process_count, train,
                                     base_make)  # fmt: skip
        stream = 0 if train else 1 + ("train", "validation", "test").index(split)
        max_answer = int(cfg.get("qa_max_answer", 4))
        wrapped = _Wrapped(base.maker, seed=int(cfg.seed), stream=stream,
                           info=base_info(base_cfg), max_answer=max_answer, kind=kind)  # fmt: skip
        spec = {**base.spec, "objective": cfg.objective}
        if kind == "qa":
            spec["qa_max_answer"] = max_answer
        return pipeline.DataIterator(wrapped, base.num_steps, spec,
                                     num_workers=int(cfg.num_workers),
                                     prefetch=int(cfg.prefetch))  # fmt: skip

    return make


def qa_info(cfg, base_info):
    """The corpus's info plus [CLS], [SEP] and padding (task 'qa', 2 outputs a token)."""
    base = base_info(packing.base_data(cfg))
    v = int(base.vocab_size)
    return dataclasses.replace(base, task="qa", vocab_size=v + 3, pad_id=v + 2, num_classes=2,
                               seq_len=qa_length(cfg))  # fmt: skip


def tags_info(cfg, base_info):
    """The corpus's info (task 'tagging', ``NUM_TAGS`` classes)."""
    base = base_info(packing.base_data(cfg))
    return dataclasses.replace(base, task="tagging", num_classes=NUM_TAGS)


def problems(cfg) -> list[tuple[str, object, str]]:
    """Invalid ``config.data`` fields of these objectives as ``(field, value, valid)``."""
    objective = cfg.get("objective")
    if objective not in ("span_qa", "word_tags"):
        return []
    out = []
    if cfg.get("name") not in registry.names("corpus"):
        out.append(("objective", objective, f"'' for this data set; {objective!r} reads a "
                    f"corpus ({', '.join(registry.names('corpus'))})"))  # fmt: skip
    if cfg.get("vocab", "bytes") not in ("bytes", "chars"):
        out.append(("vocab", cfg.get("vocab"), f"'bytes' or 'chars' with objective={objective!r}"
                    " (one character a token)"))  # fmt: skip
    q, n = cfg.get("qa_max_answer", 4), cfg.get("seq_len")
    if objective == "span_qa" and (not isinstance(q, int) or not 1 <= q <= (n or 0)):
        out.append(("qa_max_answer", q, f"an integer in [1, data.seq_len={n}]"))
    return out


registry.register_objective(registry.Objective("span_qa", "qa", qa_info, _make("qa")))
registry.register_objective(registry.Objective("word_tags", "tagging", tags_info,
                                               _make("tagging")))  # fmt: skip
