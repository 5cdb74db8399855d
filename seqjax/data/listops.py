"""ListOps generator (Long Range Arena, Tay et al. 2020, Long ListOps task).

Follows LRA's `listops.py` generator: a node at depth < `max_depth` is an operator with
probability 0.25 (`VALUE_P`), otherwise a digit 0-9; nodes at `max_depth` are digits; an operator
node takes 2..`max_args` arguments and is one of MIN, MAX, MED (int of the median), SM (sum mod
10). The length counts 1 per digit and 2 per operator (the operator and its closing `]`; LRA's
parentheses are not tokens), and a tree is kept when `min_length < length < max_length`.
Duplicates are removed. Differences from the reference, all deliberate: the split is seeded
(LRA's was not), the operator is drawn before its arguments (same distribution), and a tree is
abandoned as soon as it reaches `max_length` (it would be rejected anyway).

Parallel and deterministic: the work is cut into jobs of `JOB_SIZE` accepted trees, job j drawing
from `random.Random(f"{seed}/{j}")`; the jobs' outputs are concatenated in job order and
deduplicated keeping first occurrences, so the data set does not depend on the process count.

Tokens (vocabulary 16): 0 padding, 1..10 the digits 0..9, 11..14 `[MIN [MAX [MED [SM`, 15 `]`.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import random

import numpy as np

from seqjax.data.sources import DataError

VALUE_P = 0.25  # LRA: probability that a node (above max depth) is an operator
OPERATORS = ("[MIN", "[MAX", "[MED", "[SM")
END = "]"
PAD_ID = 0
DIGIT0_ID = 1  # digit d -> id d + 1
OP0_ID = 11  # operator k -> id 11 + k
END_ID = 15
VOCAB_SIZE = 16
NUM_CLASSES = 10
TOKENS = ("<pad>",) + tuple(str(d) for d in range(10)) + OPERATORS + (END,)
JOB_SIZE = 250
# Trees drawn in a row without one of an accepted length before a job gives up (the LRA
# range accepts ~1 tree in 12, a range of 1900-2000 ~1 in 550: never near this).
MAX_REJECTS_IN_A_ROW = 50_000


@dataclasses.dataclass(frozen=True)
class ListOpsSpec:
    """What to generate (the fields of `config.data` named `listops_*`)."""

    seed: int = 0
    train_size: int = 96_000
    validation_size: int = 2_000
    test_size: int = 2_000
    min_length: int = 500
    max_length: int = 2_000
    max_depth: int = 10
    max_args: int = 10

    def __post_init__(self):
        check_spec(self)

    @property
    def total(self) -> int:
        return self.train_size + self.validation_size + self.test_size

    @property
    def name(self) -> str:
        return (
            f"s{self.seed}_n{self.train_size}_{self.validation_size}_{self.test_size}"
            f"_len{self.min_length}_{self.max_length}_d{self.max_depth}_a{self.max_args}"
        )


def longest_tree(max_depth: int, max_args: int) -> int:
    """Tokens of the longest tree the generator can draw: every node above ``max_depth`` an
    operator with ``max_args`` arguments (``L(d) = 2 + max_args * L(d + 1)``, ``L(max) = 1``)."""
    length = 1
    for _ in range(max_depth - 1):
        length = 2 + max_args * length
        if length > 1 << 40:
            break
    return length


def check_spec(spec: ListOpsSpec) -> None:
    """``DataError`` naming the ``config.data.listops_*`` field that makes generation
    impossible (an empty split, an empty or unreachable length range)."""
    f = "config.data.listops_"
    for split in ("train", "validation", "test"):
        n = getattr(spec, f"{split}_size")
        if n < 1:
            raise DataError(f"{f}{split}_size={n}: every split needs examples; valid: 1 or more")
    if spec.max_depth < 1 or spec.max_args < 2:
        raise DataError(
            f"{f}max_depth={spec.max_depth}, {f}max_args={spec.max_args}: valid: max_depth >= 1"
            " and max_args >= 2"
        )
    if spec.min_length < 0 or spec.max_length - spec.min_length < 2:
        raise DataError(
            f"{f}min_length={spec.min_length} and {f}max_length={spec.max_length}: trees are "
            "kept when min_length < length < max_length, so no length fits; valid: "
            "0 <= min_length <= max_length - 2"
        )
    longest = longest_tree(spec.max_depth, spec.max_args)
    if spec.min_length + 1 > longest:
        raise DataError(
            f"{f}min_length={spec.min_length}: with {f}max_depth={spec.max_depth} and "
            f"{f}max_args={spec.max_args} no tree is longer than {longest} tokens; valid: "
            f"min_length < {longest} (or raise max_depth/max_args)"
        )


class _TooLong(Exception):
    pass


def _apply(op: int, args: list[int]) -> int:
    if op == 0:
        return min(args)
    if op == 1:
        return max(args)
    if op == 2:
        # LRA: int(np.median(x)); for an even count the mean of the two middle values, floored.
        s = sorted(args)
        n = len(s)
        return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) // 2
    return sum(args) % 10


def _tree(rng: random.Random, depth: int, spec: ListOpsSpec, out: list[int]) -> int:
    """Appends one subtree's tokens to `out` and returns its value."""
    if len(out) >= spec.max_length:
        raise _TooLong
    # `int(random() * k)` is a uniform draw from range(k) (much faster than `randrange`).
    draw = rng.random
    if depth < spec.max_depth and draw() <= VALUE_P:
        op = int(draw() * len(OPERATORS))
        out.append(OP0_ID + op)
        num_args = 2 + int(draw() * (spec.max_args - 1))  # uniform in 2..max_args
        args = [_tree(rng, depth + 1, spec, out) for _ in range(num_args)]
        out.append(END_ID)
        return _apply(op, args)
    value = int(draw() * 10)
    out.append(DIGIT0_ID + value)
    return value


