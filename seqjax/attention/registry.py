"""The one attention interface: a registry of named mechanisms.

Every mechanism is a pure function

    fn(q_BTHD, k_BSHD, v_BSHD, *, causal=False, mask=None, segment_ids=None,
       dropout_rate=0.0, dropout_rng=None, **options) -> out_BTHD

on arrays in the layout of ``jax.nn.dot_product_attention``. A mechanism computes its
scores and its mask and hands them to ``seqjax.attention.numerics`` (``attend`` or
``attend_logits``: masked float32 softmax, dropout, values), or runs a block table on the
blockwise engines; partial attentions merge with ``numerics.merge_lse``.

Legend: B batch, T query length, S key/value length, H heads, D head dim.

A mechanism that owns parameters (Linformer's E/F projections, Transformer-XL's u/v and
position projection) declares a ``module_params`` hook: the Flax ``MultiHeadAttention``
module calls it inside its own scope to create those parameters and passes the result to
the function as extra keyword arguments. A mechanism with shared queries and keys
(Reformer's LSH attention) sets ``shared_qk`` so the module builds no key projection.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class Mechanism:
    """A registered attention mechanism.

    Attributes:
      name: registry name (``seqjax.attention.get(name)``).
      fn: the pure attention function (see module docstring).
      shared_qk: keys are derived from queries inside ``fn``; the module passes ``k=None``.
      module_params: optional ``hook(module, *, q, k, v, options) -> dict`` called inside
        ``MultiHeadAttention``'s compact scope to create parameters; the returned dict is
        passed to ``fn`` as keyword arguments.
      model_params: optional ``hook(module, *, cfg, options) -> dict`` called once in the
        model's scope (``cfg`` is the ``TransformerConfig``) for parameters shared by every
        layer using this mechanism (layerwise Linformer's single E); the dict reaches
        ``fn`` through the layers' ``extra`` keyword arguments.
      options: the option names the mechanism accepts beyond the common ones (for clear
        error messages on typos).
      validate: optional ``hook(options, seq_len) -> None`` raising ``ValueError`` for
        options inconsistent with a sequence length; called by config validation before
        anything compiles.
      doc: one line shown by ``seqjax.attention.describe()``.
      decode_state: optional ``hook(q, k, v, state, *, mask=None, **options) -> (out,
        new_state)`` for mechanisms with a fixed-size recurrent state (linear attention,
        Performer): causal attention of the ``[B, T, H, D]`` new tokens after ``state`` (a
        pytree; None = empty prefix). ``MultiHeadAttention(decode=True)`` keeps the state in
        the "cache" collection (``recurrent_state``) instead of a growing KV cache, so
        one-token decoding equals the full causal forward.
    """

    name: str
    fn: Callable[..., Any]
    shared_qk: bool = False
    module_params: Callable[..., dict] | None = None
    model_params: Callable[..., dict] | None = None
    options: tuple[str, ...] = ()
    validate: Callable[[dict, int], None] | None = None
    doc: str = ""
    decode_state: Callable[..., Any] | None = None


COMMON_OPTIONS = ("causal", "mask", "segment_ids", "dropout_rate", "dropout_rng", "scale")

_REGISTRY: dict[str, Mechanism] = {}


def register(mechanism: Mechanism) -> Mechanism:
    """Adds a mechanism to the registry (a new mechanism is one file and one call here)."""
    if mechanism.name in _REGISTRY:
        raise ValueError(f"attention mechanism {mechanism.name!r} is already registered")
    _REGISTRY[mechanism.name] = mechanism
    return mechanism


def names() -> list[str]:
    """Sorted names of every registered mechanism."""
    return sorted(_REGISTRY)


def spec(name: str) -> Mechanism:
    """The full ``Mechanism`` record for ``name`` (raises a clear ``ValueError``)."""
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(f"unknown attention mechanism {name!r}; valid names: {', '.join(names())}")
    return _REGISTRY[name]


def get(name: str) -> Callable[..., Any]:
    """The attention function registered under ``name``; a keyword it does not take (a
    misspelled option) raises ``check_options``' ``ValueError`` listing the valid ones."""
    mech = spec(name)
    own = inspect.signature(mech.fn).parameters  # hooks' extras (module_params) included

    @functools.wraps(mech.fn)
    def checked(*args, **kwargs):
        check_options(name, {k: v for k, v in kwargs.items() if k not in own})
        return mech.fn(*args, **kwargs)

    return checked


def describe() -> str:
    """A table of the registered mechanisms, one line each (for READMEs and ``--help``)."""
    return "\n".join(f"{n:16s} {_REGISTRY[n].doc}" for n in names())


def check_options(name: str, options: dict) -> None:
    """Raises ``ValueError`` naming the valid options if ``options`` has an unknown key."""
    mech = spec(name)
    valid = set(COMMON_OPTIONS) | set(mech.options)
    unknown = sorted(set(options) - valid)
    if unknown:
        raise ValueError(
            f"attention {name!r} got unknown option(s) {unknown}; valid options: {sorted(valid)}"
        )


def check_qkv(q, k, v, *, shared_qk: bool = False) -> None:
    """Validates ranks and shapes of ``[B, T, H, D]`` inputs with clear messages."""
    arrays = {"q": q, "v": v} if shared_qk else {"q": q, "k": k, "v": v}
    for nm, x in arrays.items():
        if jnp.ndim(x) != 4:
            raise ValueError(
                f"attention input {nm} must have rank 4 [batch, seq, heads, head_dim]; "
                f"got shape {tuple(jnp.shape(x))}"
            )
    if not shared_qk:
        if q.shape[-1] != k.shape[-1]:
            raise ValueError(
                f"head_dim mismatch: q has head_dim {q.shape[-1]} but k has {k.shape[-1]}; "
                "q and k must share head_dim"
            )
        if k.shape[:3] != v.shape[:3]:
            raise ValueError(
                f"k and v must agree in [batch, seq, heads]; got k {k.shape} and v {v.shape}"
            )
    kv = v
    if q.shape[0] != kv.shape[0] or q.shape[2] != kv.shape[2]:
        raise ValueError(
            f"q and k/v must agree in batch and heads; got q {q.shape} and v {kv.shape}"
        )


# What ``implementation="auto"`` chose, noted by a mechanism while it is traced (``note_auto``)
# and read by ``resolve_auto`` (the run header prints it; nothing compiles).
_AUTO_NOTES: list[str] | None = None


def note_auto(choice: str) -> None:
    """Called by a mechanism whose ``implementation="auto"`` resolved to ``choice`` (a no-op
    unless ``resolve_auto`` is tracing it)."""
    if _AUTO_NOTES is not None:
        _AUTO_NOTES.append(choice)


def resolve_auto(name: str, q, k, v, **options) -> str | None:
    """What mechanism ``name`` with ``options`` (``implementation="auto"``) runs on this
    backend for inputs shaped like ``q, k, v`` (arrays or ``jax.ShapeDtypeStruct``), traced
    abstractly; None when it notes no choice or cannot be called on bare inputs."""
    global _AUTO_NOTES
    _AUTO_NOTES = []
    try:
        jax.eval_shape(lambda *qkv: spec(name).fn(*qkv, **options), q, k, v)
    except Exception:  # noqa: BLE001 - a mechanism needing its module's parameters
        return None
    finally:
        notes, _AUTO_NOTES = _AUTO_NOTES, None
    return notes[0] if notes else None
