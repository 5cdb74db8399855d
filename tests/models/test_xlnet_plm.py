"""Brute force at T <= 8 (oracle 5 of issue 45): the permutation LM's loss of one order is
the sum of the per-target conditionals computed one target at a time from inputs where
everything later in the order is garbage (so nothing can leak), and the identity order with
every token a target is a left-to-right LM (each factor from the prefix alone)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax.models.xlnet import XLNet, XLNetConfig

T, V = 8, 99
CFG = XLNetConfig(vocab_size=V, d_model=32, num_layers=2, num_heads=4, d_inner=37,
                  dropout_rate=0.0)  # fmt: skip


@pytest.fixture(scope="module")
def model_params():
    model = XLNet(CFG)
    params = jax.jit(model.init)(jax.random.key(0), jnp.zeros((1, T), jnp.int32))["params"]
    return model, params


@jax.jit
def _apply(params, ids, types, perm, tmap):
    return XLNet(CFG).apply({"params": params}, ids, perm_mask_BTT=perm, token_types_BT=types,
                            target_mapping_BPT=tmap)  # fmt: skip


def _log_probs(model, params, ids, types, perm_BTT, positions, truth):
    """log p(truth[p]) of the query stream at each position p, the model reading ``ids``."""
    tmap = np.zeros((1, len(positions), ids.shape[-1]), np.float32)
    tmap[0, np.arange(len(positions)), positions] = 1.0
    del model
    logits = _apply(params, jnp.asarray(ids)[None], jnp.asarray(types)[None], perm_BTT[None],
                    jnp.asarray(tmap))  # fmt: skip
    lp = jax.nn.log_softmax(logits[0], -1)
    return np.asarray(lp[np.arange(len(positions)), truth[positions]])


def _perm_mask(rank, target):
    """Query i may not see j when j is a target with rank >= i's (a target not itself)."""
    query = np.where(target, rank, 0)
    return jnp.asarray(target[None, :] & (query[:, None] <= rank[None, :]))


def test_one_order_is_the_sum_of_its_conditionals(model_params):
    model, params = model_params
    rng = np.random.default_rng(0)
    ids, types = rng.integers(5, V, T), np.array([0] * 5 + [1] * 3)
    rank = rng.permutation(T)
    target = rank >= T - 3  # the last 3 of the order are predicted
    perm = _perm_mask(rank, target)
    positions = np.flatnonzero(target)
    joint = _log_probs(model, params, ids, types, perm, positions, ids)
    one_at_a_time = []
    for p in positions:
        garbled = ids.copy()
        later = target & (rank >= rank[p])  # this target and everything after it
        garbled[later] = rng.integers(5, V, later.sum())
        one_at_a_time.append(_log_probs(model, params, garbled, types, perm, np.array([p]), ids)[0])
    np.testing.assert_allclose(joint, one_at_a_time, rtol=1e-5, atol=1e-5)
    assert abs(joint.sum() - sum(one_at_a_time)) < 1e-4


def test_identity_order_is_a_left_to_right_lm(model_params):
    model, params = model_params
    rng = np.random.default_rng(1)
    ids, types = rng.integers(5, V, T), np.zeros(T, int)
    causal = _perm_mask(np.arange(T), np.ones(T, bool))
    joint = _log_probs(model, params, ids, types, causal, np.arange(T), ids)
    for i in (0, 3, T - 1):  # log p(x_i | x_<i) from the prefix x_<=i alone (x_i garbled)
        prefix = ids[: i + 1].copy()
        prefix[i] = (prefix[i] + 1) % V
        causal_i = _perm_mask(np.arange(i + 1), np.ones(i + 1, bool))
        lp = _log_probs(model, params, prefix, types[: i + 1], causal_i, np.array([i]), ids)
        np.testing.assert_allclose(joint[i], lp[0], rtol=1e-5, atol=1e-5)
