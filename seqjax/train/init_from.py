"""Pre-train -> fine-tune: ``config.init_from`` loads a checkpoint's encoder into a new model.

``config.init_from`` is a training workdir (its newest complete checkpoint) or one checkpoint
folder ``<workdir>/checkpoints/<step>``. Every parameter under ``encoder/`` of the checkpoint
whose path exists in the new model is loaded (the shared ``Encoder`` of ``TransformerLM``,
``TransformerClassifier`` and the masked-LM model: token embedding, positions, blocks, final
norm); every other parameter of the new model (a classifier's pooling and head, an MLM
model's untied head) keeps its fresh initialisation; checkpoint parameters outside the
encoder (a pre-training head) are left unused. This is BERT's recipe (Devlin et al. 2019,
§3: "the same pre-trained model parameters are used to initialize models for different
down-stream tasks"; a new output layer per task).

Every encoder parameter of the new model must be in the checkpoint (another attention
mechanism or model kind is "another architecture": one error naming a missing parameter).
One exception to "same shape or an error": a token table ``encoder/embed/embedding`` with
more rows in the checkpoint than in the model keeps its first rows, since a masked-LM
vocabulary is the data's vocabulary with ``[MASK]`` appended (``seqjax.data.objectives``);
the log says so. Any other shape difference is one error naming the parameter. Since a
larger table alone cannot tell a ``[MASK]`` row from another vocabulary, the pre-training
run's ``config.json`` (beside its checkpoints) must describe the same vocabulary: the same
``data.vocab`` and, for learned ones (SentencePiece, words), the same data set and vocabulary
options; otherwise one error names both.

Restoring is an Orbax partial restore of only the loaded arrays, each placed directly with
the new model's sharding (so a sharded or multi-process run restores like a resume); the
optimizer state, step and RNG of the new run start fresh. The loaded / new / unused lists are
logged and written to ``<workdir>/init_from.json``.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path

import jax
import orbax.checkpoint as ocp
from flax import traverse_util
from jax.sharding import NamedSharding, PartitionSpec

from seqjax.train import checkpoint, config_validation, hf_start, paths

PREFIX = "encoder"
EMBEDDING = ("encoder", "embed", "embedding")


class InitFromError(config_validation.ConfigError):
    """``config.init_from`` points at nothing usable (one sentence naming the field)."""


def _bad(value, why: str) -> InitFromError:
    return InitFromError(f"config.init_from={value!r} {why}")


def resolve(value) -> tuple[str, int]:
    """``(state item folder, step)`` of ``config.init_from`` (a workdir or a step folder)."""
    p = paths.workdir_path(value)
    if (p / "checkpoints").is_dir():
        ckpt = checkpoint.Checkpointer(str(p), max_to_keep=1000, async_save=False)
        step = ckpt.latest_step()
        ckpt.close()
        if step is None:
            raise _bad(value, "is a workdir with no complete checkpoint; train it first or name "
                       "a checkpoint folder <workdir>/checkpoints/<step>")  # fmt: skip
        return str(p / "checkpoints" / str(step) / "state"), step
    if p.parent.name == "checkpoints" and p.name.isdigit() and p.is_dir():
        if not (p / "state").is_dir():
            raise _bad(value, "is a damaged checkpoint: it has no state/ folder")
        return str(p / "state"), int(p.name)
    raise _bad(value, "is neither a seqjax workdir (with checkpoints/) nor a checkpoint folder "
               "<workdir>/checkpoints/<step>")  # fmt: skip


VOCAB_FIELDS = ("vocab", "vocab_size", "spm_model_type", "spm_character_coverage",
                "spm_input_sentence_size", "words_min_count", "words_max_size")  # fmt: skip


def _vocabulary(data: dict) -> dict:
    """The fields of ``config.data`` that define the token ids (a learned vocabulary also
    depends on the data set it was learned from)."""
    vocab = data.get("vocab", "bytes")
    if vocab in ("bytes", None):
        return {"vocab": "bytes"}
    return {"name": data.get("name")} | {f: data.get(f) for f in VOCAB_FIELDS if f in data}


def check_vocabulary(value, state_dir: str, data_cfg) -> None:
    """Raises ``InitFromError`` when the checkpoint's run used another vocabulary than
    ``data_cfg`` (read from its ``config.json``; a checkpoint without one is not checked)."""
    saved_cfg = Path(state_dir).parents[2] / "config.json"  # <workdir>/checkpoints/<step>/state
    if not saved_cfg.is_file() or data_cfg is None:
        return
    try:
        saved = json.loads(saved_cfg.read_text()).get("data") or {}
    except (OSError, ValueError):
        return  # the restore itself reports a damaged run
    mine = dict(data_cfg.to_dict() if hasattr(data_cfg, "to_dict") else data_cfg)
    have, want = _vocabulary(saved), _vocabulary(mine)
    if have != want:
        keys = [k for k in sorted(set(have) | set(want)) if have.get(k) != want.get(k)]
        theirs = ", ".join(f"{k}={have.get(k)!r}" for k in keys)
        ours = ", ".join(f"{k}={want.get(k)!r}" for k in keys)
        raise _bad(value, f"was trained with another vocabulary (its config.data {theirs}; "
                   f"this run's {ours}); use the pre-training run's config.data vocabulary "
                   "options")  # fmt: skip


class _NoItemMetadataWarning(logging.Filter):
    """Drops Orbax's ``Metadata file does not exist: .../state/_CHECKPOINT_METADATA``: that
    file is the step's (one folder up); reading the ``state`` item directly, as init_from
    does, makes Orbax look for it there and warn, though nothing is missing."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not (text.startswith("Metadata file does not exist") and "_CHECKPOINT" in text)


