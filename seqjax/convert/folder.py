"""Reading and writing a Hugging Face model folder without torch: ``config.json`` plus
``model.safetensors`` or a sharded ``model.safetensors.index.json`` (its ``weight_map``
names the shard of every tensor), read with ``safetensors.numpy``.

Writing also gives the folder its ``generation_config.json`` and, from the ``source``
folder a model was imported from, its token ids (``TOKEN_IDS``) and tokenizer files
(``TOKENIZER_FILES``), so ``transformers`` generates and tokenizes as the source did.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"
GENERATION = "generation_config.json"
# The files of a Hugging Face tokenizer (fast ``tokenizer.json``, the slow ones' vocabularies,
# SentencePiece models) and its settings, copied from ``source`` as they are.
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "vocab.json", "merges.txt", "vocab.txt", "spiece.model", "sentencepiece.bpe.model",
    "tokenizer.model",
)  # fmt: skip
# config.json's special token ids: the source's values are kept (seqjax's config has none;
# pad_token_id is also a model field, written from the model and checked).
TOKEN_IDS = ("bos_token_id", "eos_token_id", "sep_token_id", "cls_token_id", "mask_token_id",
             "unk_token_id", "decoder_start_token_id")  # fmt: skip
GENERATION_IDS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")


def read_config(folder) -> dict:
    """The folder's ``config.json`` as a dict (one-sentence ``ValueError`` when absent)."""
    p = Path(folder)
    if not p.is_dir():
        raise ValueError(f"Hugging Face folder {str(p)!r} does not exist or is not a folder")
    cfg = p / CONFIG
    if not cfg.is_file():
        raise ValueError(
            f"Hugging Face folder {str(p)!r} has no {CONFIG}; it needs {CONFIG} and "
            f"{WEIGHTS} (or {INDEX}) as save_pretrained writes them"
        )
    try:
        return json.loads(cfg.read_text())
    except ValueError as e:
        raise ValueError(f"{cfg} is not valid JSON ({e})") from None


def _load(path: Path, index: Path | None = None) -> dict[str, np.ndarray]:
    """One safetensors file's tensors; a missing (a shard ``index`` names), empty,
    truncated or damaged file is a one-sentence ``ValueError`` naming it."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    if not path.is_file():
        raise ValueError(
            f"{path} is missing: {index} names it as the shard of some tensors; download "
            "every shard the index names, or save the model again with save_pretrained"
        )
    if path.stat().st_size == 0:
        raise ValueError(f"{path} is empty (0 bytes); download or save the model again")
    try:
        return dict(load_file(str(path)))
    except (SafetensorError, OSError) as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(
            f"{path} is not a complete safetensors file ({path.stat().st_size} bytes; "
            f"{reason}): truncated or damaged, download or save the model again"
        ) from None


def read_tensors(folder) -> dict[str, np.ndarray]:
    """Every tensor of the folder's safetensors file(s), by name, as numpy arrays."""
    p = Path(folder)
    if (p / WEIGHTS).is_file():
        return _load(p / WEIGHTS)
    if (p / INDEX).is_file():
        try:
            weight_map = json.loads((p / INDEX).read_text()).get("weight_map") or {}
        except (ValueError, AttributeError) as e:
            raise ValueError(f"{p / INDEX} is not a valid index (JSON object) ({e})") from None
        tensors = {}
        for shard in sorted(set(weight_map.values())):
            tensors.update(_load(p / shard, p / INDEX))
        missing = sorted(set(weight_map) - set(tensors))
        if missing:
            raise ValueError(f"{p / INDEX} names tensors no shard holds, e.g. {missing[0]!r}")
        return tensors
    raise ValueError(
        f"Hugging Face folder {str(p)!r} has no {WEIGHTS} or {INDEX} (only safetensors "
        "weights are read; convert a pytorch_model.bin with save_pretrained("
        "safe_serialization=True))"
    )


def write_folder(folder, hf_config: dict, tensors: dict[str, np.ndarray], *, source=None) -> Path:
    """Writes ``config.json``, ``model.safetensors`` (float32, contiguous) and
    ``generation_config.json`` into ``folder``; with ``source`` (the Hugging Face folder the
    model came from, or its ``config.json`` dict) its token ids and tokenizer files too."""
    from safetensors.numpy import save_file

    src_cfg, src_dir = _source(source)  # read before anything is written over it
    hf_config = {**hf_config, **{k: src_cfg[k] for k in TOKEN_IDS if k in src_cfg}}
    p = Path(folder)
    p.mkdir(parents=True, exist_ok=True)
    (p / CONFIG).write_text(json.dumps(hf_config, indent=2, sort_keys=True) + "\n")
    arrays = {k: np.ascontiguousarray(np.asarray(v, np.float32)) for k, v in tensors.items()}
    save_file(arrays, str(p / WEIGHTS), metadata={"format": "pt"})
    same = src_dir is not None and src_dir.resolve() == p.resolve()  # saved over the source
    for name in TOKENIZER_FILES:
        if src_dir is not None and not same and (src_dir / name).is_file():
            shutil.copyfile(src_dir / name, p / name)
    if src_dir is not None and (src_dir / GENERATION).is_file():
        if not same:
            shutil.copyfile(src_dir / GENERATION, p / GENERATION)
    else:
        gen = {k: hf_config[k] for k in GENERATION_IDS if hf_config.get(k) is not None}
        (p / GENERATION).write_text(json.dumps(gen, indent=2, sort_keys=True) + "\n")
    return p


def _source(source) -> tuple[dict, Path | None]:
    """``(config.json dict, folder or None)`` of ``write_folder``'s ``source``."""
    if source is None:
        return {}, None
    if isinstance(source, dict):
        return source, None
    return read_config(source), Path(source)
