"""Warm starts from Hugging Face checkpoints, and the way back.

``load(folder)`` reads a Hugging Face model folder (``config.json`` + ``model.safetensors``
or a sharded index; no torch: ``safetensors.numpy``) into the seqjax model of the same
function, with float32 parameters. Each layout is an ``Architecture`` registered in
``seqjax.convert.registry`` by the ``config.json`` ``architectures`` names it reads (one
module each under ``seqjax.convert.archs``; ``registry.hf_names()`` lists them):

==============================================================  ===============================
``architectures`` (or ``model_type``)                           seqjax model
==============================================================  ===============================
``BertForMaskedLM``, ``BertForPreTraining``, ``BertModel``      ``TransformerLM`` masked LM
``RobertaForMaskedLM``, ``RobertaModel``                        the same, positions from
                                                                ``pad_token_id + 1``
``GPT2LMHeadModel``, ``GPT2Model``                              ``TransformerLM`` causal LM
``T5ForConditionalGeneration``, ``T5WithLMHeadModel``           ``EncoderDecoder``
==============================================================  ===============================

::

    from seqjax import convert
    hf = convert.load("bert-base-uncased/")            # Imported(arch, config, model, params)
    logits_BTV = hf.model.apply({"params": hf.params}, ids_BT)
    convert.save("out/", hf.arch, hf.config, hf.params)  # back to the Hugging Face layout

Every name and layout is an explicit rule (``seqjax.convert.mapping``; per architecture in
``encoders`` and ``t5``, registered by ``archs``); the Hugging Face shapes the config implies
are checked before anything is converted. ``tokenizer(folder)`` loads the folder's
``tokenizer.json`` (or SentencePiece model) so the same ids reach the model.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import numpy as np

from seqjax.convert import folder, mapping, registry
from seqjax.convert.registry import Architecture, register
from seqjax.convert.tokenizer import HFTokenizer, check_vocabulary, tokenizer

__all__ = ["Architecture", "Imported", "load", "save", "tokenizer", "HFTokenizer",
           "check_vocabulary", "hf_config", "rules", "register", "registry"]  # fmt: skip

# Fields of a seqjax config that are run-time choices, not part of any layout: ``save`` does
# not compare them with the config the written ``config.json`` implies.
RUNTIME_FIELDS = frozenset({
    "attention", "encoder_attention", "decoder_attention", "dropout_rate",
    "attention_dropout_rate", "dtype", "remat", "ff_chunk_size", "max_len",
    "cross_attention_implementation", "max_source_len", "max_target_len",
})  # fmt: skip


@dataclasses.dataclass
class Imported:
    """A Hugging Face checkpoint as a seqjax model.

    Attributes:
      arch: the architecture's seqjax name (``convert.registry.names()``: "bert", "gpt2", ...).
      config: its seqjax model config (``TransformerConfig`` / ``EncoderDecoderConfig``).
      model: the Flax module (``TransformerLM`` or ``EncoderDecoder``).
      params: the parameter tree (float32 numpy arrays), for ``{"params": params}``.
      hf_config: the folder's ``config.json``.
      unused: Hugging Face tensors the model has no place for (e.g. BERT's pooler).
      initialized: seqjax parameter trees the file has no tensors for, initialised (seed 0):
        a bare ``BertModel``'s masked-LM head.
    """

    arch: str
    config: Any
    model: Any
    params: dict
    hf_config: dict
    unused: list
    initialized: list = dataclasses.field(default_factory=list)


def family(hf_cfg: dict, where: str = "config.json") -> str:
    """The seqjax name of the architecture that reads a ``config.json`` (one-sentence error
    naming the supported ``architectures``)."""
    return registry.for_hf_config(hf_cfg, where).name


def model_config(arch: str, hf_cfg: dict, max_len: int | None = None):
    """The seqjax config of architecture ``arch`` for a ``config.json`` dict."""
    return registry.get(arch).config(hf_cfg, max_len)


def hf_config(arch: str, cfg) -> dict:
    """The ``config.json`` dict of a seqjax config in architecture ``arch``'s layout."""
    return registry.get(arch).hf_config(cfg)


def rules(arch: str, cfg, prefix: str | None = None, tensors=None) -> list:
    """The name/layout rules of architecture ``arch`` for ``cfg`` (``tensors``: those of the
    file being imported; None: exporting)."""
    return registry.get(arch).rules(cfg, prefix, tensors)


def make_model(arch: str, cfg):
    """The Flax module of architecture ``arch``."""
    return registry.get(arch).make_model(cfg)


def load(path, *, max_len: int | None = None) -> Imported:
    """Imports the Hugging Face model folder ``path`` (see the module docstring).

    Args:
      path: a folder with ``config.json`` and safetensors weights.
      max_len: T5's longest source / target (default ``n_positions`` or 512); BERT and
        GPT-2 keep every learned position (``max_position_embeddings`` / ``n_positions``).
    """
    hf_cfg = folder.read_config(path)
    arch = registry.for_hf_config(hf_cfg, f"{Path(path) / folder.CONFIG}")
    tensors = folder.read_tensors(path)
    if arch.fix_tensors is not None:
        hf_cfg, tensors = arch.fix_tensors(hf_cfg, tensors)
    cfg = arch.config(hf_cfg, max_len)
    model = arch.make_model(cfg)
    rs = arch.rules(cfg, arch.prefix(tensors), tensors)
    abstract = mapping.abstract_params(model, *arch.example_inputs(cfg))
    rs, absent = _without_absent_optional(arch, rs, tensors, abstract)
    wanted = {p: s for p, s in abstract.items() if p[0] not in absent}
    params = mapping.to_seqjax(rs, tensors, wanted, source=str(path))
    if absent:
        params = _initialise(model, arch.example_inputs(cfg), params, absent)
        logging.warning("convert.load(%s): the file has no %s; initialised (seed 0)", path,
                        sorted(absent))  # fmt: skip
    used = {n for r in rs for n in r.hf}
    unused = sorted(set(tensors) - used)
    if unused:
        logging.info("convert.load(%s): %d tensors unused, e.g. %s", path, len(unused), unused[0])
    return Imported(arch.name, cfg, model, params, hf_cfg, unused, sorted(absent))


def _without_absent_optional(arch, rs, tensors, abstract):
    """The rules minus those of an optional tree (``Architecture.optional``) the file has no
    tensor of, and the names of those trees."""
    absent = set()
    for root in arch.optional:
        mine = [r for r in rs if all(p[0] == root for p in r.sx)]
        if any(p[0] == root for p in abstract) and not any(
            n in tensors for r in mine for n in r.hf
        ):
            absent.add(root)
    return [r for r in rs if not all(p[0] in absent for p in r.sx)], absent


def _initialise(model, inputs, params: dict, roots) -> dict:
    import flax.linen as nn
    import jax

    fresh = nn.meta.unbox(model.init(jax.random.key(0), *inputs))["params"]
    return {**params, **{r: jax.tree.map(np.asarray, fresh[r]) for r in sorted(roots)}}


def save(path, arch: str, cfg, params) -> Path:
    """Exports seqjax ``params`` of a model in family ``arch``'s layout (``cfg`` such as
    ``load`` returns, or a seqjax config built with the same options) to a Hugging Face
    folder that ``transformers`` loads (``from_pretrained``) and ``load`` reads back.

    The config must be expressible in that layout: ``cfg`` is compared with the config the
    written ``config.json`` implies, and the first differing field raises a ``ValueError``
    naming it and both values.
    """
    layout = registry.get(arch)
    hf = layout.hf_config(cfg)
    implied = layout.config(hf, None)
    mech = [name for name, _ in getattr(cfg, "attention", getattr(cfg, "encoder_attention", ()))]
    if any(name != "dense" for name in mech):
        logging.warning("convert.save: attention %s is exported as Hugging Face's dense "
                        "attention", mech)  # fmt: skip
    skip = RUNTIME_FIELDS | set(layout.export_ignores)
    for f in dataclasses.fields(cfg):
        if f.name in skip:
            continue
        mine, want = getattr(cfg, f.name), getattr(implied, f.name)
        if mine != want:
            raise ValueError(
                f"model.{f.name}={mine!r} cannot be exported in the {arch} layout, which "
                f"needs {want!r}"
            )
    tensors = mapping.to_hf(layout.rules(cfg, None, None), params)
    return folder.write_folder(path, hf, tensors)
