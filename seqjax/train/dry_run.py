"""Memory before launch: the train step compiled for a compile-only accelerator (issue 49).

``python -m seqjax.main --config ... --dry_run=h100`` builds the job's train step (forward,
backward, optimizer; sharded over the target's devices as training shards it), compiles it
for the target with XLA's own compiler (``seqjax.compile_targets``; no device, no data read
beyond the data set's description) and prints the step's peak device memory per device,
split into parameters, optimizer state, batch and the rest (activations and workspace:
XLA's temporary buffers), from ``compiled.memory_analysis()``. A step that needs more than
the device's memory is refused with one sentence before a device is rented.

Legend: a program's device memory = its arguments + outputs - the buffers they share
(the state is donated) + its temporaries.
"""

from __future__ import annotations

import dataclasses
import math

import jax

from seqjax import compile_targets
from seqjax.train import config_validation

GB = 1e9


@dataclasses.dataclass(frozen=True)
class Report:
    """Bytes per device of one train step compiled for ``target``."""

    target: str
    device_kind: str
    num_devices: int
    params: int
    optimizer: int
    batch: int
    activations: int  # XLA's temporaries: activations kept for backward, workspace
    peak: int
    device_memory: int | None

    @property
    def fits(self) -> bool:
        return self.device_memory is None or self.peak <= self.device_memory

    def lines(self) -> list[str]:
        def gb(x):
            return f"{x / GB:.2f} GB" if x >= 0.1 * GB else f"{x / 1e6:.1f} MB"

        memory = "unknown" if self.device_memory is None else gb(self.device_memory)
        return [
            f"dry run: train step compiled for {self.num_devices} x {self.device_kind} "
            f"({self.target}), per device:",
            f"  parameters       {gb(self.params)}",
            f"  optimizer state  {gb(self.optimizer)}",
            f"  batch            {gb(self.batch)}",
            f"  activations etc. {gb(self.activations)}",
            f"  peak             {gb(self.peak)} of {memory}",
        ]


def train_step_and_args(config, info, *, accum_steps: int | None = None):
    """The jitted train step of ``config`` (sharded as training shards it) and abstract
    ``(state, batch)`` arguments, built as ``seqjax.train.setup.build`` builds them, with
    the data set described by ``info`` (nothing is read). ``accum_steps`` defaults to
    ``optimizer.grad_accum_steps``."""
    from seqjax import tasks
    from seqjax.models import memory
    from seqjax.train import optim, sharding, state
    from seqjax.train import step as step_lib

    mesh = sharding.make_mesh(config.mesh)
    task = tasks.for_run(config, info)
    model_cfg = task.model_config(config, info)
    rec = memory.recurrence(config)
    model = task.build_model(config, model_cfg)
    tx, schedule = optim.make_optimizer(config.optimizer, config.train.num_steps)
    input_shapes = task.init_shapes(config, info)
    b = int(config.data.batch_size)
    abstract, shardings, _ = state.create_state(
        model, tx, input_shapes, config.seed, mesh, memory_batch=b if rec else 0
    )
    fn = step_lib.make_train_step(
        model, task, tx, schedule, mesh=mesh, epoch_steps=4 if rec else None,
        accum_steps=config.optimizer.grad_accum_steps if accum_steps is None else accum_steps,
    )  # fmt: skip
    jitted = step_lib.jit_train_step(fn, shardings, mesh)
    t = input_shapes[0][1] if isinstance(input_shapes[0], tuple | list) else input_shapes[1]
    batch_sh = sharding.batch_sharding(mesh)
    shapes = {1: (b,), 2: (b, t)}
    batch = {
        field: jax.ShapeDtypeStruct(shapes[rank], jax.numpy.dtype(dtype), sharding=batch_sh)
        for field, (dtype, rank) in task.batch_fields.items()
    }
    return jitted, (abstract, batch), mesh


def shard_bytes(tree) -> int:
    """Bytes one device holds of a tree of sharded ``ShapeDtypeStruct``s."""
    total = 0
    for x in jax.tree.leaves(tree):
        shape = x.sharding.shard_shape(x.shape) if x.sharding is not None else x.shape
        total += math.prod(shape) * x.dtype.itemsize
    return total


def compile_train_step(config, target_devices, info):
    """``(compiled, (state, batch))``: the train step compiled for ``target_devices``."""
    from seqjax.train import sharding

    with compile_targets.compiling_for(target_devices):
        jitted, args, mesh = train_step_and_args(config, info)
        with sharding.rules_and_mesh(mesh):
            lowered = jitted.trace(*args).lower()
    return lowered.compile(), args


def report(config, target: str, info=None) -> Report:
    """The step's memory on ``target`` (``compile_targets.TARGETS``); ``info`` defaults to
    the data set's description (``seqjax.data.info``).

    Raises:
      config_validation.ConfigError: an unknown target or a compiler that is not installed.
    """
    why = compile_targets.problem(target)
    if why is not None:
        raise config_validation.ConfigError(f"--dry_run={target}: {why}")
    target_devices = compile_targets.devices(target)
    if info is None:
        from seqjax import data as data_lib

        info = data_lib.info(config.data)
    compiled, (state, batch) = compile_train_step(config, target_devices, info)
    mem = compiled.memory_analysis()
    peak = (
        mem.argument_size_in_bytes
        + mem.output_size_in_bytes
        - mem.alias_size_in_bytes
        + mem.temp_size_in_bytes
        + mem.generated_code_size_in_bytes
    )
    params = shard_bytes(state["params"])
    optimizer = shard_bytes(state["opt_state"])
    return Report(
        target=target,
        device_kind=str(target_devices[0].device_kind),
        num_devices=len(target_devices),
        params=params,
        optimizer=optimizer,
        batch=shard_bytes(batch),
        activations=mem.temp_size_in_bytes,
        peak=peak,
        device_memory=compile_targets.device_memory(target_devices[0]),
    )


def check(config, target: str, info=None) -> Report:
    """The config validated for the target's devices, then ``report``, refused when the
    step does not fit the device.

    Raises:
      config_validation.ConfigError: one sentence with the peak, the device's memory and
        the split, when the step needs more than the device has.
    """
    if compile_targets.problem(target) is None:
        n = len(compile_targets.devices(target))
        config_validation.validate(config, num_devices=n, process_count=1)
    r = report(config, target, info)
    if not r.fits:
        raise config_validation.ConfigError(
            f"the train step needs {r.peak / GB:.1f} GB per device on {r.num_devices} x "
            f"{r.device_kind}, above its {r.device_memory / GB:.1f} GB (parameters "
            f"{r.params / GB:.1f}, optimizer {r.optimizer / GB:.1f}, activations etc. "
            f"{r.activations / GB:.1f} GB): lower data.batch_size (optimizer.grad_accum_steps "
            "keeps the tokens per update), set model.remat, or shard over more devices "
            "(config.mesh)"
        )
    return r
