"""The one task interface: a registry of named tasks (``DataInfo.task`` picks one).

A task is everything the training system does differently for one kind of data: its batch
fields, the model it builds, how that model is applied to a batch, the loss and metric
sums, the evaluation summary, throughput units, the FLOPs estimate and, where it has one,
generation. The loop, the train and eval steps, the evaluator, setup and the command lines
call the task through ``seqjax.tasks.base.Task``'s methods and never test its name; a new
task is one file with a ``Task`` subclass and one ``register`` call (``docs/extending.md``).
"""

from __future__ import annotations

import importlib

from seqjax.data import registry as data_registry
from seqjax.tasks.base import Task

_REGISTRY: dict[str, Task] = {}
# The tasks that ship with seqjax, imported on first use (each module registers itself).
BUILTIN = ("seqjax.tasks.lm", "seqjax.tasks.classification", "seqjax.tasks.seq2seq")
BUILTIN += ("seqjax.tasks.mlm",)
BUILTIN += ("seqjax.tasks.image_generation",)
BUILTIN += ("seqjax.tasks.pair_classification",)
BUILTIN += ("seqjax.tasks.plm",)
BUILTIN += ("seqjax.tasks.bilm",)
BUILTIN += ("seqjax.tasks.distill",)
BUILTIN += ("seqjax.tasks.token_tasks",)
BUILTIN += ("seqjax.tasks.gpt1_finetune",)
BUILTIN += ("seqjax.tasks.mlm_pair",)


def _load_builtin() -> None:
    for module in BUILTIN:
        importlib.import_module(module)


def register(task: Task) -> Task:
    """Adds a task (an instance of a ``Task`` subclass) under ``task.name``."""
    if not isinstance(task, Task):
        raise TypeError(f"register() takes a seqjax.tasks.Task instance; got {type(task)!r}")
    if not task.name:
        raise ValueError(f"{type(task).__name__} has no name; set its `name` field")
    if task.name in _REGISTRY:
        raise ValueError(f"task {task.name!r} is already registered")
    _REGISTRY[task.name] = task
    return task


def unregister(name: str) -> None:
    """Removes a task (tests that register a toy task clean up with this)."""
    _REGISTRY.pop(name, None)


def names() -> list[str]:
    """Sorted names of every registered task."""
    _load_builtin()
    return sorted(_REGISTRY)


def get(name) -> Task:
    """The task registered under ``name`` (a ``Task`` passes through unchanged).

    Raises:
      ValueError: an unknown name, listing the valid ones.
    """
    if isinstance(name, Task):
        return name
    _load_builtin()
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(
            f"unknown task {name!r} (DataInfo.task of the data set); valid tasks: "
            f"{', '.join(names())}"
        )
    return _REGISTRY[name]


def for_data_config(data_config) -> Task | None:
    """The task of ``config.data`` before the data set is prepared (config validation): the
    one its registered data set (or objective) names (``seqjax.data.registry``), else a task
    whose ``datasets`` lists ``config.data.name``; None when none does (the data's own checks
    report an unknown name)."""
    _load_builtin()
    task_name = data_registry.task_of(data_config)
    if task_name in _REGISTRY:
        return _REGISTRY[task_name]
    name = data_config.get("name")
    for task in _REGISTRY.values():
        if name in task.datasets and task.handles(data_config):
            return task
    return None


def for_run(config, info) -> Task:
    """The task of a built job: ``get(info.task)`` configured from ``config``."""
    return get(info.task).configure(config)
