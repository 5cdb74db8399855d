"""Model families as plug-ins: ``config.model.family`` picks one by name.

A family is one kind of network (the pre-LN Transformer of seqjax, the encoder-decoder of
Vaswani et al. 2017, an RNN, ALBERT, ...) declared once, in its own module, with a
``Family`` passed to ``register``. It states:

* its **config dataclass** (``config_class``): the static hyper-parameters of its modules,
  each default stated once, in the dataclass; the ``config.model`` block of a job lists the
  same fields (``model_block``) minus those the data set fills in (``from_data``);
* how a job config and the data's ``DataInfo`` become that dataclass (``build_config``),
  given what the task needs (``Needs``: causal or not, the classes);
* its **Flax modules, one per task it serves** (``modules``: task name -> builder), so the
  tasks it serves are exactly the keys;
* its own config checks (``validate``), composed by ``seqjax.train.config_validation``;
* the Hugging Face ``architectures`` whose checkpoints import into it (``seqjax.convert``
  registers the conversion rules; this list is for the run header and the docs).

Tasks (``seqjax.tasks``) ask the family of the job for the config and the module and never
test a family's name; the validator and the run header ask the registry too.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from typing import Any

# The family a task uses when ``config.model.family`` is "auto" (or absent, older configs).
AUTO = "auto"


@dataclasses.dataclass(frozen=True)
class Needs:
    """What a task asks of the model it trains.

    Attributes:
      task: the task's registry name (the key of ``Family.modules``).
      causal: whether its attention must be causal (LM) or may look both ways.
      num_classes: classifier outputs (0: none; the LM's output layer is the vocabulary).
      masked_lm: the outputs are a masked LM's (BERT's head transform where the family has
        one and ``config.model.mlm_head_transform`` asks for it).
    """

    task: str
    causal: bool = True
    num_classes: int = 0
    masked_lm: bool = False


@dataclasses.dataclass(frozen=True)
class Family:
    """A model family's declaration (see the module docstring).

    Attributes:
      name: the ``config.model.family`` value.
      doc: one line for ``names()`` listings and errors.
      config_class: the frozen dataclass of its modules' hyper-parameters.
      build_config: ``(config, info, needs) -> config_class`` instance.
      modules: ``{task name: (model_cfg, *, task, decode) -> flax module}``; ``task`` is the
        configured ``seqjax.tasks.Task`` (options such as a pair interaction).
      validate: ``(config, bad)`` calling ``bad(field, value, valid)`` for each wrong field
        of its own; None: no checks beyond the dataclass's.
      from_data: config-class fields the data set fills in (vocabulary, padding id, ...),
        left out of ``model_block``.
      common_checks: whether ``config.model`` has the shared Transformer fields (layers,
        heads, width, attention, positions) that seqjax's common model stage checks.
      hf_architectures: Hugging Face ``architectures`` names that import into it.
      train_module: ``(config, model_cfg, *, task) -> module`` of the module that trains when
        it differs from the evaluated one (None: ``modules[task]``).
      block_of: ``model_cfg -> {config.model field: value}``, the inverse of
        ``build_config`` for the fields a checkpoint fixes (``config.init_from=hf:<folder>``
        fills the job config with them); None: the family cannot start from one.
      token_chars: characters per token its modules read (0: none; ELMo: 50): the job sets
        ``config.data.token_chars`` to it when unset, so every batch carries ``token_chars``
        ``[B, T, L]`` (``seqjax.data.token_chars``) and the task passes it to the model as
        ``token_chars_BTL``.
      frozen: ``model_cfg -> top-level parameter subtrees`` the optimizer leaves unchanged
        (feature-based transfer: added to ``optimizer.freeze`` by ``train.setup``); None:
        all train.
    """

    name: str
    doc: str
    config_class: type
    build_config: Callable[[Any, Any, Needs], Any]
    modules: Mapping[str, Callable[..., Any]]
    validate: Callable[[Any, Callable], None] | None = None
    from_data: tuple[str, ...] = ("vocab_size",)
    common_checks: bool = True
    hf_architectures: tuple[str, ...] = ()
    train_module: Callable[..., Any] | None = None
    block_of: Callable[[Any], dict] | None = None
    token_chars: int = 0
    frozen: Callable[[Any], tuple[str, ...]] | None = None

    @property
    def tasks(self) -> tuple[str, ...]:
        """The tasks this family serves (the keys of ``modules``)."""
        return tuple(self.modules)

    def module_key(self, task) -> str | None:
        """The key of ``modules`` that serves ``task`` (a name or a ``Task``): its name, else
        the name of the nearest task class it derives from (a subclass of the LM task is
        served by the LM's module); None when the family does not serve it."""
        if isinstance(task, str):
            return task if task in self.modules else None
        for cls in type(task).__mro__:
            name = task.name if cls is type(task) else getattr(cls, "name", None)
            if name in self.modules:
                return name
        return None

    def serves(self, task) -> bool:
        """Whether this family has a module for ``task`` (``module_key``)."""
        return self.module_key(task) is not None

    def module(self, model_cfg, *, task, decode: bool = False):
        """The Flax module of ``model_cfg`` for ``task`` (a configured ``Task``)."""
        key = self.module_key(task)
        if key is None:
            raise ValueError(
                f"model family {self.name!r} has no module for the task "
                f"{getattr(task, 'name', task)!r}; it serves: {', '.join(self.tasks)}"
            )
        return self.modules[key](model_cfg, task=task, decode=decode)


_FAMILIES: dict[str, Family] = {}
# The families that ship with seqjax, imported on first use (each module registers itself;
# a new family adds its module here, or is ``--import``ed by the job config).
BUILTIN = ("seqjax.models.families", "seqjax.models.rnn_families", "seqjax.models.albert")
BUILTIN += ("seqjax.models.xlnet_family",)
BUILTIN += ("seqjax.models.elmo_family",)


def _load_builtin() -> None:
    for module in BUILTIN:
        importlib.import_module(module)


def register(family: Family) -> Family:
    """Adds ``family`` under ``family.name``; returns it.

    Raises:
      ValueError: the name is taken or is the reserved "auto".
      TypeError: ``config_class`` is not a dataclass.
    """
    if not isinstance(family, Family):
        raise TypeError(f"register() takes a seqjax.models.registry.Family; got {type(family)!r}")
    if family.name == AUTO or family.name in _FAMILIES:
        raise ValueError(f"model family {family.name!r} is already registered (or reserved)")
    if not dataclasses.is_dataclass(family.config_class):
        raise TypeError(f"Family {family.name!r}: config_class must be a dataclass")
    _FAMILIES[family.name] = family
    return family


def unregister(name: str) -> None:
    """Removes a family (tests that register a toy family clean up with this)."""
    _FAMILIES.pop(name, None)


def names() -> list[str]:
    """Sorted names of every registered family."""
    _load_builtin()
    return sorted(_FAMILIES)


def get(name: str) -> Family:
    """The family registered under ``name``.

    Raises:
      ValueError: an unknown name, listing the registered ones.
    """
    _load_builtin()
    if not isinstance(name, str) or name not in _FAMILIES:
        raise ValueError(
            f"config.model.family={name!r} is not a registered model family; valid: "
            f"{', '.join([AUTO, *names()])}"
        )
    return _FAMILIES[name]


def name_of(config, default: str) -> str:
    """``config.model.family``, with "auto" (or a config older than the field) resolved to
    ``default``, the task's own family."""
    name = config.model.get("family", AUTO) if "model" in config else AUTO
    return default if name in (AUTO, None, "") else name


def for_config(config, default: str) -> Family:
    """The family of a job config (``default``: the task's family for "auto")."""
    return get(name_of(config, default))


def for_model_config(model_cfg) -> Family:
    """The family whose ``config_class`` ``model_cfg`` is an instance of (the first
    registered when several share one).

    Raises:
      ValueError: no family declares that class.
    """
    _load_builtin()
    for family in _FAMILIES.values():
        if type(model_cfg) is family.config_class:
            return family
    raise ValueError(
        f"{type(model_cfg).__name__} is the config of no registered model family; registered: "
        f"{', '.join(f'{f.name} ({f.config_class.__name__})' for f in _FAMILIES.values())}"
    )


def model_block(name: str, **overrides):
    """The ``config.model`` block of family ``name``: ``family`` and every field of its
    config dataclass with the dataclass's default (those filled in by the data left out),
    then ``overrides``. Config files of a new family start from this."""
    import ml_collections

    family = get(name)
    block = {"family": name}
    for f in dataclasses.fields(family.config_class):
        if f.name in family.from_data:
            continue
        if f.default is not dataclasses.MISSING:
            block[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            block[f.name] = f.default_factory()
    unknown = sorted(set(overrides) - set(block))
    if unknown:
        raise ValueError(
            f"model family {name!r} has no field {unknown[0]!r}; its fields: "
            f"{', '.join(sorted(block))}"
        )
    block.update(overrides)
    return ml_collections.ConfigDict(block)


def dataclass_from_block(cls, block, **from_data):
    """An instance of dataclass ``cls`` from a ``config.model`` block: every field the block
    has (ConfigDicts and lists turned into tuples/dicts), then ``from_data``. Fields of the
    block that ``cls`` does not have are ignored (``family``, the shared fields)."""
    names_ = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key in names_ & set(block.keys()):
        value = block[key]
        if hasattr(value, "to_dict"):
            value = value.to_dict()
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[key] = value
    kwargs.update(from_data)
    return cls(**kwargs)
