"""Causal LMs for in-context evaluation: a Hugging Face folder (``seqjax.convert``) or any
Flax LM with its parameters, placed on a data-parallel device mesh (parameters replicated,
request batches split over the ``data`` axis, as training splits its batches)."""

from __future__ import annotations

import json
from pathlib import Path

import jax

from seqjax.tasks.icl.requests import CausalLM


def data_mesh() -> jax.sharding.Mesh:
    """Every device on the ``data`` axis (the other mesh axes of size 1)."""
    from seqjax.models.sharding_rules import MESH_AXES

    shape = tuple(jax.device_count() if a == "data" else 1 for a in MESH_AXES)
    auto = (jax.sharding.AxisType.Auto,) * len(MESH_AXES)
    return jax.make_mesh(shape, MESH_AXES, axis_types=auto)


def from_module(model, params, encode, decode, *, max_length, prefix_id, eot_id=None,
                mesh=None) -> CausalLM:  # fmt: skip
    """A ``CausalLM`` of a Flax LM ``model.apply({"params": params}, ids_BT) -> logits``."""
    mesh = mesh or data_mesh()
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    params = jax.device_put(params, replicated)

    def logits(ids_BT):
        return model.apply({"params": params}, ids_BT)

    return CausalLM(logits, lambda s: list(encode(s)), lambda t: decode(list(t)),
                    int(max_length), int(prefix_id), eot_id, mesh)  # fmt: skip


def from_hf_folder(folder, *, max_length: int | None = None, mesh=None) -> CausalLM:
    """The causal LM of a Hugging Face folder (weights through ``seqjax.convert``, its
    ``tokenizer.json``); the prefix token is the tokenizer's BOS, else EOS, as the harness's."""
    from seqjax import convert

    imp = convert.load(folder)
    cfg = imp.config
    if not getattr(cfg, "causal", False) or getattr(cfg, "mlm_head_transform", False):
        raise ValueError(
            f"hf:{folder} is a {imp.arch} model, not a causal LM; in-context evaluation needs "
            "a decoder LM (e.g. GPT2LMHeadModel, GPTNeoForCausalLM)"
        )
    tok = convert.tokenizer(folder)
    special = _special_ids(Path(folder), tok, imp.hf_config)
    prefix = special["bos"] if special["bos"] is not None else special["eos"]
    if prefix is None:
        raise ValueError(f"hf:{folder} names no bos or eos token for an empty context")
    return from_module(imp.model, imp.params, tok.encode, tok.decode,
                       max_length=max_length or cfg.max_len, prefix_id=prefix,
                       eot_id=special["eos"], mesh=mesh)  # fmt: skip


def _special_ids(folder: Path, tok, hf_config: dict) -> dict:
    out = {"bos": hf_config.get("bos_token_id"), "eos": hf_config.get("eos_token_id")}
    cfg = folder / "tokenizer_config.json"
    if cfg.is_file() and tok.kind == "tokenizers":
        names = json.loads(cfg.read_text())
        for key in ("bos", "eos"):
            name = names.get(f"{key}_token")
            name = name.get("content") if isinstance(name, dict) else name
            if isinstance(name, str) and tok._tok.token_to_id(name) is not None:
                out[key] = tok._tok.token_to_id(name)
    return out
