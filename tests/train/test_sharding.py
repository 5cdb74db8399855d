"""The sufficiently-sharded check: a large parameter the rules meant to shard is not silently
replicated (8 fake CPU devices, see tests/conftest.py)."""

import logging

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import pytest
from jax.sharding import PartitionSpec

from seqjax.train import sharding


def _boxed(shape, names):
    return nn.LogicallyPartitioned(jax.ShapeDtypeStruct(shape, jnp.float32), names=names)


@pytest.fixture
def fsdp8(monkeypatch):
    monkeypatch.setattr(sharding, "_warned_replicated", set())
    return sharding.make_mesh(ml_collections.ConfigDict({"data": 1, "fsdp": 8, "tensor": 1}))


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_large_parameter_left_replicated_is_warned_once(fsdp8, caplog):
    big = 1001 * 1000  # >= LARGE_PARAM_ELEMENTS; 1001 is not divisible by fsdp=8
    assert big >= sharding.LARGE_PARAM_ELEMENTS
    state = {
        "params": {
            "odd": {"kernel": _boxed((1001, 1000), ("embed", "mlp"))},  # fsdp 8 ∤ 1001
            "even": {"kernel": _boxed((1000, 1000), ("embed", "mlp"))},  # sharded: no warning
            "small": {"kernel": _boxed((9, 7), ("embed", "mlp"))},  # small: no warning
            "bias": {"b": _boxed((1001 * 1000,), ("kv",))},  # rules never shard "kv"
        },
        "opt_state": {"mu": _boxed((1001, 1000), ("embed", "mlp"))},  # a moment: not a param
    }
    with caplog.at_level(logging.WARNING):
        shardings = sharding.state_shardings(state, fsdp8)
        sharding.state_shardings(state, fsdp8)  # a second call (e.g. evaluation) stays quiet
    assert shardings["params"]["odd"]["kernel"].is_fully_replicated
    assert not shardings["params"]["even"]["kernel"].is_fully_replicated
    (message,) = _warnings(caplog)
    assert "odd/kernel (1001, 1000)" in message and "1,001,000 elements" in message
    assert "dim 0 (1001) over fsdp (8)" in message


def test_partly_sharded_parameter_is_not_warned(fsdp8, caplog):
    """One dimension split is enough: ``embed`` divides, ``vocab`` (tensor=1) does not matter."""
    with caplog.at_level(logging.WARNING):
        warned = sharding.warn_replicated("w", PartitionSpec("embed", "vocab"), (1024, 1001), fsdp8)
    assert not warned and not _warnings(caplog)


def test_single_device_mesh_never_warns(caplog, monkeypatch):
    monkeypatch.setattr(sharding, "_warned_replicated", set())
    mesh = sharding.make_mesh(ml_collections.ConfigDict({"data": 1, "fsdp": 1, "tensor": 1}))
    with caplog.at_level(logging.WARNING):
        assert not sharding.warn_replicated("w", PartitionSpec("embed", "mlp"), (1001, 1001), mesh)
    assert not _warnings(caplog)
