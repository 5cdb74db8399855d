"""LSH hashing of Reformer attention (Kitaev et al. 2020, §2 "Hashing attention").

Random rotations ``R`` per hash round and head, ``bucket(x) = argmax([xR ; -xR])``, the
default bucket count ``K = 2T / C`` and the factorized form ``n_buckets=(f_1, f_2)`` (one
argmax per factor, combined as a mixed-radix number). Used by ``seqjax.attention.lsh``.

Legend: B batch, T length, H heads, D head dim, R hash rounds, K n_buckets.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def default_n_buckets(seq_len: int, chunk_len: int) -> int:
    """trax's default: about 2T / chunk_len buckets (two per chunk), at least 2, even."""
    c = min(chunk_len, seq_len)
    return max(2, 2 * (-(-seq_len // c)))


def factor_buckets(n_buckets: int) -> tuple[int, ...]:
    """Splits K into two even factors near sqrt(K) for factorized hashing (trax allows a
    list of factors); returns ``(K,)`` when no such split exists (K < 4 or K/2 odd)."""
    best = (n_buckets,)
    for a in range(2, int(np.sqrt(n_buckets)) + 1, 2):
        if n_buckets % a == 0 and (n_buckets // a) % 2 == 0:
            best = (a, n_buckets // a)
    return best


def total_buckets(n_buckets) -> int:
    """K for an int or a tuple of factors."""
    return int(np.prod(n_buckets)) if isinstance(n_buckets, (list, tuple)) else int(n_buckets)


def rotations(rng, *, num_heads: int, n_hashes: int, head_dim: int, n_buckets):
    """Random Gaussian rotations ``R`` float32 ``[H, R, D, K/2]``: one per head and round.

    For factorized ``n_buckets = (f_1, f_2, ...)`` the last axis is ``sum(f_i / 2)``: one
    independent block of columns per factor.

    The Gaussian entries come from XLA's counter-based Philox generator
    (``lax.rng_bit_generator``) seeded with the key's bits and mapped through the inverse
    normal CDF: the same key always gives the same rotations on every backend, and it
    compiles in a fraction of the time of ``jax.random.normal``'s threefry on CPU.
    """
    if isinstance(n_buckets, (list, tuple)):
        cols = sum(f // 2 for f in n_buckets)
    else:
        cols = max(n_buckets // 2, 1)
    shape = (num_heads, n_hashes, head_dim, cols)
    if jnp.issubdtype(getattr(rng, "dtype", None), jax.dtypes.prng_key):
        rng = jax.random.key_data(rng)
    bits = jnp.asarray(rng, jnp.uint32).reshape(-1)
    state = jnp.concatenate([bits, bits ^ jnp.uint32(0x9E3779B9)])[:4]
    _, bits = jax.lax.rng_bit_generator(
        state, shape, dtype=jnp.uint32, algorithm=jax.lax.RandomAlgorithm.RNG_PHILOX
    )
    # 23 random mantissa bits -> uniform in (0, 1) -> standard normal.
    u = ((bits >> 9).astype(jnp.float32) + 0.5) * (1.0 / (1 << 23))
    return jnp.sqrt(2.0) * jax.lax.erf_inv(2.0 * u - 1.0)


def _argmax_pm(xr_BHTk):
    """``argmax([xr ; -xr], -1)`` without building the concatenation: ``argmax(xr)`` when
    ``max(xr) >= -min(xr)``, else ``k + argmin(xr)``; ties give the first index, as the
    argmax of the concatenation does."""
    half = xr_BHTk.shape[-1]
    top = jnp.max(xr_BHTk, -1, keepdims=True)
    bottom = jnp.min(xr_BHTk, -1, keepdims=True)
    up = top >= -bottom  # the winner is in the +xR half
    # First index of the winner as a min-reduction over an iota: XLA's variadic argmax
    # reduction is several times slower than max/min on CPU.
    hit = jnp.where(up, xr_BHTk == top, xr_BHTk == bottom)
    iota = jnp.arange(half, dtype=jnp.float32)
    first = jnp.min(jnp.where(hit, iota, float(half - 1)), -1).astype(jnp.int32)
    return first + jnp.where(up[..., 0], 0, half)


def hash_buckets(x_BHTD, rot_HRDk, n_buckets):
    """``argmax([x R ; -x R])`` per round: int32 ``[B, H, R, T]`` in ``[0, K)``.

    Rounds are hashed one at a time (``lax.map``), and ``[xR ; -xR]`` is never built (see
    ``_argmax_pm``): the only float tensor of size ``T x K/2`` is one round's ``x R_r``.
    At fixed tokens per batch with K = 2T/C this is still O(T K D) = O(T^2 D / C) work;
    factorized ``n_buckets = (f_1, f_2)`` (as trax allows) hashes with each factor's own
    columns and combines ``b_1 + f_1 b_2``, so the work is O(T (f_1 + f_2) D) ~ O(T sqrt(K) D).
    """
    b, h, t, _ = x_BHTD.shape
    if total_buckets(n_buckets) == 1:
        return jnp.zeros((b, h, rot_HRDk.shape[1], t), jnp.int32)
    factors = tuple(n_buckets) if isinstance(n_buckets, (list, tuple)) else (n_buckets,)
    x_BHTD = jax.lax.stop_gradient(x_BHTD).astype(jnp.float32)

    def one_round(rot_HDk):
        xr_BHTk = jnp.einsum("bhtd,hdk->bhtk", x_BHTD, rot_HDk)
        bucket, radix, col = 0, 1, 0
        for f in factors:
            bucket = bucket + radix * _argmax_pm(xr_BHTk[..., col : col + f // 2])
            radix, col = radix * f, col + f // 2
        return bucket

    buckets_RBHT = jax.lax.map(one_round, jnp.moveaxis(rot_HRDk, 1, 0))
    return jnp.moveaxis(buckets_RBHT, 0, 2)
