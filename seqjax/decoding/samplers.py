"""Token samplers over a batch of logits: greedy, temperature, top-k and nucleus (top-p).

``sample_logits`` draws one token per row: the logits are divided by the temperature, the
top-k filter keeps the ``k`` largest (Fan et al. 2018), the nucleus filter keeps the
smallest set of most probable tokens whose cumulative probability reaches ``p`` (Holtzman
et al. 2020, §3.1, eq. 2-3), and the rest are sampled from with ``jax.random.categorical``.
Temperature 0 is greedy decoding (argmax). With ``top_k=0`` and ``top_p=1`` nothing is
filtered and the draw is bit-for-bit ``jax.random.categorical(rng, logits / temperature)``.

Ties are broken deterministically toward the lower token id, in both filters: a filter
that must keep some but not all of several equal logits keeps the lowest ids.

Every function here is pure and jittable; ``top_k`` is static (it sets a shape), the
temperature and ``top_p`` may be Python floats or traced scalars. ``check_sampling``
validates the three settings in Python, before anything is traced.

Legend: B batch (any leading axes), V vocabulary.
"""

from __future__ import annotations

import math
import numbers

import jax
import jax.numpy as jnp


def check_sampling(temperature=1.0, top_k=0, top_p=1.0) -> None:
    """Raises one ``ValueError`` listing every invalid sampling setting.

    Args:
      temperature: softmax temperature, a finite number ``>= 0`` (0 = greedy argmax).
      top_k: keep the ``top_k`` most probable tokens, an integer ``>= 0`` (0 = off).
      top_p: nucleus mass, a number in ``(0, 1]`` (1 = off).

    Traced (``jax.Array``) temperature or ``top_p`` values are not checked.
    """
    problems = []
    if _is_number(temperature) and not (math.isfinite(temperature) and temperature >= 0):
        problems.append(
            f"temperature (--temperature) = {temperature!r} must be a finite number >= 0 "
            "(0 = greedy argmax, 1 = the model's distribution)"
        )
    if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k < 0:
        problems.append(
            f"top_k (--top_k) = {top_k!r} must be an integer >= 0 "
            "(0 = no top-k filter, k = sample among the k most probable tokens)"
        )
    if _is_number(top_p) and not (0.0 < top_p <= 1.0):
        problems.append(
            f"top_p (--top_p) = {top_p!r} must be in (0, 1] "
            "(1 = no nucleus filter, p = the smallest set of tokens with probability >= p)"
        )
    if problems:
        raise ValueError("invalid sampling settings: " + "; ".join(problems))


def _is_number(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def top_k_filter(logits_BV: jax.Array, top_k: int) -> jax.Array:
    """Sets every logit outside the ``top_k`` largest of its row to ``-inf``.

    Exactly ``min(top_k, V)`` tokens stay per row (ties toward the lower id);
    ``top_k=0`` returns the logits unchanged.
    """
    check_sampling(top_k=top_k)
    vocab = logits_BV.shape[-1]
    if top_k == 0 or top_k >= vocab:
        return logits_BV
    flat_RV = logits_BV.reshape(-1, vocab)
    _, ids_RK = jax.lax.top_k(flat_RV, top_k)  # equal values: lower index first
    rows_R1 = jnp.arange(flat_RV.shape[0])[:, None]
    keep_RV = jnp.zeros(flat_RV.shape, bool).at[rows_R1, ids_RK].set(True)
    out_RV = jnp.where(keep_RV, flat_RV, -jnp.inf)
    return out_RV.reshape(logits_BV.shape)


def top_p_filter(logits_BV: jax.Array, top_p) -> jax.Array:
    """Nucleus filter (Holtzman et al. 2020, §3.1): keeps per row the smallest set of most
    probable tokens whose cumulative probability is ``>= top_p``; the rest become ``-inf``.

    Tokens are ranked by logit, ties toward the lower id; the token at rank ``r`` is kept
    iff the probability of the ranks before it is ``< top_p``, so the most probable token
    always stays. Probabilities are a float32 softmax of the row. ``top_p >= 1`` returns the
    logits unchanged (also when ``top_p`` is traced).
    """
    check_sampling(top_p=top_p)
    if _is_number(top_p) and top_p >= 1.0:
        return logits_BV
    vocab = logits_BV.shape[-1]
    flat_RV = logits_BV.reshape(-1, vocab)
    order_RV = jnp.argsort(-flat_RV, axis=-1, stable=True)  # rank -> token id
    probs_RV = jax.nn.softmax(flat_RV.astype(jnp.float32), axis=-1)
    sorted_RV = jnp.take_along_axis(probs_RV, order_RV, axis=-1)
    cum_RV = jnp.cumsum(sorted_RV, axis=-1)
    before_RV = jnp.concatenate([jnp.zeros_like(cum_RV[:, :1]), cum_RV[:, :-1]], axis=-1)
    keep_sorted_RV = before_RV < top_p
    rows_R1 = jnp.arange(flat_RV.shape[0])[:, None]
    keep_RV = jnp.zeros(flat_RV.shape, bool).at[rows_R1, order_RV].set(keep_sorted_RV)
    keep_RV = keep_RV | (jnp.asarray(top_p) >= 1.0)
    return jnp.where(keep_RV, flat_RV, -jnp.inf).reshape(logits_BV.shape)


def sample_logits(
    logits_BV: jax.Array, rng, *, temperature=1.0, top_k: int = 0, top_p=1.0
) -> jax.Array:
    """One token per row: greedy, or a temperature / top-k / top-p sample.

    Args:
      logits_BV: unnormalised log-probabilities ``[..., V]``.
      rng: PRNG key (unused when ``temperature`` is the Python number 0).
      temperature: the logits are divided by it; 0 = argmax. May be traced.
      top_k: static; 0 = off.
      top_p: nucleus mass in ``(0, 1]``; 1 = off. May be traced.

    Returns:
      int32 ``[...]`` token ids.
    """
    check_sampling(temperature, top_k, top_p)
    greedy_B = jnp.argmax(logits_BV, axis=-1).astype(jnp.int32)
    if _is_number(temperature) and temperature == 0:
        return greedy_B
    # A traced temperature of 0 falls back to argmax below; divide by 1 there (no inf/nan).
    temp = jnp.asarray(temperature, jnp.float32)
    safe_temp = jnp.where(temp > 0, temp, 1.0)
    scaled_BV = logits_BV.astype(jnp.float32) / safe_temp
    scaled_BV = top_k_filter(scaled_BV, top_k)
    scaled_BV = top_p_filter(scaled_BV, top_p)
    drawn_B = jax.random.categorical(rng, scaled_BV, axis=-1).astype(jnp.int32)
    if _is_number(temperature):
        return drawn_B
    return jnp.where(temp > 0, drawn_B, greedy_B)
