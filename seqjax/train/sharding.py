"""The trainer's device mesh and sharded state: processes, the mesh from ``config.mesh``,
the shardings of a training state and the start-of-run sharding report.

One table (``RULES``, ``seqjax.models.sharding_rules``) maps the logical axis names the
models put on parameters and activations (``seqjax.models.layers``: vocab, embed, heads, kv,
mlp, length, batch) to the mesh axes ``data`` (pure data parallelism), ``fsdp`` (data
parallelism whose parameters and optimizer state are sharded too), ``sequence`` (context
parallelism: activations split along the sequence; embeddings, norms and MLPs are
token-local, and attention runs as ring or all-to-all attention, ``seqjax.attention.ring``)
and ``tensor`` (Megatron-style tensor parallelism over heads / the feed-forward width / the
vocabulary). The rules, the batch layout (``global_batch``) and ``rules_and_mesh`` are
imported from there and used here under the same names.

Legend: B global batch, b per-process batch, T sequence length.
"""

from __future__ import annotations

import logging
import math
import os

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec

# The rules, the mesh axes and the batch layout are the models' (``seqjax.models.
# sharding_rules``); the trainer builds its mesh and state shardings on them. The loop, the
# evaluator, the steps and the state call batch_sharding / global_batch / rules_and_mesh here.
from seqjax.models.sharding_rules import (  # noqa: F401 (used through this module, see above)
    MESH_AXES,
    RULES,
    batch_sharding,
    data_parallel_size,
    global_batch,
    rules_and_mesh,
)


def maybe_initialize_distributed() -> None:
    """``jax.distributed.initialize()`` when the environment says this is one of several
    processes.

    * ``JAX_COORDINATOR_ADDRESS`` + ``JAX_NUM_PROCESSES`` + ``JAX_PROCESS_ID`` (set by
      ``launch/local.py`` and usable by any launcher);
    * otherwise JAX's own cluster detection: a SLURM or Open MPI job of several tasks, a
      multi-host Cloud TPU slice.
    """
    env = os.environ
    if jax.distributed.is_initialized():
        return
    if "JAX_COORDINATOR_ADDRESS" in env and "JAX_NUM_PROCESSES" in env:
        jax.distributed.initialize(
            coordinator_address=env["JAX_COORDINATOR_ADDRESS"],
            num_processes=int(env["JAX_NUM_PROCESSES"]),
            process_id=int(env.get("JAX_PROCESS_ID", "0")),
        )
        return
    several = (
        "JAX_COORDINATOR_ADDRESS" in env
        or int(env.get("SLURM_NTASKS", "1")) > 1
        or int(env.get("OMPI_COMM_WORLD_SIZE", "1")) > 1
        or "," in env.get("TPU_WORKER_HOSTNAMES", "")
    )
    if several:
        jax.distributed.initialize()


def one_program_in_flight() -> bool:
    """Whether the loops wait for each step before dispatching the next (``settle``): with
    several processes on CPU devices (gloo collectives, ``launch/local.py``).

    The final evaluation of a two-process run (2 x 2 CPU devices) hung in 2 of 3 runs
    (issue 50, item 8); the evaluation loop dispatches its whole split ahead, fetching
    nothing until the end. Native stacks (gdb) of a hung run: on process 1 both devices'
    ranks sat in gloo's all-reduce; on process 0 only one did, while the XLA CPU client's
    dispatch threads waited, one in ``Execute`` for the inputs of an earlier execution
    (``BlockUntilReady``) and one on the in-flight limit, so the other device's program
    never reached its all-reduce. With one step in flight, no dispatch waits on an earlier
    one: 5 of 5 runs of the same command then finished (and the slow test repeats it).
    Accelerators queue programs on their own streams and keep the pipelining.
    """
    return jax.process_count() > 1 and jax.default_backend() == "cpu"


def settle(x):
    """``jax.block_until_ready(x)`` when ``one_program_in_flight()``; else ``x`` as it is."""
    if one_program_in_flight():
        jax.block_until_ready(x)
    return x


def resolve_mesh_shape(mesh_cfg, num_devices: int) -> tuple[int, int, int, int]:
    """Sizes of ``MESH_AXES`` (data, fsdp, sequence, tensor; a missing field is 1) with
    ``-1`` (at most one) = the rest of the devices.

    Raises:
      ValueError: naming ``config.mesh.<axis>`` when a size is invalid or the mesh needs more
        devices than there are.
    """
    sizes = {}
    for axis in MESH_AXES:
        size = mesh_cfg.get(axis, 1)
        if not isinstance(size, int) or (size < 1 and size != -1):
            raise ValueError(
                f"config.mesh.{axis}={size!r} is invalid; valid: a positive int or -1 "
                "(the remaining devices)"
            )
        sizes[axis] = size
    rest = [a for a, s in sizes.items() if s == -1]
    if len(rest) > 1:
        raise ValueError(f"config.mesh: at most one axis may be -1; got -1 for {rest}")
    fixed = math.prod(s for s in sizes.values() if s != -1)
    if rest:
        if num_devices % fixed:
            raise ValueError(
                f"config.mesh: the fixed axes ({fixed} devices) do not divide the "
                f"{num_devices} devices, so config.mesh.{rest[0]}=-1 cannot take the rest"
            )
        sizes[rest[0]] = num_devices // fixed
    total = math.prod(sizes.values())
    if total > num_devices:
        raise ValueError(
            f"config.mesh {' x '.join(f'{a}={sizes[a]}' for a in MESH_AXES)} = {total} "
            f"devices, but only {num_devices} are available "
            f"({jax.default_backend()}); valid: a product <= {num_devices}"
        )
    return tuple(sizes[a] for a in MESH_AXES)