def generate_job(spec: ListOpsSpec, job: int, job_size: int = JOB_SIZE) -> list[tuple[bytes, int]]:
    """Job `job`'s `job_size` accepted trees as (token bytes, label)."""
    rng = random.Random(f"listops/{spec.seed}/{job}")
    found = []
    rejects = 0
    while len(found) < job_size:
        out: list[int] = []
        try:
            label = _tree(rng, 1, spec, out)
        except _TooLong:
            label = None
        if label is not None and spec.min_length < len(out) < spec.max_length:
            found.append((bytes(out), label))
            rejects = 0
            continue
        rejects += 1
        if rejects >= MAX_REJECTS_IN_A_ROW:
            raise DataError(
                f"ListOps generation makes no progress: {rejects:,} trees in a row had a length "
                f"outside config.data.listops_min_length={spec.min_length} < length < "
                f"listops_max_length={spec.max_length}; widen that range (LRA: 500 < length < "
                "2000) or change listops_max_depth/listops_max_args"
            )
    return found


def _generate_job_star(args):
    return generate_job(*args)


def generate(
    spec: ListOpsSpec, num_procs: int = 0, job_size: int = JOB_SIZE
) -> dict[str, list[tuple[bytes, int]]]:
    """Generates the train/validation/test splits (disjoint, without duplicates).

    Args:
      spec: sizes and tree parameters.
      num_procs: worker processes (0: all cores; 1: in this process). Processes are started
        (spawn) only when there are more than 4 jobs; the result does not depend on it.
      job_size: trees per job (part of the data's definition: keep the default).

    Returns:
      `{split: [(tokens as bytes of ids, label)]}`.
    """
    num_procs = num_procs or os.cpu_count() or 1
    seen: set[bytes] = set()
    examples: list[tuple[bytes, int]] = []
    next_job = 0
    pool = None
    try:
        while len(examples) < spec.total:
            # Jobs still needed, plus 2% for duplicates; results are consumed in job order.
            missing = spec.total - len(examples)
            n_jobs = -(-int(missing * 1.02 + 1) // job_size)
            jobs = [(spec, j, job_size) for j in range(next_job, next_job + n_jobs)]
            next_job += n_jobs
            if num_procs > 1 and n_jobs > 4 and pool is None:
                pool = multiprocessing.get_context("spawn").Pool(min(num_procs, n_jobs))
            results = pool.imap(_generate_job_star, jobs) if pool else map(_generate_job_star, jobs)
            before = len(examples)
            for found in results:
                for tokens, label in found:
                    if tokens not in seen and len(examples) < spec.total:
                        seen.add(tokens)
                        examples.append((tokens, label))
            if len(examples) == before:  # a whole round of jobs drew only duplicates
                raise DataError(
                    f"ListOps generation makes no progress: only {len(examples):,} distinct trees "
                    f"exist with these config.data.listops_* settings, {spec.total:,} are needed "
                    "(train + validation + test sizes); lower the sizes or widen the length range"
                )
    finally:
        if pool is not None:
            pool.terminate()
    a = spec.train_size
    b = a + spec.validation_size
    return {"train": examples[:a], "validation": examples[a:b], "test": examples[b:]}


def decode(ids) -> str:
    """Token ids -> LRA-style text, e.g. `[MAX 2 9 ]` (padding dropped)."""
    return " ".join(TOKENS[int(i)] for i in np.asarray(ids).reshape(-1) if int(i) != PAD_ID)


def encode(text: str) -> np.ndarray:
    """LRA-style text -> int32 ids `[n]` (LRA's parentheses are ignored)."""
    index = {t: i for i, t in enumerate(TOKENS)}
    words = text.replace("(", " ").replace(")", " ").split()
    return np.array([index[w] for w in words], dtype=np.int32)