@contextlib.contextmanager
def _quiet_item_metadata():
    """Orbax logs through absl (the ``absl`` logger): the filter holds for these calls only."""
    logger, quiet = logging.getLogger("absl"), _NoItemMetadataWarning()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


def _saved_params(value, state_dir: str) -> dict:
    """``{path tuple: metadata}`` of the checkpoint's parameters (shapes, dtypes)."""
    try:
        with _quiet_item_metadata():
            meta = ocp.PyTreeCheckpointer().metadata(state_dir)
        tree = meta.item_metadata if hasattr(meta, "item_metadata") else meta
        tree = getattr(tree, "tree", tree)
        params = dict(tree)["params"]
    except Exception as e:  # unreadable metadata: a damaged or foreign checkpoint
        raise _bad(value, f"is a damaged checkpoint ({checkpoint._reason(e)})") from None
    return traverse_util.flatten_dict(dict(params))


def plan(saved: dict, abstract_params: dict, value) -> dict:
    """``{'load': {path: rows or None}, 'new': [...], 'unused': [...]}`` of the encoder graft;
    raises ``InitFromError`` naming a parameter whose shapes differ."""
    target = traverse_util.flatten_dict(abstract_params)
    load, unused = {}, []
    for path, meta in sorted(saved.items()):
        if path[0] != PREFIX or path not in target:
            unused.append(path)
            continue
        have, want = tuple(meta.shape), tuple(target[path].shape)
        if have == want:
            load[path] = None
        elif path == EMBEDDING and have[1:] == want[1:] and have[0] > want[0]:
            load[path] = want[0]  # the [MASK] row(s) past the data's vocabulary are dropped
        else:
            name = "/".join(path)
            raise _bad(value, f"has parameter {name} of shape {have}, but this model's is "
                       f"{want}; use the pre-training run's config.model sizes")  # fmt: skip
    if not load or (EMBEDDING in target and EMBEDDING not in saved):  # (ELMo: char CNN)
        raise _bad(value, "is a run of another architecture: it has no encoder/embed/embedding "
                   f"(its {len(saved)} parameters include "
                   f"{'/'.join(next(iter(sorted(saved)), ('none',)))}); init_from takes a "
                   "masked-LM, classifier or LM run of this model")  # fmt: skip
    missing = [p for p in sorted(target) if p[0] == PREFIX and p not in load]
    if missing:
        raise _bad(value, f"is a run of another architecture: it lacks this model's "
                   f"{'/'.join(missing[0])} (and {len(missing) - 1} more encoder parameters); "
                   "use the pre-training run's config.model.attention and sizes")  # fmt: skip
    new = [p for p in sorted(target) if p not in load]
    return {"load": load, "new": new, "unused": unused}


def start(run, value, workdir=None) -> dict:
    """The initial state of a run with ``config.init_from=value``: a Hugging Face folder's
    parameters (``hf:<folder>``, ``seqjax.train.hf_start``) or a seqjax run's encoder; a task
    with ``init_from_subtree`` (distillation's teacher) loads the whole model there instead
    (``start_subtree``)."""
    if getattr(run.task, "init_from_subtree", None):
        return start_subtree(run, value, workdir)
    if hf_start.is_hf(value):
        return hf_start.params(run, value, workdir)
    return apply(run, value, workdir)


