"""The Hugging Face architecture registry: every layout ``seqjax.convert`` reads and writes is an
``Architecture`` its own module registers.

An architecture declares, in one ``register`` call, what ``convert.load`` / ``convert.save``
need: the ``architectures`` strings of ``config.json`` it reads (the names real hub checkpoints
carry included), its ``model_type``, the two config translations (``config.json`` <-> seqjax
config), its name-and-layout rules (``seqjax.convert.mapping.Rule``), its Flax module, the
inputs that trace the module's parameters, where the encoder's name prefix is found in a file
and optional fix-ups of a file's tensors (legacy names). ``convert.load``/``convert.save`` ask
this registry and never test an architecture's name; adding one is its own module plus one
line in ``BUILTIN`` (or an import of a module of your own: ``docs/extending.md``, "A new
Hugging Face architecture").

This module imports nothing of ``seqjax.convert`` (the architecture modules import it).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterable
from typing import Any

# The architectures that ship with seqjax, imported on first use (each module registers itself).
BUILTIN = (
    "seqjax.convert.archs.bert",
    "seqjax.convert.archs.gpt2",
    "seqjax.convert.archs.gpt_neo",
    "seqjax.convert.archs.t5",
    "seqjax.convert.archs.albert",
    "seqjax.convert.archs.bert_finetune",
    "seqjax.convert.archs.bart",
    "seqjax.convert.archs.distilbert",
    "seqjax.convert.archs.openai_gpt",
    "seqjax.convert.archs.xlnet",
)


def token_ids(cfg) -> tuple:
    """One ``[1, 4]`` row of token ids: the inputs of a decoder or encoder LM."""
    import jax.numpy as jnp

    return (jnp.ones((1, 4), jnp.int32),)


def learned_length(cfg) -> int | None:
    """The longest input a learned position table takes: its rows after
    ``position_offset`` (an imported RoBERTa: 130 rows, offset 2 -> 128)."""
    if getattr(cfg, "max_len", None) is None:  # no learned table (relative positions)
        return None
    return int(cfg.max_len) - int(getattr(cfg, "position_offset", 0))


def source_and_target_ids(cfg) -> tuple:
    """Source and target ``[1, 4]`` rows: the inputs of an encoder-decoder."""
    return token_ids(cfg) * 2


@dataclasses.dataclass(frozen=True)
class Architecture:
    """One Hugging Face layout.

    Attributes:
      name: seqjax's name of it (``Imported.arch``; ``convert.save(path, name, ...)``).
      architectures: the ``config.json`` ``architectures`` strings it reads; the first is the
        one its ``hf_config`` writes.
      model_type: the ``config.json`` ``model_type`` (read when a file names no
        ``architectures``).
      config: ``(config.json dict, max_len or None) -> seqjax model config``; a value it
        cannot express is a one-sentence ``ValueError`` naming the field.
      hf_config: ``seqjax config -> config.json dict`` (``config(hf_config(cfg))`` is ``cfg``
        on every field ``save`` compares).
      rules: ``(cfg, prefix, tensors) -> [mapping.Rule]``: ``prefix`` the encoder's name
        prefix found in the file (None: the layout's own, as when exporting), ``tensors`` the
        file's tensors by name (None when exporting).
      make_model: ``cfg -> Flax module``.
      example_inputs: ``cfg -> inputs`` that trace the module's parameters (``init``).
      prefix_anchor: a tensor-name suffix whose text in front, in the file, is the prefix
        passed to ``rules`` (``"embeddings.word_embeddings.weight"`` finds ``bert.``,
        ``roberta.`` or none for a bare ``BertModel``); None: ``rules`` gets None.
      fix_tensors: ``(config.json dict, tensors) -> (config.json dict, tensors)`` applied to a
        file before its config is read (legacy tensor names, facts only the weights hold).
      optional: top-level seqjax parameter trees (``("mlm_head",)``) a file may lack (a bare
        encoder); ``load`` initialises them (seed 0) and lists them in ``Imported.initialized``.
      export_ignores: config fields ``save`` does not compare with the layout (beyond the
        run-time ones every layout ignores: attention, dropout, dtype, ...).
      family: the seqjax model family it builds (``seqjax.models.registry``), if registered.
      max_length: ``cfg -> the longest input`` the imported model takes (``Imported.max_len``;
        default ``learned_length``: the learned position rows after ``position_offset``).
      spm_prefix, spm_suffix: the SentencePiece pieces a folder with only a SentencePiece
        model (no ``tokenizer.json``) puts before / after one text (T5: ``("</s>",)`` after,
        as ``T5Tokenizer`` appends it); ``convert.tokenizer`` adds them.
    """

    name: str
    architectures: tuple[str, ...]
    model_type: str
    config: Callable[..., Any]
    hf_config: Callable[[Any], dict]
    rules: Callable[..., list]
    make_model: Callable[[Any], Any]
    example_inputs: Callable[[Any], tuple] = token_ids
    prefix_anchor: str | None = None
    fix_tensors: Callable[[dict, dict], tuple[dict, dict]] | None = None
    optional: tuple[str, ...] = ()
    export_ignores: tuple[str, ...] = ()
    family: str | None = None
    max_length: Callable[[Any], int] = learned_length
    spm_prefix: tuple[str, ...] = ()
    spm_suffix: tuple[str, ...] = ()

    def prefix(self, tensor_names: Iterable[str]) -> str | None:
        """The encoder's name prefix in a file with these tensors (None: not found / none)."""
        if self.prefix_anchor is None:
            return None
        key = self.prefix_anchor
        found = sorted(n[: -len(key)] for n in tensor_names if n.endswith(key))
        return found[0] if found else None


_ARCHS: dict[str, Architecture] = {}
_loaded = False


def _load_builtin() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for module in BUILTIN:
            importlib.import_module(module)


def register(arch: Architecture) -> Architecture:
    """Adds an architecture under ``arch.name`` (its module calls this at import)."""
    if not isinstance(arch, Architecture):
        raise TypeError(
            f"register() takes a seqjax.convert.registry.Architecture; got {type(arch)!r}"
        )
    if not arch.architectures or isinstance(arch.architectures, str):
        raise ValueError(
            f"Architecture {arch.name!r}: architectures must be a non-empty tuple of "
            "config.json names"
        )
    old = _ARCHS.get(arch.name)
    if old is not None and old != arch:
        raise ValueError(f"Hugging Face architecture {arch.name!r} is already registered")
    for other in _ARCHS.values():
        taken = set(other.architectures) & set(arch.architectures)
        if other.name != arch.name and taken:
            raise ValueError(
                f"config.json architecture {sorted(taken)[0]!r} is already read by {other.name!r}"
            )
    _ARCHS[arch.name] = arch
    return arch


def unregister(name: str) -> None:
    """Removes an architecture (tests that register a toy one clean up with this)."""
    _ARCHS.pop(name, None)


def names() -> tuple[str, ...]:
    """The registered architectures' seqjax names, in registration order."""
    _load_builtin()
    return tuple(_ARCHS)


def hf_names() -> tuple[str, ...]:
    """Every ``config.json`` ``architectures`` string some registered architecture reads."""
    _load_builtin()
    return tuple(n for a in _ARCHS.values() for n in a.architectures)


def get(name) -> Architecture:
    """The architecture registered under seqjax name ``name`` (one-sentence error listing the
    valid ones)."""
    _load_builtin()
    if not isinstance(name, str) or name not in _ARCHS:
        raise ValueError(f"arch={name!r} is not one of {names()}")
    return _ARCHS[name]


def for_hf_config(hf_cfg: dict, where: str = "config.json") -> Architecture:
    """The architecture that reads a ``config.json`` dict: the first of its ``architectures``
    some registered one reads, else (no ``architectures``) its ``model_type``."""
    _load_builtin()
    listed = list(hf_cfg.get("architectures") or [])
    for hf_name in listed:
        for arch in _ARCHS.values():
            if hf_name in arch.architectures:
                return arch
    if not listed:
        for arch in _ARCHS.values():
            if arch.model_type == hf_cfg.get("model_type"):
                return arch
    got = listed[0] if listed else hf_cfg.get("model_type")
    raise ValueError(
        f"{where}: architecture {got!r} is not supported; supported: {sorted(hf_names())}"
    )
