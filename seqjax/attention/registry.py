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

A mechanism also declares its capabilities here, where it is registered (``Mechanism``'s
"capabilities" fields): whether it is always causal or has a causal form, whether it needs a
recurrent memory model, whether it has an attention matrix for dropout, whether it honours
packed examples (``segment_ids``) and the period its pattern needs them aligned to, its decode
cache, how it runs sequence-sharded (context parallelism) and its kernels per platform. The
rest of seqjax asks these questions (``packing_refusal``, ``packing_period``,
``decode_cache``, ``context_parallel_refusal``, ...) and never tests a mechanism's name; the
one parse of a mechanism list (``"lsh, dense"``) is ``parse``.
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

    Capabilities (the defaults are dense attention's: bidirectional with a causal form,
    attention dropout, segments honoured, translation-invariant, no cache of its own):
      always_causal: it has no bidirectional form (``"causal"``): refused in an encoder and
        for masked LM; the layer's ``causal`` flag is forced on.
      causal_form: True, or why it has no causal form (refused as a decoder's
        self-attention; image generation asks the function itself).
      memory_model: why it needs a recurrent memory model (Transformer-XL's ``"relative"``),
        None when it does not: refused in the stacks of other models.
      attention_dropout: it has an attention matrix that ``dropout_rate`` drops (False for
        kernelized attention: the rate must be 0).
      packing: whether packed rows (``segment_ids``) keep examples apart: True; a reason
        why not (str); or ``options -> reason or None`` (a reason here is the whole clause
        after "False with", e.g. "flex 'bigbird' (...)").
      packing_period: ``(options, row_len) -> p`` for a pattern at absolute positions:
        packed examples must start at multiples of p (``row_len()`` gives the row's length
        when the period depends on it); None: 1 (translation-invariant).
      stride_option: the option that sets the pattern's period along the sequence, which an
        image task defaults to one image row (sparse: ``"stride"``, Child et al. 2019 §4.1).
      decode_cache: the cache of one-token causal decoding beyond ``decode_state``
        (``"kv"``: the KV cache; ``"pattern"``: ring buffers / summary stores of
        ``seqjax.decoding.pattern_cache``; ``"lsh"``), or ``options -> kind or None`` where
        it depends on them (``options=None``: some configuration of it).
      context_parallel: how it runs with ``config.mesh.sequence > 1``: ``"ring"`` (ring or
        all-to-all attention, ``implementation``), ``"ring_sparse"`` (the block tables on
        the ring with empty steps skipped), ``"sharded"`` (as it is, the partitioner
        splitting its contractions: Linformer; the input length must divide), None (refused).
      context_parallel_refusal: why it cannot run sequence-sharded (when that is None).
      kernels: ``((platform, implementation names), ...)`` of its fused kernels (``cpu``/
        ``gpu``/``tpu``; what ``implementation="auto"`` may pick there besides the plain-JAX
        engines); pairs, not a dict, so a ``Mechanism`` stays hashable (``kernels(name)``).
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
    # Capabilities (see above).
    always_causal: bool = False
    causal_form: bool | str = True
    memory_model: str | None = None
    attention_dropout: bool = True
    packing: bool | str | Callable[[dict], str | None] = True
    packing_period: Callable[..., int] | None = None
    stride_option: str | None = None
    decode_cache: str | Callable[[dict | None], str | None] | None = None
    context_parallel: str | None = None
    context_parallel_refusal: str | None = None
    kernels: tuple[tuple[str, tuple[str, ...]], ...] = ()


CACHE_KINDS = ("kv", "recurrent", "pattern", "lsh")
CONTEXT_PARALLEL = ("ring", "ring_sparse", "sharded")


COMMON_OPTIONS = ("causal", "mask", "segment_ids", "dropout_rate", "dropout_rng", "scale")

_REGISTRY: dict[str, Mechanism] = {}


def register(mechanism: Mechanism) -> Mechanism:
    """Adds a mechanism to the registry (a new mechanism is one file and one call here)."""
    if mechanism.context_parallel not in (None, *CONTEXT_PARALLEL):
        raise ValueError(
            f"Mechanism {mechanism.name!r}: context_parallel={mechanism.context_parallel!r}; "
            f"valid: {[None, *CONTEXT_PARALLEL]}"
        )
    if isinstance(mechanism.decode_cache, str) and mechanism.decode_cache not in CACHE_KINDS:
        raise ValueError(
            f"Mechanism {mechanism.name!r}: decode_cache={mechanism.decode_cache!r}; "
            f"valid: {list(CACHE_KINDS)}"
        )
    if mechanism.name in _REGISTRY:
        raise ValueError(f"attention mechanism {mechanism.name!r} is already registered")
    _REGISTRY[mechanism.name] = mechanism
    return mechanism


def unregister(name: str) -> None:
    """Removes a mechanism (tests that register a toy one clean up with this)."""
    _REGISTRY.pop(name, None)


def names() -> list[str]:
    """Sorted names of every registered mechanism."""
    return sorted(_REGISTRY)


def spec(name: str) -> Mechanism:
    """The full ``Mechanism`` record for ``name`` (raises a clear ``ValueError``)."""
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(f"unknown attention mechanism {name!r}; valid names: {', '.join(names())}")
    return _REGISTRY[name]


def find(name) -> Mechanism | None:
    """The ``Mechanism`` registered under ``name``, None if there is none."""
    return _REGISTRY.get(name) if isinstance(name, str) else None


# Keywords seqjax's own layers pass through a mechanism's ``**kwargs`` (not user options).
INTERNAL_OPTIONS = ("score_mod",)


def get(name: str) -> Callable[..., Any]:
    """The attention function registered under ``name``; a keyword it does not take (a
    misspelled option) raises ``check_options``' ``ValueError`` listing the valid ones."""
    mech = spec(name)
    own = inspect.signature(mech.fn).parameters  # hooks' extras (module_params) included

    @functools.wraps(mech.fn)
    def checked(*args, **kwargs):
        extra = {k: v for k, v in kwargs.items() if k not in own and k not in INTERNAL_OPTIONS}
        check_options(name, extra)
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


# --- the questions the rest of seqjax asks -------------------------------------------------


def parse(spec) -> list[str]:
    """The mechanism names of a list as config fields write it (``config.model.attention``:
    a name or a comma-separated per-layer cycle, ``"lsh, dense"`` -> ``["lsh", "dense"]``;
    blanks dropped, repeats kept)."""
    return [n.strip() for n in str(spec).split(",") if n.strip()]


def packing_refusal(name: str, options: dict | None = None) -> str | None:
    """Why packed examples cannot share a row under ``name`` with ``options``, as the clause
    after "False with" of config validation's message; None when they can (or ``name`` is
    not registered: config validation reports that)."""
    packing = find(name).packing if find(name) else True
    if packing is True:
        return None
    if callable(packing):
        return packing(dict(options or {}))
    return f"model.attention={name!r} ({packing})"


def packing_period(name: str, options: dict | None, row_len: Callable[[], int]) -> int:
    """The period (>= 1) packed examples must start at a multiple of for ``name``'s pattern
    to see each example as if alone; ``row_len()`` is the packed row's length."""
    hook = find(name).packing_period if find(name) else None
    return 1 if hook is None else max(int(hook(dict(options or {}), row_len)), 1)


def decode_cache(name: str, options: dict | None = None) -> str | None:
    """The cache of one-token causal decoding with ``name`` (``CACHE_KINDS``), None when the
    prefix is recomputed (``options=None``: of some configuration of it)."""
    mech = spec(name)
    if mech.decode_cache == "kv":
        return "kv"
    if mech.decode_state is not None:
        return "recurrent"
    kind = mech.decode_cache
    if callable(kind):
        kind = kind(None if options is None else dict(options))
    return kind


def context_parallel_refusal(name: str) -> str | None:
    """One sentence on why ``name`` cannot run with ``config.mesh.sequence > 1`` (None if
    it can: ``Mechanism.context_parallel``)."""
    mech = find(name)
    if mech is not None and mech.context_parallel is not None:
        return None
    why = (mech and mech.context_parallel_refusal) or "it has no sequence-parallel implementation"
    return f"attention {name!r} cannot run with config.mesh.sequence > 1: {why}."


def kernels(name: str, platform: str | None = None):
    """``{platform: fused kernels}`` of mechanism ``name``, or one platform's tuple."""
    table = dict(spec(name).kernels)
    return table if platform is None else table.get(platform, ())


def capable(name, capability: str, value=True) -> bool:
    """Whether mechanism ``name`` is registered with ``capability`` (a ``Mechanism`` field)
    equal to ``value`` (False for an unregistered name: config validation reports it)."""
    mech = find(name)
    return mech is not None and getattr(mech, capability) == value


def having(capability: str, value=True) -> list[str]:
    """Sorted names of the mechanisms whose ``capability`` field equals ``value``."""
    return [n for n in names() if capable(n, capability, value)]


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
