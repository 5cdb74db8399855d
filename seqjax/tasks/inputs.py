"""Checks of what a run is asked to sample or translate: the prompt, ``--length`` and the
sampling flags, before anything compiles.

Each raises ``InputError`` with one sentence naming the flag and what would be valid; the
tools turn it into ``error: ...`` and exit status 2 (``seqjax.train.errors``). The tasks'
``check_sample_inputs`` hooks raise it too; the checks of a workdir and its checkpoints are
``seqjax.train.cli_inputs``.
"""

from __future__ import annotations

import math
import sys

from seqjax import decoding


class InputError(ValueError):
    """A command-line flag of evaluate/sample/translate is wrong (the message names it)."""


def check_sampling_flags(length: int, temperature: float, top_k: int = 0, top_p=1.0) -> None:
    """``--length`` and the sampling flags (``seqjax.decoding.check_sampling``)."""
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
