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


def fill_data_needs(config) -> None:
    """What the job's model family asks of the data, written into ``config.data`` before
    the data are made: ``token_chars`` (``Family.token_chars``: the characters of each
    token, ``seqjax.data.token_chars``) when unset.

    Raises:
      ValueError: ``config.data.token_chars`` > 0 for a family that does not read them.
    """
    from seqjax.models import registry as model_registry
    from seqjax.tasks.registry import for_data_config

    task = for_data_config(config.data)
    if task is None or "model" not in config:
        return
    try:
        family = model_registry.for_config(config, task.family)
    except ValueError:
        return  # the config validation names the family
    have = config.data.get("token_chars") or 0
    if family.token_chars and not have:
        with config.data.unlocked():
            config.data.token_chars = int(family.token_chars)
    elif have and not family.token_chars:
        raise ValueError(
            f"config.data.token_chars={have!r}: model family {family.name!r} does not read "
            "the characters of the tokens; valid: 0 (or a family that does, e.g. 'elmo')"
        )
