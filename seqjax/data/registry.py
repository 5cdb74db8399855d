"""The data-set registry: every ``config.data.name`` is a ``DataSet`` its own module registers.

A data set (or a family of them) is one module that declares, in one ``register`` call each,
what the rest of seqjax needs to know: its kind and task, its vocabularies, its config checks,
its TFDS builder, its ``DataInfo`` and its batch maker. ``seqjax.data.api`` (``info``/``make``),
the config validator and the tasks ask this registry and never test a data set's name; adding a
data set is one new file and one line in ``BUILTIN`` (or ``config.imports`` for a module of
your own: ``docs/extending.md``, "A new data set").

Pre-training objectives over a data set (``config.data.objective``: MLM, span corruption, the
LM of example texts) register the same way as an ``Objective``.

This module imports nothing of ``seqjax.data`` (the data-set modules import it).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

# What the batches of a data set are (objectives, packing and the validator ask this):
KINDS = {
    "corpus": "a text corpus read as a stream of tokens (LM windows or streams)",
    "texts": "labelled example texts, one per row (classification)",
    "images": "images as pixel sequences",
    "pairs": "two documents per example (retrieval)",
    "translation": "sentence pairs (seq2seq)",
    "generated": "sequences generated from the config (no files)",
}
VOCABS = ("bytes", "chars", "sentencepiece", "words", "hf")  # "hf": the value is "hf:<folder>"

# The data sets that ship with seqjax, imported on first use (each module registers itself).
BUILTIN = (
    "seqjax.data.lm_data",
    "seqjax.data.classification",
    "seqjax.data.images",
    "seqjax.data.imagenet64",
    "seqjax.data.pathfinder_data",
    "seqjax.data.retrieval",
    "seqjax.data.seq2seq",
    "seqjax.data.plm",
    "seqjax.data.bilm",
    "seqjax.data.bart_noise",
    "seqjax.data.sop",
)
BUILTIN += ("seqjax.data.distill_data", "seqjax.data.finetune_data", "seqjax.data.gpt1_data")


@dataclasses.dataclass(frozen=True)
class DataSet:
    """One ``config.data.name``.

    Attributes:
      name: the ``config.data.name`` value.
      kind: one of ``KINDS``.
      task: the ``seqjax.tasks`` name of its batches, or ``cfg -> name`` (e.g. images:
        classification or generation by ``config.data.image_task``).
      info: ``cfg -> dict`` of ``seqjax.data.api.DataInfo`` fields (prepares the data).
      make: ``(cfg, split, train, layout) -> (maker, num_steps, spec)``: a batch maker of
        ``seqjax.data.pipeline`` for ``layout = (global batch, process index, process count)``,
        its steps per pass (None: endless) and what identifies its batches (saved with the
        data state; a restore with other values is refused).
      vocabs: the valid ``config.data.vocab`` values.
      vocab_note: why (shown with a refused vocab), e.g. "a subword vocabulary".
      validate: ``(cfg, bad)``: calls ``bad(field, value, valid)`` per invalid field of its own.
      builder: its ``tfds.core.DatasetBuilder`` class (None: nothing to prepare).
      builder_config: ``cfg -> tfds.core.BuilderConfig | None`` (the prepared variant).
      default_max_len: the input length when ``config.data.max_len`` is None (classification).
      streams: its token streams serve ``lm_batching='stream'`` (recurrent models).
      subword_options: ``vocab='sentencepiece'`` trains a model on it (checks the spm fields).
      packable: its examples can be packed into rows (``config.data.packing``) besides the
        kinds ``seqjax.data.packing`` packs anyway (example texts, translation pairs).
      references: ``(cfg, split, side) -> list[str]`` raw strings of the rows (BLEU), or None.
      fields: extra ``config.data`` fields with their defaults (``default_config`` adds them).
    """

    name: str
    kind: str
    task: str | Callable[[Any], str]
    info: Callable[[Any], dict]
    make: Callable[..., tuple]
    vocabs: tuple[str, ...] = ("bytes",)
    vocab_note: str = ""
    validate: Callable[[Any, Callable], None] | None = None
    builder: type | None = None
    builder_config: Callable[[Any], Any] | None = None
    default_max_len: int | None = None
    streams: bool = False
    subword_options: bool = False
    packable: bool = False
    references: Callable[..., list] | None = None
    fields: dict = dataclasses.field(default_factory=dict)

    def task_of(self, cfg) -> str:
        return self.task(cfg) if callable(self.task) else self.task

    @property
    def tfds_name(self) -> str:
        return f"seqjax_{self.name}"


@dataclasses.dataclass(frozen=True)
class Objective:
    """A pre-training objective over a registered data set (``config.data.objective``).

    Attributes:
      name: the ``config.data.objective`` value.
      task: the task of its batches.
      info: ``(cfg, base_info) -> DataInfo`` given ``seqjax.data.api.info``.
      make: ``(cfg, split, process_index, process_count, train, base_make, base_info)`` ->
        a ``DataIterator``, given ``api.make`` and ``api.info`` (for the base data set).
    """

    name: str
    task: str
    info: Callable[..., Any]
    make: Callable[..., Any]


_DATASETS: dict[str, DataSet] = {}
_OBJECTIVES: dict[str, Objective] = {}
_loaded = False


def _load_builtin() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for module in (*BUILTIN, "seqjax.data.objectives"):
            importlib.import_module(module)


def register(dataset: DataSet) -> DataSet:
    """Adds a data set under ``dataset.name`` (its module calls this at import)."""
    if not isinstance(dataset, DataSet):
        raise TypeError(f"register() takes a seqjax.data.registry.DataSet; got {type(dataset)!r}")
    if dataset.kind not in KINDS:
        raise ValueError(f"DataSet {dataset.name!r}: kind={dataset.kind!r}; valid: {list(KINDS)}")
    bad = [v for v in dataset.vocabs if v not in VOCABS]
    if bad:
        raise ValueError(f"DataSet {dataset.name!r}: vocabs {bad}; valid: {list(VOCABS)}")
    if dataset.name in _DATASETS and _DATASETS[dataset.name] is not dataset:
        raise ValueError(f"data set {dataset.name!r} is already registered")
    _DATASETS[dataset.name] = dataset
    return dataset


def unregister(name: str) -> None:
    """Removes a data set (tests that register a toy data set clean up with this)."""
    _DATASETS.pop(name, None)


def register_objective(objective: Objective) -> Objective:
    _OBJECTIVES[objective.name] = objective
    return objective


def names(kind: str | None = None) -> tuple[str, ...]:
    """The registered data sets (of one ``kind``), in registration order."""
    _load_builtin()
    return tuple(n for n, d in _DATASETS.items() if kind is None or d.kind == kind)


def find(name) -> DataSet | None:
    """The data set registered under ``name``, None if there is none."""
    _load_builtin()
    return _DATASETS.get(name) if isinstance(name, str) else None


def get(name) -> DataSet:
    """The data set registered under ``name``.

    Raises:
      ValueError: an unknown name, listing the valid ones.
    """
    found = find(name)
    if found is None:
        raise ValueError(
            f"config.data.name={name!r} is not a registered data set; valid: {', '.join(names())}"
        )
    return found


def objective(name: str) -> Objective | None:
    _load_builtin()
    return _OBJECTIVES.get(name)


def objective_names() -> tuple[str, ...]:
    _load_builtin()
    return tuple(_OBJECTIVES)


def task_of(cfg) -> str | None:
    """The task name of ``config.data`` before anything is prepared (None: unknown name)."""
    obj = cfg.get("objective")
    if obj:
        found = objective(obj)
        return found.task if found else None
    ds = find(cfg.get("name"))
    return ds.task_of(cfg) if ds else None


def extra_fields() -> dict:
    """The ``config.data`` fields registered data sets add (``DataSet.fields``)."""
    out = {}
    for d in _DATASETS.values():
        out.update(d.fields)
    return out
