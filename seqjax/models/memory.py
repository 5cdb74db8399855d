"""Recurrent memory: the optional state a model carries from one segment to the next.

A recurrent model (Transformer-XL, Dai et al. 2019 §3.2; a Compressive Transformer or an
RMT would be the same) is applied as ``model.apply(variables, tokens_BT, memory) ->
(logits, new_memory)`` and has ``model.init_memory(batch)``, the empty memory of ``batch``
rows. Every memory leaf has the batch as its leading axis, so the training system shards
it like a batch, saves it in the train state and empties it where a stream starts over,
without knowing what is inside.

The model declares the rest in its own module with a ``Recurrence`` (what the config
needs, the lengths to evaluate and sample with) and registers it with ``register`` below: the train
step, the evaluator, the sampler and the loop each have one code path that threads an
optional ``memory`` (None for the non-recurrent models), and ``recurrence(config)`` is the
only place that tells whether a config's model is recurrent.

Legend: B batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

Memory = Any  # a pytree whose leaves are [B, ...]


@dataclasses.dataclass(frozen=True)
class Recurrence:
    """What a recurrent model kind declares (``config.model.kind``).

    Attributes:
      kind: the ``config.model.kind`` value.
      train_model: ``(model_cfg, config) -> module`` with ``init_memory(batch)``, the
        model that trains.
      eval_lengths: ``config -> lengths`` to evaluate and sample with (a dict with at least
        ``'tgt_len'``, the tokens per evaluated segment).
      eval_model: ``(model_cfg, lengths) -> module`` applying the trained parameters with
        the evaluation lengths.
      attention_options: ``(config, options) -> options``: what the kind sets in
        ``config.model.attention_options`` (e.g. the memory length the mechanism needs).
      validate: ``(config, bad)``: calls ``bad(field, value, valid)`` for each field the
        kind needs otherwise (``seqjax.train.config_validation``).
    """

    kind: str
    train_model: Callable[[Any, Any], Any]
    eval_lengths: Callable[[Any], dict]
    eval_model: Callable[[Any, dict], Any]
    attention_options: Callable[[Any, dict], dict]
    validate: Callable[[Any, Callable], None]


NON_RECURRENT = "transformer"


_RECURRENT: dict[str, Recurrence] = {}


def register(recurrence: Recurrence) -> Recurrence:
    """Declare a recurrent model kind (its module calls this at import; ``seqjax.models``
    imports the shipped ones). Returns ``recurrence``.

    Raises:
      ValueError: the kind is already taken.
    """
    if recurrence.kind == NON_RECURRENT or recurrence.kind in _RECURRENT:
        raise ValueError(f"model kind {recurrence.kind!r} is already registered")
    _RECURRENT[recurrence.kind] = recurrence
    return recurrence


def kinds() -> dict[str, Recurrence | None]:
    """Every ``config.model.kind``: None for the plain Transformer, else its Recurrence."""
    return {NON_RECURRENT: None, **_RECURRENT}


def kind(config) -> str:
    """``config.model.kind`` (configs older than the field: the plain Transformer)."""
    return config.model.get("kind", NON_RECURRENT)


def recurrence(config) -> Recurrence | None:
    """The Recurrence of ``config``'s model, None when it has no memory.

    Raises:
      KeyError: an unknown kind (``seqjax.train.config_validation`` reports it first).
    """
    return kinds()[kind(config)]


def reset(memory: Memory, where) -> Memory:
    """``memory`` emptied (zeros: all positions invalid) where the scalar bool is True."""
    return jax.tree.map(lambda m: jnp.where(where, jnp.zeros_like(m), m), memory)
