"""``config.init_from = "hf:<folder>"``: a Hugging Face checkpoint starts a training run.

``fill(config)`` runs first, before validation, data or optimizer work: it reads the folder's
``config.json`` (one sentence when the folder, the file or the architecture is unusable),
finds the seqjax family and config the architecture imports into (``seqjax.convert``), and
writes that shape into the job config:

* ``config.model.family`` and the family's fields (``Family.block_of``: layers, heads,
  widths, positions, ``model.layout`` for the checkpoint's layout options);
* ``config.data.vocab = "hf:<folder>"``: the folder's tokenizer becomes the data's
  vocabulary, so the ids the checkpoint was trained on reach it;
* ``dropout_rate``/``attention_dropout_rate`` from the checkpoint unless the command line
  sets them (a training choice, not a shape).

A model field typed on the command line that disagrees with the checkpoint is one sentence
naming both values. ``params(run, value)`` then loads every parameter of the run's model that
the checkpoint holds with the same shape (a new task head keeps its initialisation) and
writes the loaded / new / unused lists to ``<workdir>/init_from.json``, as
``seqjax.train.init_from`` does for seqjax checkpoints.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import jax
from flax import traverse_util

from seqjax import console
from seqjax.models import registry as model_registry
from seqjax.train import config_validation, paths

PREFIX = "hf:"
# Fields the checkpoint suggests but the command line may change (training choices).
TRAINING_FIELDS = ("dropout_rate", "attention_dropout_rate")


class HFStartError(config_validation.ConfigError):
    """``config.init_from=hf:...`` cannot start this run (one sentence)."""


def is_hf(value) -> bool:
    """Whether ``config.init_from`` names a Hugging Face folder."""
    return isinstance(value, str) and value.startswith(PREFIX)


def folder_of(value: str) -> Path:
    """The folder of ``hf:<folder>`` (``~`` expanded, absolute)."""
    return Path(value[len(PREFIX) :]).expanduser().absolute()


def imported_config(value: str):
    """``(architecture name, seqjax model config)`` of the folder of ``hf:<folder>``.

    Raises:
      HFStartError: no folder, no ``config.json``, or an unsupported architecture.
    """
    from seqjax import convert

    folder = folder_of(value)
    try:
        hf_cfg = convert.folder.read_config(folder)
        arch = convert.family(hf_cfg, str(folder / "config.json"))
        return arch, convert.model_config(arch, hf_cfg)
    except ValueError as e:
        raise HFStartError(f"config.init_from={value!r}: {e}") from None


def fill(config, typed: set[str] | None = None) -> None:
    """Writes the checkpoint's family, shape and vocabulary into ``config`` (module
    docstring); nothing when ``config.init_from`` is not ``hf:``. Idempotent.

    Args:
      typed: ``model.<field>`` / ``data.<field>`` names typed on the command line (default:
        those of the command line the console recorded).

    Raises:
      HFStartError: an unusable folder, or a typed field that disagrees with it.
    """
    value = config.get("init_from")
    if not is_hf(value):
        return
    typed = console.typed_fields() if typed is None else set(typed)
    arch, cfg = imported_config(value)
    family = model_registry.for_model_config(cfg)
    if family.block_of is None:
        raise HFStartError(
            f"config.init_from={value!r}: model family {family.name!r} cannot start a run "
            "from a Hugging Face folder (it declares no block_of)"
        )
    block = {"family": family.name, **family.block_of(cfg)}
    m = config.model
    for field, want in block.items():
        have = m.get(field)
        if f"model.{field}" in typed and _plain(have) != _plain(want):
            if field in TRAINING_FIELDS:
                continue  # the user's choice for fine-tuning
            raise HFStartError(
                f"config.model.{field}={_plain(have)!r} disagrees with the checkpoint "
                f"init_from={value!r} ({arch}), which has {field}={_plain(want)!r}; drop the "
                "override or use another checkpoint"
            )
        if f"model.{field}" in typed:
            continue
        with m.ignore_type(), m.unlocked():
            m[field] = want
    vocab = f"{PREFIX}{folder_of(value)}"
    have_vocab = config.data.get("vocab")
    if "data.vocab" in typed and have_vocab != vocab and not _same_folder(have_vocab, vocab):
        raise HFStartError(
            f"config.data.vocab={have_vocab!r} disagrees with init_from={value!r}: the "
            f"checkpoint reads the ids of its own tokenizer; drop the override (it becomes "
            f"{vocab!r})"
        )
    with config.data.ignore_type(), config.data.unlocked():
        config.data.vocab = vocab


def _same_folder(a, b) -> bool:
    return is_hf(a) and is_hf(b) and folder_of(a) == folder_of(b)


def _plain(x):
    """ConfigDicts as dicts and lists as tuples, for comparisons and messages."""
    if hasattr(x, "to_dict"):
        x = x.to_dict()
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return tuple(_plain(v) for v in x)
    return x


def params(run, value, workdir=None) -> dict:
    """``run.init()`` with every parameter the checkpoint holds loaded in place (same path
    and shape); the rest (a new task head) keeps its initialisation.

    Raises:
      HFStartError: the model has a parameter under ``encoder/`` the checkpoint lacks or
        holds with another shape (another architecture than ``fill`` described).
    """
    from seqjax import convert

    imported = convert.load(folder_of(value))
    have = traverse_util.flatten_dict(imported.params)
    target = traverse_util.flatten_dict(run.abstract["params"])
    load, new = [], []
    for path, leaf in sorted(target.items()):
        if path in have and tuple(have[path].shape) == tuple(leaf.shape):
            load.append(path)
            continue
        if path in have or path[0] == "encoder":
            got = tuple(have[path].shape) if path in have else "nothing"
            raise HFStartError(
                f"config.init_from={value!r} holds {'/'.join(path)} as {got}, but this "
                f"model's is {tuple(leaf.shape)}; the run's model differs from the checkpoint"
            )
        new.append(path)
    unused = sorted(set(have) - set(target))
    state = run.init()
    flat = traverse_util.flatten_dict(state["params"])
    for path in load:
        flat[path] = jax.device_put(have[path].astype(target[path].dtype), target[path].sharding)
    _report(value, load, new, unused, workdir)
    return {**state, "params": traverse_util.unflatten_dict(flat)}


def _report(value, load, new, unused, workdir) -> None:
    def names(ps):
        return ["/".join(p) for p in ps]

    logging.info("init_from %s: loaded %d parameters, new %d (%s), unused %d (%s)", value,
                 len(load), len(new), ", ".join(names(new)) or "none", len(unused),
                 ", ".join(names(unused)) or "none")  # fmt: skip
    if workdir is not None and jax.process_index() == 0:
        record = {"init_from": str(value), "step": None, "loaded": names(load),
                  "new": names(new), "unused": names(unused)}  # fmt: skip
        (paths.workdir_path(workdir) / "init_from.json").write_text(json.dumps(record, indent=1))
