"""The model a job config describes, as its data's task builds it.

``seqjax.models.from_config.transformer_config`` turns ``config.model`` and the data's
``DataInfo`` into a ``TransformerConfig``; the task (``seqjax.tasks``, named by
``DataInfo.task``) sets what is its own (causal or not, the classes) and picks the module
(the LM, the classifier; the LM task builds a recurrent model, ``seqjax.models.memory``,
when ``config.model.kind`` says so). These three ask the registered task.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from seqjax.tasks.registry import get

if TYPE_CHECKING:
    import flax.linen as nn

    from seqjax.models.transformer import TransformerConfig


def model_config(config, info) -> TransformerConfig:
    """``TransformerConfig`` from ``config.model`` and the data's ``DataInfo`` (its task's
    ``model_config``)."""
    return get(info.task).model_config(config, info)


def make_model(cfg: TransformerConfig, task, *, decode: bool = False) -> nn.Module:
    """The module of ``task`` (a name or a ``seqjax.tasks.Task``) for ``cfg``: e.g.
    ``TransformerLM`` for 'lm', ``TransformerClassifier`` for 'classification'."""
    return get(task).make_model(cfg, decode=decode)


def build_model(config, cfg: TransformerConfig, task) -> nn.Module:
    """The module that trains, as ``task`` builds it (the LM task: a recurrent kind's model,
    ``seqjax.models.memory``, else ``TransformerLM``)."""
    return get(task).build_model(config, cfg)
