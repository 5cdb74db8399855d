"""Packing (``config.data.packing``): rows hold whole examples with ``segment_ids`` and
restarting ``positions``; per-example masked-LM losses of packed rows equal those of each
example alone in a padded row; Linformer and Transformer-XL refuse packing."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import seqjax.data as sd
from seqjax import tasks
from seqjax.data import packing
from seqjax.models.transformer import TransformerConfig, TransformerLM, attention_cycle
from seqjax.train import config_validation

_LISTOPS = dict(name="listops", max_len=48, listops_train_size=64, listops_validation_size=16,
                listops_test_size=16, listops_min_length=4, listops_max_length=48,
                listops_max_depth=3, listops_max_args=4, listops_num_procs=1, batch_size=4,
                objective="mlm", packing=True)  # fmt: skip


def test_next_fit_keeps_order_and_fits():
    rows = packing.next_fit(np.array([5, 3, 4, 9, 1, 1, 12]), 10)
    assert [r.tolist() for r in rows] == [[0, 1], [2], [3, 4], [5], [6]]


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
    c = sd.default_config()
    c.update(data_dir=str(tmp_path_factory.mktemp("tfds")), manual_dir=None, download=False,
             prefetch=1, **_LISTOPS)  # fmt: skip
    return c


def test_packed_rows_hold_whole_examples(cfg):
    it = sd.make(cfg, split="train")
    b = next(it)
    assert set(b) == {"inputs", "targets", "weights", "segment_ids", "positions"}
    seg, pos, tgt = b["segment_ids"], b["positions"], b["targets"]
    assert (seg.max(1) >= 2).any()  # several examples in some row
    for r in range(seg.shape[0]):
        for s in range(1, seg[r].max() + 1):
            at = np.flatnonzero(seg[r] == s)
            assert (np.diff(at) == 1).all() and (pos[r, at] == np.arange(len(at))).all()
    assert (tgt[seg == 0] == 0).all() and (b["weights"][seg == 0] == 0).all()
    state = it.get_state()
    want = next(it)
    again = sd.make(cfg, split="train")
    again.set_state(state)
    got = next(again)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    # evaluation covers every example once
    ev = sd.make(cfg, split="validation", train=False)
    n = sum(int(x["segment_ids"].max(1).sum()) for x in ev)
    assert n == 16


@pytest.mark.parametrize(
    "attention", ["dense", pytest.param("sparse_strided", marks=pytest.mark.slow)]
)
def test_packed_losses_equal_unpacked(cfg, attention):
    info = sd.info(cfg)
    batch = next(sd.make(cfg, split="train"))
    opts = {"sparse_strided": {"block_size": 2, "stride": 8}} if attention != "dense" else {}
    mcfg = TransformerConfig(vocab_size=info.vocab_size, num_layers=2, num_heads=2, d_model=16,
                             max_len=64, causal=False, pad_id=0,
                             attention=attention_cycle(attention, opts))  # fmt: skip
    model = TransformerLM(mcfg)
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 48), jnp.int32))["params"]

    def token_losses(packed: bool, b):  # per-token cross-entropy x weight [B, T], one jit
        task = tasks.get("mlm").configure(_Cfg(packed))
        logits = task.apply(model, params, b, rng=None, train=False)[0]
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, b["targets"])
        return ce * b["weights"]

    packed_BT = np.asarray(jax.jit(lambda b: token_losses(True, b))(batch))
    # each example alone, padded with 0 at the end of its own row (positions 0..n-1)
    rows, want = [], []
    for r in range(batch["inputs"].shape[0]):
        for s in range(1, batch["segment_ids"][r].max() + 1):
            at = np.flatnonzero(batch["segment_ids"][r] == s)
            row = {k: np.zeros(48, batch[k].dtype) for k in ("inputs", "targets", "weights")}
            for k in row:
                row[k][: len(at)] = batch[k][r, at]
            rows.append(row)
            want.append(packed_BT[r, at])
    alone = {k: np.stack([row[k] for row in rows]) for k in rows[0]}
    alone_BT = np.asarray(jax.jit(lambda b: token_losses(False, b))(alone))
    for i, w in enumerate(want):  # the same per-token losses, so the same example sums
        np.testing.assert_allclose(alone_BT[i, : len(w)], w, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(alone_BT[i].sum(), w.sum(), rtol=1e-6, atol=1e-6)


class _Cfg:
    def __init__(self, packed):
        self.data = {"packing": packed}


def test_linformer_and_xl_refuse_packing(cfg):
    from seqjax.configs import common
    from tests.train.conftest import CONFIG

    config = common.load_file(CONFIG).get_config("smoke")
    config.data = cfg
    config.model.max_len = 64
    config.model.attention = "linformer"
    config.model.attention_options.linformer = {"k": 8, "max_len": 64}
    with pytest.raises(config_validation.ConfigError, match=r"config\.data\.packing=True .*linf"):
        config_validation.validate(config)
    config.model.attention = "dense"
    config.model.kind = "transformer_xl"
    with pytest.raises(config_validation.ConfigError, match=r"config\.data\.packing=True"):
        config_validation.validate(config)