def make_mesh(mesh_cfg) -> jax.sharding.Mesh:
    """The ``MESH_AXES`` mesh over the first ``prod(sizes)`` devices."""
    devices = jax.devices()
    shape = resolve_mesh_shape(mesh_cfg, len(devices))
    used = devices[: math.prod(shape)]
    return jax.make_mesh(
        shape, MESH_AXES, axis_types=(AxisType.Auto,) * len(MESH_AXES), devices=used
    )


# A parameter this large that the rules meant to shard but that ends up replicated on every
# device is worth a warning (MaxText's "sufficiently sharded" check): its dimension is not
# divisible by the mesh axes the rules gave it, so each device holds (and updates) a copy.
LARGE_PARAM_ELEMENTS = 1_000_000
_warned_replicated: set[str] = set()  # parameter paths already warned about (once each)


def _intended_axes(logical) -> list:
    """Logical names -> the mesh axes ``RULES`` give each dimension (before divisibility)."""
    if logical is None or not isinstance(logical, PartitionSpec | tuple):
        return []
    return list(nn.logical_to_mesh_axes(tuple(logical), RULES))


def _axes_size(ax, mesh) -> int:
    """Devices a dimension is split over (``ax``: None, a mesh axis or a tuple of them)."""
    if ax is None:
        return 1
    return math.prod(mesh.shape[n] for n in ((ax,) if isinstance(ax, str) else ax))


def _mesh_spec(logical, shape, mesh) -> PartitionSpec:
    """Logical names -> PartitionSpec; a dimension a mesh axis does not divide is replicated."""
    axes = _intended_axes(logical)
    for d, ax in enumerate(axes):
        if shape[d] % _axes_size(ax, mesh):
            axes[d] = None
    return PartitionSpec(*axes)


def warn_replicated(name: str, logical, shape, mesh) -> bool:
    """Warns (once per ``name``, through logging) when a parameter of at least
    ``LARGE_PARAM_ELEMENTS`` elements that ``RULES`` shard over more than one device ends up
    fully replicated because no dimension divides its mesh axes. Returns whether it warned.
    """
    intended = _intended_axes(logical)
    meant = math.prod(_axes_size(ax, mesh) for ax in intended) if intended else 1
    if math.prod(shape) < LARGE_PARAM_ELEMENTS or meant == 1 or name in _warned_replicated:
        return False
    placed = _mesh_spec(logical, shape, mesh)
    if any(_axes_size(ax, mesh) > 1 for ax in placed):
        return False
    _warned_replicated.add(name)
    wanted = ", ".join(
        f"dim {d} ({shape[d]}) over {ax} ({_axes_size(ax, mesh)})"
        for d, ax in enumerate(intended)
        if _axes_size(ax, mesh) > 1
    )
    logging.warning(
        "parameter %s %s (%s elements) is replicated on every device: the sharding rules "
        "split %s, which does not divide; choose sizes divisible by the mesh (config.mesh)",
        name,
        tuple(shape),
        f"{math.prod(shape):,}",
        wanted,
    )
    return True


def state_shardings(abstract_boxed, mesh):
    """NamedShardings for the unboxed state from its abstract, logically-boxed version.

    A large parameter the rules meant to shard but that stays replicated is logged once
    (``warn_replicated``).

    Args:
      abstract_boxed: ``jax.eval_shape`` of a state whose parameters (and optimizer moments)
        are ``nn.LogicallyPartitioned`` boxes.
      mesh: the device mesh.
    """
    logical = nn.get_partition_spec(abstract_boxed)
    shapes = nn.unbox(abstract_boxed)
    if isinstance(shapes, dict) and "params" in shapes:  # the parameters, not their moments
        jax.tree_util.tree_map_with_path(
            lambda path, spec, x: warn_replicated(
                "/".join(str(getattr(p, "key", p)) for p in path), spec, x.shape, mesh
            ),
            logical["params"],
            shapes["params"],
            is_leaf=lambda s: isinstance(s, PartitionSpec),
        )
    return jax.tree.map(
        lambda spec, x: NamedSharding(mesh, _mesh_spec(spec, x.shape, mesh)),
        logical,
        shapes,
        is_leaf=lambda s: isinstance(s, PartitionSpec),
    )


def describe(state, shardings, mesh, global_batch_size: int) -> str:
    """Text logged at start: batch sizes and each parameter's shape and sharding."""
    dp = data_parallel_size(mesh)
    lines = [
        f"mesh {dict(mesh.shape)} over {mesh.devices.size} of {jax.device_count()} devices "
        f"({jax.process_count()} process(es))",
        f"batch: global {global_batch_size}, per process "
        f"{global_batch_size // jax.process_count()}, per device {global_batch_size // dp} "
        f"(data-parallel size {dp})",
    ]
    flat = jax.tree_util.tree_flatten_with_path(state["params"])[0]
    flat_sh = jax.tree.leaves(shardings["params"], is_leaf=lambda s: isinstance(s, NamedSharding))
    n = sum(int(np.prod(x.shape)) for _, x in flat)
    lines.append(f"parameters: {n:,}")
    for (path, x), sh in zip(flat, flat_sh):
        name = "/".join(str(getattr(p, "key", p)) for p in path)
        lines.append(f"  {name:48s} {str(tuple(x.shape)):18s} {sh.spec}")
    return "\n".join(lines)


def log_sharding(text: str) -> None:
    for line in text.splitlines():
        logging.info(line)
