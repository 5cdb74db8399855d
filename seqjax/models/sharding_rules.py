"""The mesh axes, the logical-axis rules of the models and the batch layout on the mesh.

The models name the dimensions of their parameters and activations with logical axes
(``seqjax.models.layers``: vocab, embed, heads, kv, mlp, length, batch); ``RULES`` maps
them to the mesh axes ``MESH_AXES``: ``data`` (pure data parallelism), ``fsdp`` (data
parallelism whose parameters and optimizer state are sharded too), ``sequence`` (context
parallelism, ``seqjax.attention.ring``) and ``tensor`` (Megatron-style tensor parallelism).
Batches are split over ``data`` x ``fsdp`` along their leading axis. Building the mesh from
a config and sharding a training state are the trainer's (``seqjax.train.sharding``); the
tasks use this module to run a model on a run's mesh.

Legend: B global batch, b per-process batch.
"""

from __future__ import annotations

import contextlib

import flax.linen as nn
import jax
from jax.sharding import NamedSharding, PartitionSpec

MESH_AXES = ("data", "fsdp", "sequence", "tensor")

# Logical axis -> mesh axes, by priority (Flax assigns a mesh axis at most once per array,
# so activations ("batch", "length", "embed") shard the batch over data+fsdp, the sequence
# over sequence and keep the embedding whole, while the parameters' "embed" dimension is
# sharded over fsdp).
RULES = (
    ("batch", ("data", "fsdp")),
    ("vocab", "tensor"),
    ("heads", "tensor"),
    ("mlp", "tensor"),
    ("embed", "fsdp"),
    ("kv", None),
    ("length", "sequence"),
    ("proj_k", None),  # Linformer's projected length k
)


@contextlib.contextmanager
def rules_and_mesh(mesh):
    """Context for running model code on ``mesh`` with the logical-axis ``RULES``, so the
    models' ``nn.with_logical_constraint`` calls shard activations (batch over data+fsdp,
    length over sequence); attention reads the ``sequence`` axis from this mesh."""
    with jax.set_mesh(mesh), nn.logical_axis_rules(RULES):
        yield


def batch_sharding(mesh) -> NamedSharding:
    """Leading (batch) axis split over data and fsdp, the rest replicated."""
    return NamedSharding(mesh, PartitionSpec(("data", "fsdp")))


def data_parallel_size(mesh) -> int:
    return mesh.shape["data"] * mesh.shape["fsdp"]


def global_batch(local: dict, mesh) -> dict:
    """Assembles this process's numpy batch (``[b, ...]`` arrays) into global ``[B, ...]``
    ``jax.Array``s sharded over the batch."""
    sharding = batch_sharding(mesh)
    return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in local.items()}
