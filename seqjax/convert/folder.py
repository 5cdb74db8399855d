"""Reading and writing a Hugging Face model folder without torch: ``config.json`` plus
``model.safetensors`` or a sharded ``model.safetensors.index.json`` (its ``weight_map``
names the shard of every tensor), read with ``safetensors.numpy``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"


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


def read_tensors(folder) -> dict[str, np.ndarray]:
    """Every tensor of the folder's safetensors file(s), by name, as numpy arrays."""
    from safetensors.numpy import load_file

    p = Path(folder)
    if (p / WEIGHTS).is_file():
        return dict(load_file(str(p / WEIGHTS)))
    if (p / INDEX).is_file():
        weight_map = json.loads((p / INDEX).read_text()).get("weight_map") or {}
        tensors = {}
        for shard in sorted(set(weight_map.values())):
            tensors.update(load_file(str(p / shard)))
        missing = sorted(set(weight_map) - set(tensors))
        if missing:
            raise ValueError(f"{p / INDEX} names tensors no shard holds, e.g. {missing[0]!r}")
        return tensors
    raise ValueError(
        f"Hugging Face folder {str(p)!r} has no {WEIGHTS} or {INDEX} (only safetensors "
        "weights are read; convert a pytorch_model.bin with save_pretrained("
        "safe_serialization=True))"
    )


def write_folder(folder, hf_config: dict, tensors: dict[str, np.ndarray]) -> Path:
    """Writes ``config.json`` and ``model.safetensors`` (float32, contiguous) into ``folder``."""
    from safetensors.numpy import save_file

    p = Path(folder)
    p.mkdir(parents=True, exist_ok=True)
    (p / CONFIG).write_text(json.dumps(hf_config, indent=2, sort_keys=True) + "\n")
    arrays = {k: np.ascontiguousarray(np.asarray(v, np.float32)) for k, v in tensors.items()}
    save_file(arrays, str(p / WEIGHTS), metadata={"format": "pt"})
    return p
