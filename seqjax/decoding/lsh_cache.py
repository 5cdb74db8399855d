"""A decoding cache for causal LSH attention that reproduces the chunked forward exactly.

trax's predict mode for ``LSHSelfAttention`` keeps every key/value and lets the new query,
hashed with the layer's fixed rotations, attend to the cached keys of its own bucket. That
is *not* what the full forward computes (Kitaev et al. 2020, §2, eq. 3-4): there the
positions are sorted by (bucket, position), the sorted order is cut into chunks of C, and a
query attends to its chunk and ``n_chunks_before`` / ``n_chunks_after`` neighbours, so keys
of neighbouring buckets in the same chunks count and far keys of its own bucket may not.

This cache follows the chunked forward instead. Per head and round it keeps every key
(the normalized query) and value, every position's bucket, its rank among the earlier
positions of its bucket (fixed once written: later positions never change it) and the
bucket histogram of the prefix. The new position i is the last of its bucket b, so its
sorted index in the prefix is ``r = #{j <= i : b_j <= b} - 1``; every cached position's
sorted index is ``#{k <= i : b_k < b_j} + rank_j`` (the histogram's exclusive cumulative
sum plus the rank), which inverts by one scatter into the sorted order; the step then
gathers the ``W = C (1 + before + after)`` positions of the chunks around ``r`` and attends
with the self mask (``q_i . k_i`` -> -1e5) and the rounds merged by their log-sum-exps, as
``seqjax.attention.lsh`` does. Work per token O(R L) integer operations plus O(R W D)
attention, instead of a full forward; memory O(L (D + Dv) + R L) per layer.

**What holds exactly** (tested):

* one layer: for every prefix, the new position's output equals ``lsh_attention``'s output
  at the last position of that prefix (with the later positions masked as padding, as
  ``seqjax.sample`` conditions on prefixes);
* a model: cached logits equal the prefix's full-forward logits at every step when every
  LSH layer except the last layer of the stack has one chunk covering ``max_len``
  (``chunk_len >= max_len``: every position sees its whole prefix, whatever the sort).

**What does not**: an earlier LSH layer with several chunks. In the full forward a later
token's bucket moves the chunk boundaries, so the earlier positions' outputs of that layer
(the next layer's keys and values) change when the prefix grows (the "causal, precisely"
note of ``seqjax.attention.lsh``); a cache freezes them as they were when each position was
decoded, so its logits differ from recomputing the prefix. ``model_exact`` tells which
case a model is in: ``seqjax.sample`` uses this cache by default only where it is exact
and recomputes the prefix otherwise (``--decoding=cache`` forces the cache: a model that
conditions each position on its own prefix only).

Legend: B batch, H heads, R hash rounds, L max_len, K buckets, C chunk length, W window of
sorted positions, D head dim (Dv of the values).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from seqjax.attention import lsh as lsh_lib
from seqjax.attention import numerics
from seqjax.attention import registry as attention_registry


def settings(options: dict, length: int) -> dict:
    """The static LSH settings of a layer decoding at model length L (as the full forward
    at length L resolves them)."""
    opts = {**lsh_lib.DEFAULTS, **{k: v for k, v in dict(options).items() if k in lsh_lib.OPTIONS}}
    lsh_lib.validate_options(opts, length)
    nb = opts["n_buckets"]
    nb = lsh_lib.default_n_buckets(length, opts["chunk_len"]) if nb is None else nb
    nb = tuple(nb) if isinstance(nb, (list, tuple)) else int(nb)
    return dict(
        n_hashes=int(opts["n_hashes"]),
        n_buckets=nb,
        chunk=min(int(opts["chunk_len"]), length),
        before=int(opts["n_chunks_before"]),
        after=int(opts["n_chunks_after"]),
    )


def init_state(batch, length, num_heads, head_dim, value_dim, options, dtype) -> dict:
    """The empty cache of one layer."""
    s = settings(options, length)
    r, k = s["n_hashes"], lsh_lib.total_buckets(s["n_buckets"])
    ints = lambda n: jnp.zeros((batch, num_heads, r, n), jnp.int32)  # noqa: E731
    return dict(
        keys=jnp.zeros((batch, length, num_heads, head_dim), dtype),
        values=jnp.zeros((batch, length, num_heads, value_dim), dtype),
        buckets=ints(length),
        ranks=ints(length),
        counts=ints(k),
    )


def step(state: dict, q_B1HD, v_B1HD, i, *, rng, options: dict, scale=None):
    """One decoding step of causal LSH attention at position ``i`` (module docstring).

    Args:
      state: the layer's cache (``init_state``) holding positions ``< i``.
      q_B1HD, v_B1HD: the new position's query (keys are normalized queries) and value.
      i: its absolute position (traced int32 scalar).
      rng: the layer's rotation key (the same as the full forward's).
      options: the layer's LSH options.
      scale: logit scale (None: 1/sqrt(D)).

    Returns:
      ``(out [B, 1, H, Dv] in q's dtype, new state)``.
    """
    if q_B1HD.shape[1] != 1:
        raise ValueError(f"decoding with a cache feeds one token per call; got {q_B1HD.shape[1]}")
    b, _, h, d = q_B1HD.shape
    length = state["keys"].shape[1]
    s = settings(options, length)
    c, nb, rounds = s["chunk"], s["n_buckets"], s["n_hashes"]
    i = jnp.asarray(i, jnp.int32)
    scale = float(numerics.default_scale(scale, d))

    # Hash the new query; its rank in its bucket is the bucket's count so far.
    rot = lsh_lib.rotations(rng, num_heads=h, n_hashes=rounds, head_dim=d, n_buckets=nb)
    q_BH1D = q_B1HD.transpose(0, 2, 1, 3)
    bucket_BHR = lsh_lib.hash_buckets(q_BH1D, rot, nb)[..., 0]
    rank_BHR = jnp.take_along_axis(state["counts"], bucket_BHR[..., None], -1)[..., 0]
    k_total = state["counts"].shape[-1]
    counts = state["counts"] + jax.nn.one_hot(bucket_BHR, k_total, dtype=jnp.int32)
    put = lambda x, new: jax.lax.dynamic_update_slice_in_dim(x, new[..., None], i, -1)  # noqa: E731
    buckets, ranks = put(state["buckets"], bucket_BHR), put(state["ranks"], rank_BHR)
    qf = q_B1HD.astype(jnp.float32)
    k_new = (qf * jax.lax.rsqrt(jnp.sum(qf * qf, -1, keepdims=True) + 1e-12)).astype(q_B1HD.dtype)
    keys = jax.lax.dynamic_update_slice_in_dim(
        state["keys"], k_new.astype(state["keys"].dtype), i, 1
    )
    values = jax.lax.dynamic_update_slice_in_dim(
        state["values"], v_B1HD.astype(state["values"].dtype), i, 1
    )

    # Sorted index of every cached position: earlier buckets' counts + rank in its bucket.
    before_BHRK = jnp.cumsum(counts, -1) - counts
    pos_L = jnp.arange(length)
    real_L = pos_L <= i
    sorted_BHRL = jnp.take_along_axis(before_BHRK, buckets, -1) + ranks
    sorted_BHRL = jnp.where(
        real_L[None, None, None], sorted_BHRL, length
    )  # unwritten slots: a dump index
    r_BHR = jnp.take_along_axis(before_BHRK, bucket_BHR[..., None], -1)[..., 0] + rank_BHR
    # Invert: the position at each sorted index (one scatter; index L collects the rest).
    bi, hi, ri = jnp.ogrid[:b, :h, :rounds]
    inv_BHRS = jnp.full((b, h, rounds, length + 1), -1, jnp.int32)
    inv_BHRS = inv_BHRS.at[bi[..., None], hi[..., None], ri[..., None], sorted_BHRL].set(
        jnp.broadcast_to(pos_L, sorted_BHRL.shape).astype(jnp.int32)
    )
    # The window: the chunks around the new position's chunk (no wrap-around).
    chunk_BHR = r_BHR // c
    lo_BHR = (chunk_BHR - s["before"]) * c
    hi_BHR = (chunk_BHR + 1 + s["after"]) * c
    w = c * (1 + s["before"] + s["after"])
    idx_BHRW = lo_BHR[..., None] + jnp.arange(w)[None, None, None]
    in_window = (idx_BHRW >= 0) & (idx_BHRW < hi_BHR[..., None]) & (idx_BHRW <= i)
    pos_BHRW = jnp.take_along_axis(inv_BHRS, jnp.clip(idx_BHRW, 0, length), -1)
    valid_BHRW = in_window & (pos_BHRW >= 0)
    pos_BHRW = jnp.where(valid_BHRW, pos_BHRW, 0)

    # Attend within the window, self logit as the full forward, rounds merged by lse.
    k_BHLD, v_BHLD = keys.transpose(0, 2, 1, 3), values.transpose(0, 2, 1, 3)
    flat = pos_BHRW.reshape(b, h, rounds * w)[..., None]
    k_BHRWD = jnp.take_along_axis(k_BHLD, flat, 2).reshape(b, h, rounds, w, d)
    v_BHRWD = jnp.take_along_axis(v_BHLD, flat, 2).reshape(b, h, rounds, w, -1)
    logits_BHRW = jnp.einsum(
        "bhd,bhrwd->bhrw", q_BH1D[:, :, 0], k_BHRWD, preferred_element_type=jnp.float32
    )
    logits_BHRW = jnp.where(pos_BHRW == i, lsh_lib.SELF_LOGIT, logits_BHRW * scale)
    out_BHR1D, lse_BHR1 = numerics.attend_logits(
        logits_BHRW[..., None, :],
        v_BHRWD,
        valid_BHRW[..., None, :],
        spec="bhrqw,bhrwd->bhrqd",
        return_lse=True,
    )
    out_BH1D = numerics.merge_lse(
        [out_BHR1D[:, :, k] for k in range(rounds)], [lse_BHR1[:, :, k] for k in range(rounds)]
    )
    new = dict(keys=keys, values=values, buckets=buckets, ranks=ranks, counts=counts)
    return out_BH1D.transpose(0, 2, 1, 3).astype(q_B1HD.dtype), new


def model_exact(layer_attention, num_layers: int, max_len: int) -> tuple[bool, str]:
    """Whether cached decoding of a stack equals recomputing the prefix, for its LSH layers
    (module docstring): ``(exact, reason)``.

    Args:
      layer_attention: ``i -> (mechanism, options)`` of layer i.
      num_layers: N.
      max_len: L.
    """
    for i in range(num_layers - 1):
        name, options = layer_attention(i)
        lsh = attention_registry.decode_cache(name, options) == "lsh"
        if lsh and settings(dict(options), max_len)["chunk"] < max_len:
            return False, (
                f"LSH layer {i} is not the last and its chunk_len < max_len={max_len}: its "
                "sorted chunks move as the prefix grows, so a cache cannot reproduce the "
                "full forward (seqjax.decoding.lsh_cache)"
            )
    return True, ""
