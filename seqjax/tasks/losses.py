"""Weighted loss sums shared by the tasks (every one a float32 scalar).

Legend: B batch, ... further target axes (T for sequences), V classes / vocabulary.
Weights are 0 where a target does not count (padding, unmasked positions). ``bits`` turns
a mean loss in nats into bits (the reported bits per character/byte).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import optax


def bits(nats_per_token: float) -> float:
    """Nats -> bits (bits per character/byte when a token is a character/byte)."""
    return nats_per_token / math.log(2.0)


def cross_entropy_sums(logits, targets, weights) -> dict:
    """``loss_sum`` = sum_i w_i CE_i, ``correct_sum`` = sum_i w_i [argmax = target],
    ``weight_sum`` = sum_i w_i, for ``logits [B, ..., V]`` and int ``targets [B, ...]``."""
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    w = weights.astype(jnp.float32)
    correct = (jnp.argmax(logits, -1) == targets).astype(jnp.float32)
    return {"loss_sum": (ce * w).sum(), "correct_sum": (correct * w).sum(), "weight_sum": w.sum()}


def smoothed_cross_entropy_sums(logits, targets, weights, epsilon: float) -> dict:
    """``cross_entropy_sums`` with label smoothing (Szegedy et al. 2016 §7; Vaswani et al.
    2017 §5.4): the loss is the cross-entropy against ``(1 - eps) onehot + eps / V``, and
    ``nll_sum`` keeps the unsmoothed weighted negative log-likelihood (for perplexity)."""
    out = cross_entropy_sums(logits, targets, weights)
    out["nll_sum"] = out["loss_sum"]
    if epsilon:
        v = logits.shape[-1]
        soft = optax.smooth_labels(jax.nn.one_hot(targets, v, dtype=jnp.float32), epsilon)
        ce = optax.softmax_cross_entropy(logits.astype(jnp.float32), soft)
        out["loss_sum"] = (ce * weights.astype(jnp.float32)).sum()
    return out
