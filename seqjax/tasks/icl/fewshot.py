"""Tasks for in-context evaluation from local JSONL files, few-shot prompts and their metrics
(zero-, one- and few-shot evaluation as in Brown et al. 2020, §2 and Fig. 2.1; prompts, request
types and metrics as lm-evaluation-harness defines them).

Task kinds (one JSON object a line):

==================  ===========================================  ==========================
kind                fields                                       metrics
==================  ===========================================  ==========================
multiple_choice     ``query``, ``choices`` (list), ``gold`` (int)  acc, acc_norm
cloze               ``context``, ``target`` (the last word)      acc (greedy), logprob, ppl
translation         ``source``, ``target``                       bleu, exact_match
==================  ===========================================  ==========================

A prompt is ``description + (example_1 + fewshot_delimiter) ... + text(doc)``: ``k`` examples
drawn without replacement (never the document itself) from the training docs with
``random.Random(seed)`` shared by the documents in order (so a seed fixes every prompt), each
``text(example) + target_delimiter + target(example)``; ``k = 0`` gives ``text(doc)`` alone:
the template filled with the document's fields (``str.format``). Scoring:

* multiple choice: ``loglikelihood(prompt, target_delimiter + choice)`` per choice; ``acc``
  picks the largest sum, ``acc_norm`` the largest sum per character of the choice (the
  harness's ``acc_norm``);
* cloze: ``loglikelihood(prompt, target_delimiter + target)``; ``acc`` = the target is the
  greedy continuation (LAMBADA's accuracy, Paperno et al. 2016), ``logprob`` its mean sum
  of log-probabilities (nats), ``ppl`` = exp(-logprob);
* translation: ``generate_until(prompt, until="\\n")``, stripped; corpus ``bleu``
  (sacrebleu) and ``exact_match``.

Standard errors: ``stddev(x, ddof=1) / sqrt(n)`` of the per-document scores (the harness's
``mean_stderr``); BLEU's by 100 bootstrap resamples of the documents (seeded).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path

import numpy as np

KINDS = ("multiple_choice", "cloze", "translation")
FIELDS = {
    "multiple_choice": ("query", "choices", "gold"),
    "cloze": ("context", "target"),
    "translation": ("source", "target"),
}
TEMPLATES = {"multiple_choice": "{query}", "cloze": "{context}", "translation": "{source} ="}


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """How a task's documents become prompts (module docstring)."""

    kind: str
    template: str = ""
    target_delimiter: str = " "
    fewshot_delimiter: str = "\n\n"
    description: str = ""
    max_gen_toks: int = 32

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"task kind={self.kind!r} is not one of {KINDS}")

    def text(self, doc: dict) -> str:
        template = self.template or TEMPLATES[self.kind]
        try:
            return template.format(**doc)
        except (KeyError, IndexError) as e:
            raise ValueError(
                f"template={template!r} names field {e} that the document lacks; its fields: "
                f"{sorted(doc)}"
            ) from None

    def target(self, doc: dict) -> str:
        if self.kind == "multiple_choice":
            return doc["choices"][doc["gold"]]
        return doc["target"]


def load_jsonl(path, kind: str) -> list[dict]:
    """The documents of a JSONL file, checked for ``kind``'s fields (one-sentence error)."""
    if kind not in KINDS:
        raise ValueError(f"task kind={kind!r} is not one of {KINDS}")
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"task file {str(p)!r} does not exist")
    docs = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except ValueError as e:
            raise ValueError(f"{p}:{n} is not valid JSON ({e})") from None
        missing = [f for f in FIELDS[kind] if f not in doc]
        if missing:
            raise ValueError(f"{p}:{n} has no field {missing[0]!r}; a {kind} task needs "
                             f"{list(FIELDS[kind])}")  # fmt: skip
        if kind == "multiple_choice" and not (
            isinstance(doc["choices"], list) and isinstance(doc["gold"], int)
            and 0 <= doc["gold"] < len(doc["choices"])
        ):  # fmt: skip
            raise ValueError(f"{p}:{n}: gold must index choices (0..{len(doc['choices']) - 1})")
        docs.append(doc)
    if not docs:
        raise ValueError(f"task file {str(p)!r} has no documents")
    return docs