def start_subtree(run, value, workdir=None) -> dict:
    """``run.init()`` with every parameter of the model under ``run.task.init_from_subtree``
    loaded from ``value`` (a seqjax run's whole model, or ``hf:<folder>``), then
    ``run.task.after_init_from(run.model, params)``. Every parameter of the subtree must be
    in the checkpoint with its shape (one sentence naming the first that is not); checkpoint
    parameters outside it (a next-sentence head) are left unused."""
    sub = run.task.init_from_subtree
    flat_abstract = traverse_util.flatten_dict(run.abstract["params"][sub])
    if hf_start.is_hf(value):
        from seqjax import convert

        have = traverse_util.flatten_dict(convert.load(hf_start.folder_of(value)).params)
        step = None
    else:
        state_dir, step = resolve(value)
        check_vocabulary(value, state_dir, run.config.get("data"))
        have = _saved_params(value, state_dir)
    for path, leaf in sorted(flat_abstract.items()):
        got = tuple(have[path].shape) if path in have else None
        if got != tuple(leaf.shape):
            raise _bad(value, f"holds {'/'.join(path)} as {got or 'nothing'}, but this model's "
                       f"{sub}/{'/'.join(path)} is {tuple(leaf.shape)}; use the checkpoint's "
                       "config.model sizes")  # fmt: skip
    if hf_start.is_hf(value):
        loaded = {p: jax.device_put(have[p].astype(a.dtype), a.sharding)
                  for p, a in flat_abstract.items()}  # fmt: skip
    else:
        loaded = _restore(value, state_dir, have, {p: None for p in flat_abstract}, flat_abstract)
    state = run.init()
    params = {**state["params"], sub: traverse_util.unflatten_dict(loaded)}
    params = run.task.after_init_from(run.model, params)
    graft = {"load": {p: None for p in flat_abstract}, "unused": sorted(set(have) - set(loaded)),
             "new": []}  # fmt: skip
    _report(graft, value, -1 if step is None else step, workdir)
    return {**state, "params": params}


def _restore(value, state_dir: str, saved: dict, load: dict, flat_abstract: dict) -> dict:
    """``{path: array}`` of the paths ``load`` (``{path: rows or None}``) restored from the
    checkpoint ``state_dir`` (an Orbax partial restore), placed like ``flat_abstract``'s."""
    replicated = NamedSharding(next(iter(flat_abstract.values())).sharding.mesh, PartitionSpec())
    item, restore_args = {}, {}
    for path, rows in load.items():
        meta, target = saved[path], flat_abstract[path]
        sharding = target.sharding if rows is None else replicated
        item[path] = jax.ShapeDtypeStruct(tuple(meta.shape), target.dtype, sharding=sharding)
        restore_args[path] = ocp.ArrayRestoreArgs(sharding=sharding, dtype=target.dtype)
    nest = traverse_util.unflatten_dict
    try:
        with _quiet_item_metadata():
            restored = ocp.PyTreeCheckpointer().restore(
                state_dir,
                args=ocp.args.PyTreeRestore(
                    item={"params": nest(item)},
                    restore_args={"params": nest(restore_args)},
                    partial_restore=True,
                ),
            )
    except Exception as e:
        raise _bad(value, f"is a damaged checkpoint ({checkpoint._reason(e)})") from None
    return traverse_util.flatten_dict(restored["params"])


def apply(run, value, workdir=None) -> dict:
    """``run.init()`` with the encoder of checkpoint ``value`` grafted into its ``params``
    (every check runs before the initialisation compiles)."""
    state_dir, step = resolve(value)
    check_vocabulary(value, state_dir, run.config.get("data"))
    saved = _saved_params(value, state_dir)
    graft = plan(saved, run.abstract["params"], value)
    flat_abstract = traverse_util.flatten_dict(run.abstract["params"])
    flat = _restore(value, state_dir, saved, graft["load"], flat_abstract)
    nest = traverse_util.unflatten_dict
    state = run.init()
    params = traverse_util.flatten_dict(state["params"])
    for path, rows in graft["load"].items():
        x = flat[path]
        if rows is not None:  # keep the data's rows; lay them out like the model's table
            x = jax.jit(lambda a, r=rows: a[:r], out_shardings=flat_abstract[path].sharding)(x)
        params[path] = x
    _report(graft, value, step, workdir)
    return {**state, "params": nest(params)}


def _report(graft: dict, value, step: int, workdir) -> None:
    def names(paths_):
        return ["/".join(p) for p in paths_]

    loaded = [
        "/".join(p) + ("" if r is None else f" (first {r} rows)") for p, r in graft["load"].items()
    ]
    logging.info("init_from %s (step %d): loaded %d parameters: %s", value, step, len(loaded),
                 ", ".join(loaded))  # fmt: skip
    logging.info("init_from: new (initialised) %d: %s", len(graft["new"]),
                 ", ".join(names(graft["new"])) or "none")  # fmt: skip
    logging.info("init_from: unused %d: %s", len(graft["unused"]),
                 ", ".join(names(graft["unused"])) or "none")  # fmt: skip
    if workdir is not None and jax.process_index() == 0:
        record = {"init_from": str(value), "step": step, "loaded": loaded,
                  "new": names(graft["new"]), "unused": names(graft["unused"])}  # fmt: skip
        (paths.workdir_path(workdir) / "init_from.json").write_text(json.dumps(record, indent=1))
