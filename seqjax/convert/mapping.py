"""Explicit name-and-layout rules between a Hugging Face state dict and a seqjax parameter
tree, applied in both directions.

A ``Rule`` ties seqjax parameter paths to Hugging Face tensor names with a pair of inverse
functions: ``to_seqjax(*hf_arrays) -> seqjax arrays`` and ``to_hf(*seqjax_arrays) -> hf
arrays`` (a fused GPT-2 ``c_attn`` is one Hugging Face tensor for three seqjax kernels).
The functions use only ``.T``, ``.reshape`` and ``cat``/``split``, so they run on numpy
arrays and under ``jax.eval_shape``: the Hugging Face shapes a config implies are derived
from the seqjax model's abstract parameters, and every file tensor is checked against them
before anything is converted.

Layouts (legend: E width, H heads, D head dim, F feed-forward width):
a ``torch.nn.Linear`` weight is ``[out, in]``, a Flax ``Dense`` kernel ``[in, out]``
(``linear``: a transpose); seqjax's attention kernels are ``[E, H, D]`` (Q/K/V) and
``[H, D, E]`` (output) with biases ``[H, D]`` and ``[E]``; GPT-2's ``Conv1D`` already
stores ``[in, out]``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

Path = tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Rule:
    """``sx`` seqjax paths <-> ``hf`` tensor names, through inverse functions."""

    sx: tuple[Path, ...]
    hf: tuple[str, ...]
    to_seqjax: Callable
    to_hf: Callable


def _ident(*xs):
    return xs


def copy(sx: Path, hf: str) -> Rule:
    """The same array on both sides (embeddings, norms, Conv1D kernels, biases)."""
    return Rule((sx,), (hf,), _ident, _ident)


def linear(sx: Path, hf: str) -> Rule:
    """A ``torch.nn.Linear`` weight ``[out, in]`` <-> a Dense kernel ``[in, out]``."""
    return Rule((sx,), (hf,), lambda w: (w.T,), lambda k: (k.T,))


def heads_in(sx: Path, hf: str, heads: int, *, torch_linear: bool) -> Rule:
    """A Q/K/V weight (``[H*D, E]`` Linear or ``[E, H*D]`` Conv1D) <-> ``[E, H, D]``."""

    def fwd(w):
        w = w.T if torch_linear else w
        return (w.reshape(w.shape[0], heads, -1),)

    def back(k):
        w = k.reshape(k.shape[0], -1)
        return (w.T if torch_linear else w,)

    return Rule((sx,), (hf,), fwd, back)


def heads_bias(sx: Path, hf: str, heads: int) -> Rule:
    """A Q/K/V bias ``[H*D]`` <-> ``[H, D]``."""
    return Rule((sx,), (hf,), lambda b: (b.reshape(heads, -1),), lambda b: (b.reshape(-1),))


def heads_out(sx: Path, hf: str, heads: int, *, torch_linear: bool) -> Rule:
    """An output-projection weight (``[E, H*D]`` Linear or ``[H*D, E]`` Conv1D) <->
    ``[H, D, E]``."""

    def fwd(w):
        w = w.T if torch_linear else w
        return (w.reshape(heads, -1, w.shape[-1]),)

    def back(k):
        w = k.reshape(-1, k.shape[-1])
        return (w.T if torch_linear else w,)

    return Rule((sx,), (hf,), fwd, back)


def _cat(xs, axis):
    lib = np if all(isinstance(x, np.ndarray) for x in xs) else jnp
    return lib.concatenate(xs, axis=axis)


def fused_qkv(sx: tuple[Path, Path, Path], hf: str, heads: int, *, bias: bool) -> Rule:
    """GPT-2's fused ``c_attn`` (Conv1D ``[E, 3E]`` weight or ``[3E]`` bias, Q then K then V)
    <-> three ``[E, H, D]`` kernels or ``[H, D]`` biases."""

    def fwd(w):
        n = w.shape[-1] // 3
        parts = [w[..., i * n : (i + 1) * n] for i in range(3)]
        if bias:
            return tuple(p.reshape(heads, -1) for p in parts)
        return tuple(p.reshape(p.shape[0], heads, -1) for p in parts)

    def back(*ks):
        flat = [k.reshape(-1) if bias else k.reshape(k.shape[0], -1) for k in ks]
        return (_cat(flat, -1),)

    return Rule(sx, (hf,), fwd, back)


def expected_hf_shapes(rules, abstract: dict[Path, jax.ShapeDtypeStruct]) -> dict[str, tuple]:
    """The Hugging Face shape each rule's tensors must have for the model ``abstract``
    describes (``{path: ShapeDtypeStruct}``)."""
    out = {}
    for rule in rules:
        shapes = jax.eval_shape(rule.to_hf, *[abstract[p] for p in rule.sx])
        out.update({name: tuple(s.shape) for name, s in zip(rule.hf, shapes)})
    return out


def to_seqjax(rules, tensors: dict, abstract: dict, *, source: str) -> dict:
    """The nested seqjax parameter tree (float32 numpy) from Hugging Face ``tensors``.

    Raises ``ValueError`` naming the first tensor that is missing or has another shape than
    the config implies (both shapes), or a seqjax parameter no rule fills.
    """
    want = expected_hf_shapes(rules, abstract)
    for name, shape in want.items():
        if name not in tensors:
            raise ValueError(f"{source} has no tensor {name!r}, which the config needs")
        have = tuple(tensors[name].shape)
        if have != shape:
            raise ValueError(
                f"{source}: tensor {name!r} has shape {have}, but the config needs {shape}"
            )
    flat = {}
    for rule in rules:
        arrays = rule.to_seqjax(*[np.asarray(tensors[n], np.float32) for n in rule.hf])
        flat.update({p: np.ascontiguousarray(a) for p, a in zip(rule.sx, arrays)})
    unfilled = sorted(set(abstract) - set(flat))
    if unfilled:
        raise ValueError(f"no rule fills seqjax parameter {'/'.join(unfilled[0])}")
    return traverse_util.unflatten_dict(flat)


def to_hf(rules, params: dict) -> dict[str, np.ndarray]:
    """Hugging Face tensors (float32 numpy) from a seqjax parameter tree."""
    flat = traverse_util.flatten_dict(_unbox(params))
    out = {}
    for rule in rules:
        missing = [p for p in rule.sx if p not in flat]
        if missing:
            raise ValueError(
                f"the seqjax parameters have no {'/'.join(missing[0])}, which the "
                f"Hugging Face layout needs for {rule.hf[0]!r}"
            )
        arrays = rule.to_hf(*[np.asarray(flat[p], np.float32) for p in rule.sx])
        out.update({n: np.ascontiguousarray(a) for n, a in zip(rule.hf, arrays)})
    return out


def _unbox(params):
    import flax.linen as nn

    params = nn.meta.unbox(params)
    return params.get("params", params) if "params" in params and len(params) == 1 else params


def abstract_params(model, *args) -> dict[Path, jax.ShapeDtypeStruct]:
    """``{path: ShapeDtypeStruct}`` of ``model``'s parameters for inputs ``args``."""
    import flax.linen as nn

    shapes = jax.eval_shape(lambda: nn.meta.unbox(model.init(jax.random.key(0), *args)))
    return traverse_util.flatten_dict(dict(shapes["params"]))
