"""Warm starts from Hugging Face checkpoints, and the way back.

``load(folder)`` reads a Hugging Face model folder (``config.json`` + ``model.safetensors``
or a sharded index; no torch: ``safetensors.numpy``) into the seqjax model of the same
function, with float32 parameters:

=============================================  =========================================
``architectures`` (or ``model_type``)          seqjax model
=============================================  =========================================
``BertForMaskedLM``, ``BertForPreTraining``    ``TransformerLM`` masked LM (post-LN, MLM head)
``RobertaForMaskedLM``                         the same, positions from ``pad_token_id + 1``
``GPT2LMHeadModel``                            ``TransformerLM`` causal LM (pre-LN)
``T5ForConditionalGeneration``                 ``EncoderDecoder`` (RMSNorm, relative bias)
=============================================  =========================================

::

    from seqjax import convert
    hf = convert.load("bert-base-uncased/")            # Imported(arch, config, model, params)
    logits_BTV = hf.model.apply({"params": hf.params}, ids_BT)
    convert.save("out/", hf.arch, hf.config, hf.params)  # back to the Hugging Face layout

Every name and layout is an explicit rule (``seqjax.convert.mapping``; per family in
``encoders`` and ``t5``); the Hugging Face shapes the config implies are checked before
anything is converted. ``tokenizer(folder)`` loads the folder's ``tokenizer.json`` (or
SentencePiece model) so the same ids reach the model.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np

from seqjax.convert import encoders, folder, mapping, t5
from seqjax.convert.tokenizer import HFTokenizer, check_vocabulary, tokenizer

__all__ = ["ARCHITECTURES", "Imported", "load", "save", "tokenizer", "HFTokenizer",
           "check_vocabulary", "hf_config", "rules"]  # fmt: skip

# Hugging Face architecture -> seqjax family.
ARCHITECTURES = {
    "BertForMaskedLM": "bert",
    "BertForPreTraining": "bert",
    "RobertaForMaskedLM": "roberta",
    "GPT2LMHeadModel": "gpt2",
    "T5ForConditionalGeneration": "t5",
}
_MODEL_TYPES = {"bert": "bert", "roberta": "roberta", "gpt2": "gpt2", "t5": "t5"}
FAMILIES = ("bert", "roberta", "gpt2", "t5")


@dataclasses.dataclass
class Imported:
    """A Hugging Face checkpoint as a seqjax model.

    Attributes:
      arch: the family ("bert", "roberta", "gpt2", "t5").
      config: its ``TransformerConfig`` / ``EncoderDecoderConfig``.
      model: the Flax module (``TransformerLM`` or ``EncoderDecoder``).
      params: the parameter tree (float32 numpy arrays), for ``{"params": params}``.
      hf_config: the folder's ``config.json``.
      unused: Hugging Face tensors the model has no place for (e.g. BERT's pooler).
    """

    arch: str
    config: Any
    model: Any
    params: dict
    hf_config: dict
    unused: list


def family(hf_cfg: dict, where: str = "config.json") -> str:
    """The seqjax family of a ``config.json`` (one-sentence error naming the supported)."""
    names = list(hf_cfg.get("architectures") or [])
    for name in names:
        if name in ARCHITECTURES:
            return ARCHITECTURES[name]
    if not names and hf_cfg.get("model_type") in _MODEL_TYPES:
        return _MODEL_TYPES[hf_cfg["model_type"]]
    got = names[0] if names else hf_cfg.get("model_type")
    raise ValueError(
        f"{where}: architecture {got!r} is not supported; supported: {sorted(ARCHITECTURES)}"
    )


def model_config(arch: str, hf_cfg: dict, max_len: int | None = None):
    """The seqjax config of family ``arch`` for a ``config.json`` dict."""
    if arch in ("bert", "roberta"):
        return encoders.bert_config(hf_cfg, arch == "roberta", max_len)
    if arch == "gpt2":
        return encoders.gpt2_config(hf_cfg, max_len)
    if arch == "t5":
        return t5.t5_config(hf_cfg, max_len)
    raise ValueError(f"arch={arch!r} is not one of {FAMILIES}")


def hf_config(arch: str, cfg) -> dict:
    """The ``config.json`` dict of a seqjax config in family ``arch``'s layout."""
    if arch in ("bert", "roberta"):
        return encoders.bert_hf_config(cfg, arch == "roberta")
    if arch == "gpt2":
        return encoders.gpt2_hf_config(cfg)
    if arch == "t5":
        return t5.t5_hf_config(cfg)
    raise ValueError(f"arch={arch!r} is not one of {FAMILIES}")


def rules(arch: str, cfg, prefix: str | None = None, tensors=None) -> list:
    """The name/layout rules of family ``arch`` for ``cfg`` (``tensors``: the names of the
    file being imported; None: exporting)."""
    if arch in ("bert", "roberta"):
        return encoders.bert_rules(cfg, arch == "roberta", prefix, tensors)
    if arch == "gpt2":
        return encoders.gpt2_rules(cfg, "transformer." if prefix is None else prefix)
    return t5.t5_rules(cfg)


def make_model(arch: str, cfg):
    """The Flax module of family ``arch``."""
    return t5.make_model(cfg) if arch == "t5" else encoders.make_model(cfg)


def _abstract(arch: str, cfg, model) -> dict:
    ids = jnp.ones((1, 4), jnp.int32)
    return mapping.abstract_params(model, *((ids, ids) if arch == "t5" else (ids,)))


def _prefix(arch: str, tensors: dict) -> str | None:
    """The encoder's name prefix as saved (``bert.``, ``roberta.``, ``transformer.``, or none
    for a bare ``BertModel`` / ``GPT2Model``)."""
    anchor = {"bert": "embeddings.word_embeddings.weight", "gpt2": "wte.weight"}
    key = anchor.get("bert" if arch == "roberta" else arch)
    if key is None:
        return None
    found = [n[: -len(key)] for n in tensors if n.endswith(key)]
    return found[0] if found else None


def load(path, *, max_len: int | None = None) -> Imported:
    """Imports the Hugging Face model folder ``path`` (see the module docstring).

    Args:
      path: a folder with ``config.json`` and safetensors weights.
      max_len: T5's longest source / target (default ``n_positions`` or 512); BERT and
        GPT-2 keep every learned position (``max_position_embeddings`` / ``n_positions``).
    """
    hf_cfg = folder.read_config(path)
    arch = family(hf_cfg, f"{Path(path) / folder.CONFIG}")
    tensors = folder.read_tensors(path)
    if arch == "t5" and "lm_head.weight" in tensors and "shared.weight" in tensors:
        tied = np.array_equal(tensors["lm_head.weight"], tensors["shared.weight"])
        hf_cfg = {**hf_cfg, "tie_word_embeddings": tied} if not tied else hf_cfg
    cfg = model_config(arch, hf_cfg, max_len)
    model = make_model(arch, cfg)
    rs = rules(arch, cfg, _prefix(arch, tensors), tensors)
    params = mapping.to_seqjax(rs, tensors, _abstract(arch, cfg, model), source=str(path))
    used = {n for r in rs for n in r.hf}
    unused = sorted(set(tensors) - used)
    if unused:
        logging.info("convert.load(%s): %d tensors unused, e.g. %s", path, len(unused), unused[0])
    return Imported(arch, cfg, model, params, hf_cfg, unused)


def save(path, arch: str, cfg, params, *, source=None) -> Path:
    """Exports seqjax ``params`` of a model in family ``arch``'s layout (``cfg`` such as
    ``load`` returns, or a seqjax config built with the same options) to a Hugging Face
    folder that ``transformers`` loads (``from_pretrained``) and ``load`` reads back.

    The config must be expressible in that layout: ``cfg`` is compared with the config the
    written ``config.json`` implies, and the first differing field raises a ``ValueError``
    naming it and both values. ``source``: the Hugging Face folder the model was imported
    from (or its ``config.json`` dict): its special token ids, tokenizer files and
    ``generation_config.json`` are written with the weights (``folder.write_folder``).
    """
    if arch not in FAMILIES:
        raise ValueError(f"arch={arch!r} is not one of {FAMILIES}")
    hf = hf_config(arch, cfg)
    implied = model_config(arch, hf)
    mech = [name for name, _ in getattr(cfg, "attention", getattr(cfg, "encoder_attention", ()))]
    if any(name != "dense" for name in mech):
        logging.warning("convert.save: attention %s is exported as Hugging Face's dense "
                        "attention", mech)  # fmt: skip
    skip = {"attention", "encoder_attention", "decoder_attention", "dtype", "remat",
            "ff_chunk_size", "max_len",
            "cross_attention_implementation", "max_source_len", "max_target_len"}  # fmt: skip
    for f in dataclasses.fields(cfg):
        if f.name in skip:
            continue
        mine, layout = getattr(cfg, f.name), getattr(implied, f.name)
        if mine != layout:
            raise ValueError(
                f"model.{f.name}={mine!r} cannot be exported in the {arch} layout, which "
                f"needs {layout!r}"
            )
    tensors = mapping.to_hf(rules(arch, cfg), params)
    return folder.write_folder(path, hf, tensors, source=source)
