"""Everything a job builds from its config: data info, model, optimizer, mesh, sharded state.

Shared by the training loop (``seqjax.train.loop``), ``seqjax.evaluate`` and
``seqjax.sample``, so all three rebuild exactly the same model from a workdir's config.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

import flax.linen as nn
import jax
import ml_collections
import optax

from seqjax import console, tasks
from seqjax import data as data_lib
from seqjax.data import pipeline
from seqjax.models import memory
from seqjax.models import registry as model_registry
from seqjax.models.transformer import TransformerConfig
from seqjax.tasks import model_build
from seqjax.train import (
    checkpoint,
    config_validation,
    extensions,
    field_checks,
    hf_start,
    optim,
    paths,
    sharding,
    state,
)


@dataclasses.dataclass(frozen=True)
class Run:
    """The built job.

    Attributes:
      config: the ConfigDict.
      info: the data's vocabulary, task name and encode/decode.
      task: the data's task (``seqjax.tasks``, configured from ``config``): batches, loss,
        metrics, evaluation summary, generation.
      model: the Flax module that trains (LM, classifier or a recurrent model).
      tx: the optimizer.
      schedule: its learning-rate schedule.
      mesh: the device mesh.
      abstract: the unboxed abstract state (ShapeDtypeStructs carrying their shardings).
      init: jitted ``() -> state`` (arrays created on their devices).
      recurrence: the model's memory declaration (``seqjax.models.memory``), None when the
        model has no memory.
      epoch_steps: a recurrent model's steps after which the training streams start over
        (the memory is reset then); None otherwise.
    """

    config: ml_collections.ConfigDict
    info: data_lib.DataInfo
    task: tasks.Task
    model: nn.Module
    tx: optax.GradientTransformation
    schedule: optax.Schedule
    mesh: jax.sharding.Mesh
    abstract: dict
    init: Callable[[], dict]
    recurrence: memory.Recurrence | None = None
    epoch_steps: int | None = None

    @property
    def model_cfg(self) -> TransformerConfig:
        return self.model.cfg

    @property
    def shardings(self) -> dict:
        """NamedShardings of the state (those the abstract state carries)."""
        return jax.tree.map(lambda x: x.sharding, self.abstract)

    @property
    def provenance(self) -> dict:
        """Which module registered each mechanism the model uses and the task, and the
        config's imports (``seqjax.train.extensions.provenance``; the run header prints it)."""
        return extensions.provenance(self.config, self.task, self.model)

    @property
    def is_xl(self) -> bool:
        """Whether the model carries a memory (Transformer-XL is the recurrent kind)."""
        return self.recurrence is not None


def build(config, *, validate: bool = True) -> Run:
    """Validates ``config`` (before anything compiles) and builds the job's pieces."""
    extensions.import_modules(config.get("imports") or ())  # extension mechanisms, tasks
    hf_start.fill(config)  # init_from=hf:<folder>: its family, shape and vocabulary
    try:  # the family's requests of the data (ELMo: each token's characters)
        model_build.fill_data_needs(config)
    except ValueError as e:
        raise config_validation.ConfigError(str(e)) from None
    if validate:
        config_validation.validate(config)
    mesh = sharding.make_mesh(config.mesh)
    with console.library_prints_to_log():  # TFDS banners: stdout is for results
        info = data_lib.info(config.data)
    check_vocabulary_bounds(config, info.vocab_size)
    task = tasks.for_run(config, info)
    model_cfg = task.model_config(config, info)
    rec = memory.recurrence(config)
    model = task.build_model(config, model_cfg)
    frozen = model_registry.for_model_config(model_cfg).frozen  # feature-based transfer
    tx, schedule = optim.make_optimizer(
        config.optimizer, config.train.num_steps, also_freeze=frozen(model_cfg) if frozen else ()
    )
    input_shapes = task.init_shapes(config, info)
    memory_batch = int(config.data.batch_size) if rec else 0
    abstract, _, init = state.create_state(
        model, tx, input_shapes, config.seed, mesh, memory_batch=memory_batch
    )
    epoch_steps = _stream_epoch_steps(config, info) if rec else None
    run = Run(config, info, task, model, tx, schedule, mesh, abstract, init, rec, epoch_steps)
    if validate and (problem := field_checks.sample_prompt_problem(run)):  # before step 0
        raise config_validation.ConfigError(problem)
    return run


def check_vocabulary_bounds(config, vocab_size: int) -> None:
    """``model.adaptive.cutoffs`` against the data's vocabulary, once it is known (Grave et
    al. 2017, §3: clusters ``[0, c_1), ..., [c_k, V)``, each non-empty).

    Raises:
      config_validation.ConfigError: one sentence naming the field, the vocabulary and
        the valid range (exit 2), before any model is built.
    """
    a = config.model.get("adaptive")
    if a is None or not a.get("enabled", False) or not a.get("cutoffs"):
        return
    cutoffs = [int(c) for c in a.cutoffs]
    if cutoffs[-1] >= vocab_size:
        raise config_validation.ConfigError(
            f"config.model.adaptive.cutoffs={cutoffs} must lie in 1..{vocab_size - 1}: the "
            f"vocabulary of data {config.data.name!r} has {vocab_size} ids; give increasing "
            f"cutoffs below {vocab_size} (e.g. --config.model.adaptive.cutoffs="
            f"'({vocab_size // 10}, {vocab_size // 2})')"
        )


def _stream_epoch_steps(config, info) -> int:
    """Steps of one pass of the training streams (``seqjax.data`` 'stream' batching: B
    streams of ``(n - 1) // B`` tokens, ``L // T`` steps, then every stream starts over)."""
    n = int(info.split_sizes["train"])
    length = pipeline.LMStreams.stream_len(n, int(config.data.batch_size), True)
    return max(length // int(config.data.seq_len), 1)


def load_config(workdir: str) -> ml_collections.ConfigDict:
    """The ``config.json`` a training job wrote into ``workdir``."""
    path = paths.workdir_path(workdir) / "config.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: is {workdir!r} a seqjax workdir?")
    return ml_collections.ConfigDict(json.loads(path.read_text()))


def restore_latest(
    workdir: str, *, single_device: bool = True, eval_overrides=None, step: int | None = None
):
    """Rebuilds a workdir's job and restores its newest complete checkpoint.

    Args:
      workdir: a training job's workdir.
      single_device: ignore the saved mesh and restore onto a 1-device mesh (evaluation,
        sampling on a laptop).
      eval_overrides: ``config.eval`` fields to replace (Transformer-XL evaluation lengths);
        None values keep the saved ones.
      step: restore this checkpoint step instead of the newest.

    Returns:
      ``(run, state, step)``.
    """
    config = load_config(workdir)
    if single_device:
        config.mesh = ml_collections.ConfigDict({"data": 1, "fsdp": 1, "tensor": 1})
    overrides = {k: v for k, v in (eval_overrides or {}).items() if v is not None}
    if overrides:
        if config.get("eval") is None:  # a config written before the eval block existed
            config.eval = ml_collections.ConfigDict()
        for key, value in overrides.items():
            config.eval[key] = value
    run = build(config, validate=False)
    ckpt = checkpoint.Checkpointer(workdir, max_to_keep=config.train.max_to_keep, async_save=False)
    step = ckpt.latest_step() if step is None else step
    if step is None:
        raise FileNotFoundError(f"no complete checkpoint under {ckpt.directory}")
    st, _ = ckpt.restore(step, run.abstract)
    ckpt.close()
    return run, st, step
