"""Causal kernelized attention in chunks: quadratic inside a chunk, a running ``[M, Dv]``
state between chunks.

The causal sums of linear attention (Katharopoulos et al. 2020, §3.3, eq. 9)

    num_i = phi(Q_i)^T sum_{j <= i} phi(K_j) V_j^T,    den_i = phi(Q_i)^T sum_{j <= i} phi(K_j)

as prefix sums (``cumsum``) store a ``[M, Dv]`` state per position: ``[B, T, H, M, Dv]``
floats, memory-bound on an accelerator. The chunk form (the "chunkwise parallel" form of
Yang et al. 2024, GLA §3.2, with no decay; Hua et al. 2022, FLASH §3.3) cuts the T
aligned positions into K chunks of C and splits each sum at the chunk boundary:

    num_i = phi(Q_i)^T S_[k]  +  sum_{j in chunk k, j <= i} (phi(Q_i)^T phi(K_j)) V_j,
    S_[k] = S_0 + sum_{k' < k} sum_{j in chunk k'} phi(K_j) V_j^T     (an exclusive cumsum
                                                                        over chunks)

(``den`` likewise with 1 for V_j): matmuls of ``[C, C]`` inside a chunk and ``[C, M] x
[M, Dv]`` against the state, with ``K = T / C`` states stored instead of T. It equals the
prefix-sum form exactly in real arithmetic (float32 round-off apart) and in gradients,
which are plain reverse-mode through the einsums.

Bottom-right alignment (S >= T keys, query i sees keys j <= i + S - T): the first S - T
keys are visible to every query and form the initial state ``S_0``; the last T keys align
one to one with the queries. A tail that does not fill a chunk is padded with zero
features (they add nothing to any sum) and cut off the output.

Legend: B batch, T queries, S keys, H heads, M features, Dv value dim, K chunks, C chunk
length (query positions i, key positions j of one chunk).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

DEFAULT_CHUNK = 128  # C: K = T / 128 states (vs T for prefix sums); the C x C part stays small


def check_chunk(chunk, mechanism: str) -> int:
    """Validates the ``chunk`` option (0 = prefix sums)."""
    if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 0:
        raise ValueError(
            f"{mechanism} option chunk={chunk!r} must be an integer >= 0 (causal chunk length; "
            f"0 = prefix sums; set config.model.attention_options.{mechanism}.chunk)"
        )
    return int(chunk)


def _chunks(x_BTH_, c):
    """``[B, T, H, ...]`` -> ``[B, K, C, H, ...]``, zero-padded to a multiple of C."""
    b, t = x_BTH_.shape[:2]
    pad = -t % c
    if pad:
        x_BTH_ = jnp.pad(x_BTH_, [(0, 0), (0, pad)] + [(0, 0)] * (x_BTH_.ndim - 2))
    return x_BTH_.reshape(b, (t + pad) // c, c, *x_BTH_.shape[2:])


def causal_sums(phi_q_BTHM, phi_k_BSHM, v_BSHD, *, chunk: int = DEFAULT_CHUNK, state=None):
    """``(num [B, T, H, Dv], den [B, T, H])`` of causal kernelized attention, chunk by chunk.

    Args:
      phi_q_BTHM, phi_k_BSHM: non-negative features (float32), ``S >= T``; masked keys
        already zeroed.
      v_BSHD: values (float32).
      chunk: C (clamped to T).
      state: optional ``{"kv": [B, H, M, Dv], "z": [B, H, M]}`` of earlier keys, added to
        ``S_0`` (decoding a prompt after a cached prefix).

    Returns:
      The numerator and normaliser of eq. 9 for each query (bottom-right aligned).
    """
    t, s = phi_q_BTHM.shape[1], phi_k_BSHM.shape[1]
    offset = s - t
    c = max(1, min(int(chunk), t))
    # S_0, z_0: the keys before the aligned block (visible to every query).
    kv0_BHMD = jnp.einsum("bshm,bshd->bhmd", phi_k_BSHM[:, :offset], v_BSHD[:, :offset])
    z0_BHM = phi_k_BSHM[:, :offset].sum(axis=1)
    if state is not None:
        kv0_BHMD, z0_BHM = kv0_BHMD + state["kv"], z0_BHM + state["z"]
    q_BKCHM = _chunks(phi_q_BTHM, c)
    k_BKCHM = _chunks(phi_k_BSHM[:, offset:], c)
    v_BKCHD = _chunks(v_BSHD[:, offset:], c)
    # Each chunk's contribution, then the state before each chunk (exclusive cumsum).
    kv_BKHMD = jnp.einsum("bkjhm,bkjhd->bkhmd", k_BKCHM, v_BKCHD)
    z_BKHM = k_BKCHM.sum(axis=2)
    kv_BKHMD = kv0_BHMD[:, None] + jnp.cumsum(kv_BKHMD, axis=1) - kv_BKHMD
    z_BKHM = z0_BHM[:, None] + jnp.cumsum(z_BKHM, axis=1) - z_BKHM
    # Inter-chunk (the state) plus intra-chunk (masked C x C similarities).
    num_BKCHD = jnp.einsum("bkihm,bkhmd->bkihd", q_BKCHM, kv_BKHMD)
    den_BKCH = jnp.einsum("bkihm,bkhm->bkih", q_BKCHM, z_BKHM)
    sim_BKHCC = jnp.einsum("bkihm,bkjhm->bkhij", q_BKCHM, k_BKCHM)
    causal_CC = jnp.tril(jnp.ones((c, c), sim_BKHCC.dtype))
    sim_BKHCC = sim_BKHCC * causal_CC[None, None, None]
    num_BKCHD = num_BKCHD + jnp.einsum("bkhij,bkjhd->bkihd", sim_BKHCC, v_BKCHD)
    den_BKCH = den_BKCH + sim_BKHCC.sum(axis=-1).transpose(0, 1, 3, 2)
    b, k, _, h, dv = num_BKCHD.shape
    num_BTHD = num_BKCHD.reshape(b, k * c, h, dv)[:, :t]
    den_BTH = den_BKCH.reshape(b, k * c, h)[:, :t]
    return num_BTHD, den_BTH