def fewshot_prompts(spec: TaskSpec, docs, train_docs, k: int, seed: int = 1234) -> list[str]:
    """The prompt of every document with ``k`` examples (module docstring)."""
    if k < 0:
        raise ValueError(f"num_fewshot={k} must be >= 0")
    rnd = random.Random(seed)
    prompts = []
    for doc in docs:
        pool = [d for d in train_docs if d != doc]
        if k > len(pool):
            raise ValueError(f"num_fewshot={k} needs {k} training examples; there are {len(pool)}")
        shots = rnd.sample(pool, k) if k else []
        labeled = "".join(
            spec.text(d) + spec.target_delimiter + spec.target(d) + spec.fewshot_delimiter
            for d in shots
        )
        prompts.append(spec.description + labeled + spec.text(doc))
    return prompts


def mean_stderr(x) -> tuple[float, float]:
    """Mean and its standard error ``stddev(ddof=1) / sqrt(n)`` (0 for one value)."""
    x = np.asarray(x, np.float64)
    err = float(np.std(x, ddof=1) / math.sqrt(len(x))) if len(x) > 1 else 0.0
    return float(np.mean(x)), err


def bleu(preds, refs) -> float:
    """Corpus BLEU (sacrebleu, its default 13a tokenization)."""
    import sacrebleu

    return float(sacrebleu.corpus_bleu(list(preds), [list(refs)]).score)


def evaluate(scorer, spec: TaskSpec, docs, train_docs, k: int, seed: int = 1234) -> dict:
    """The task's metrics (and ``<metric>_stderr``) for ``k`` examples per prompt."""
    prompts = fewshot_prompts(spec, docs, train_docs, k, seed)
    out = {"num_fewshot": k, "n": len(docs)}
    if spec.kind == "multiple_choice":
        reqs, owner = [], []
        for j, (doc, prompt) in enumerate(zip(docs, prompts)):
            reqs += [(prompt, spec.target_delimiter + c) for c in doc["choices"]]
            owner += [j] * len(doc["choices"])
        lls = [ll for ll, _ in scorer.loglikelihood(reqs)]
        acc, acc_norm, at = [], [], 0
        for doc in docs:
            ll = np.array(lls[at : at + len(doc["choices"])])
            chars = np.array([float(len(c)) for c in doc["choices"]])
            at += len(doc["choices"])
            acc.append(float(np.argmax(ll) == doc["gold"]))
            acc_norm.append(float(np.argmax(ll / chars) == doc["gold"]))
        metrics = {"acc": acc, "acc_norm": acc_norm}
    elif spec.kind == "cloze":
        res = scorer.loglikelihood(
            [(p, spec.target_delimiter + d["target"]) for d, p in zip(docs, prompts)]
        )
        metrics = {"acc": [float(g) for _, g in res], "logprob": [ll for ll, _ in res]}
        out["ppl"] = float(math.exp(-np.mean([ll for ll, _ in res])))
    else:
        gen = {"until": ["\n"], "max_gen_toks": spec.max_gen_toks}
        preds = [s.strip() for s in scorer.generate_until([(p, gen) for p in prompts])]
        refs = [d["target"].strip() for d in docs]
        metrics = {"exact_match": [float(p == r) for p, r in zip(preds, refs)]}
        out["bleu"] = bleu(preds, refs)
        rng = np.random.default_rng(seed)
        boots = [bleu(*zip(*[(preds[i], refs[i]) for i in rng.integers(0, len(docs), len(docs))]))
                 for _ in range(100)]  # fmt: skip
        out["bleu_stderr"] = float(np.std(boots, ddof=1))
        out["predictions"] = preds
    for name, values in metrics.items():
        out[name], out[f"{name}_stderr"] = mean_stderr(values)
    return out
