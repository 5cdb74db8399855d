"""Checks of the evaluate/sample command lines: workdir, checkpoint step, sampling flags.

Each raises ``InputError`` with one sentence naming the flag and what would be valid; the
tools turn it into ``error: ...`` and exit status 2 (``seqjax.train.errors``).
"""

from __future__ import annotations

import math
import sys

from etils import epath

from seqjax.train import paths


class InputError(ValueError):
    """A command-line flag of evaluate/sample is wrong (the message names it)."""


def checkpoint_steps(workdir: str) -> list[int]:
    d = paths.workdir_path(workdir) / "checkpoints"
    if not d.is_dir():
        return []
    return sorted(int(p.name) for p in d.iterdir() if p.is_dir() and p.name.isdigit())


def checkpoint_step(workdir: str, step: int | None) -> int:
    """The checkpoint step to restore (``step`` or the newest); checks the workdir first."""
    work = epath.Path(workdir).expanduser()
    if not work.exists():
        raise InputError(f"--workdir={workdir} does not exist")
    if not work.is_dir():
        raise InputError(f"--workdir={workdir} is a file; give a training job's workdir")
    if not (work / "config.json").exists():
        raise InputError(
            f"--workdir={workdir} is not a seqjax training workdir (it has no config.json); "
            "give the --workdir of a python -m seqjax.main run"
        )
    steps = checkpoint_steps(str(work))
    if not steps:
        raise InputError(
            f"--workdir={workdir} has no complete checkpoint yet ({work / 'checkpoints'} is "
            "empty or missing); wait for the first save (config.train.checkpoint_every) or "
            "the end of training"
        )
    if step is None:
        return steps[-1]
    if step not in steps:
        raise InputError(
            f"--step={step}: there is no such checkpoint in {work / 'checkpoints'}; "
            f"available steps: {', '.join(map(str, steps))}"
        )
    return step


def check_sampling_flags(length: int, temperature: float, top_k: int = 0, top_p=1.0) -> None:
    """``--length`` and the sampling flags (``seqjax.decoding.check_sampling``)."""
    from seqjax import decoding

    if length < 0:
        raise InputError(f"--length={length} is invalid; valid: an integer >= 0")
    if not math.isfinite(temperature) or temperature < 0:
        raise InputError(
            f"--temperature={temperature} is invalid; valid: a finite number >= 0 (0 = greedy)"
        )
    try:
        decoding.check_sampling(temperature, top_k, top_p)
    except ValueError as e:
        raise InputError(str(e)) from None


def check_window(prompt_tokens: int, length: int, max_len: int, recurrent: bool) -> None:
    """Without a memory (``seqjax.models.memory``), prompt + sample must fit in the model's
    window."""
    if not recurrent and prompt_tokens >= max_len:
        raise InputError(
            f"--prompt is {prompt_tokens} tokens long, but the model reads at most "
            f"model.max_len={max_len} tokens (the prompt included); give a prompt shorter than "
            f"{max_len} tokens"
        )
    if not recurrent and prompt_tokens + length > max_len:
        raise InputError(
            f"--length={length} with a {prompt_tokens}-token prompt exceeds the model's window "
            f"model.max_len={max_len}; valid: --length <= {max(max_len - prompt_tokens, 0)}"
        )


def usable_prompt(prompt: str, encode, decode) -> str:
    """``prompt`` without characters the vocabulary lacks, warning which ones were dropped
    (with an ``<unk>`` id they would all become the same unknown token)."""
    outside = []
    for c in dict.fromkeys(prompt):
        try:
            ok = decode(encode(c)) == c
        except ValueError:
            ok = False
        if not ok:
            outside.append(c)
    if not outside:
        return prompt
    print(
        "warning: the prompt has characters outside the model's vocabulary, dropped: "
        + ", ".join(repr(c) for c in outside),
        file=sys.stderr,
        flush=True,
    )
    return "".join(c for c in prompt if c not in outside)


IMPORT_HELP = (
    "A module to import before restoring (repeatable): one that registers the run's attention "
    "mechanism or task (docs/extending.md); the run's own config.imports are imported anyway."
)


def restore(restore_fn, workdir: str, step: int | None, imports=()):
    """``restore_fn(step)`` for ``--step`` (or the newest checkpoint, falling back to older
    ones with a warning when the newest is damaged; nothing is moved: a training job may
    be using the workdir).

    First the run's extensions (``config.imports``) and ``imports`` (``--import``) are
    imported and the mechanisms and task it used are checked to be registered: a missing
    one is named with its module (``seqjax.train.extensions``), not blamed on a checkpoint.
    """
    chosen = checkpoint_step(workdir, step)
    from seqjax.train import extensions, setup

    extensions.check_restorable(setup.load_config(workdir), workdir, imports)
    steps = [chosen] if step is not None else list(reversed(checkpoint_steps(workdir)))
    failures = []
    for s in steps:
        try:
            out = restore_fn(s)
        except Exception as e:  # a damaged step: try the next older one
            from seqjax.train import checkpoint

            failures.append(f"step {s}: {checkpoint._reason(e)}")
            continue
        for line in failures:
            print(f"warning: skipped checkpoint {line}", file=sys.stderr, flush=True)
        return out
    raise InputError(
        f"no checkpoint in {paths.workdir_path(workdir) / 'checkpoints'} restores: "
        + "; ".join(failures)
    )
