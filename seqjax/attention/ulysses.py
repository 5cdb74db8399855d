"""All-to-all sequence parallelism (DeepSpeed-Ulysses, Jacobs et al. 2023, §3.1) for dense
attention: an ``all_to_all`` turns sequence shards into head shards, each device runs exact
chunked attention over the whole sequence for its heads, and a second ``all_to_all`` turns
the result back. The ring alternative and the choice between them: ``ring.py``.
"""

from __future__ import annotations

import jax
from jax.sharding import PartitionSpec as P

from seqjax.attention import blockwise, numerics
from seqjax.attention.ring import AXIS, _check, _normalize, _specs, axis_size, local_heads


def ulysses_attention(
    q,
    k,
    v,
    *,
    causal=False,
    mask=None,
    segment_ids=None,
    scale=None,
    dropout_rate=0.0,
    dropout_rng=None,
    block_q=512,
    block_k=512,
):
    """All-to-all (DeepSpeed-Ulysses) attention over the ambient mesh's ``sequence`` axis.

    Args and returns as ``ring_attention``.

    Raises:
      ValueError: when ``T != S``, T is not a multiple of ``n``, or the heads per
        tensor-parallel shard are not a multiple of ``n``.
    """

    n = axis_size()
    if n == 1:  # no sequence axis (or of size 1): one device's chunked attention
        return blockwise.chunked_attention(
            q, k, v, causal=causal, mask=mask, segment_ids=segment_ids, scale=scale,
            dropout_rate=dropout_rate, dropout_rng=dropout_rng, block_q=block_q,
            block_k=block_k,
        )  # fmt: skip
    _check(q, k, False, n, "ulysses")
    h = local_heads(q.shape[2])
    if h % n:
        raise ValueError(
            f"dense implementation 'ulysses' needs the heads per device ({h}) to be a multiple "
            f"of sequence={n}; use implementation 'ring' (or 'auto')"
        )
    numerics.check_dropout(dropout_rate, dropout_rng)
    km, q_seg, kv_seg = _normalize(q, k, mask, segment_ids)
    rng = dropout_rng if dropout_rate > 0.0 else None

    def body(q, k, v, km, q_seg, kv_seg, rng):
        def to_heads(x):  # [B, Tl, H, D] -> [B, T, H/n, D]
            return jax.lax.all_to_all(x, AXIS, split_axis=2, concat_axis=1, tiled=True)

        def gather(x):
            return None if x is None else jax.lax.all_gather(x, AXIS, axis=1, tiled=True)

        segs = None if q_seg is None else (gather(q_seg), gather(kv_seg))
        if rng is not None:
            rng = jax.random.fold_in(rng, jax.lax.axis_index(AXIS))
        out = blockwise.chunked_attention(
            to_heads(q),
            to_heads(k),
            to_heads(v),
            causal=causal,
            mask=gather(km),
            segment_ids=segs,
            scale=scale,
            dropout_rate=dropout_rate,
            dropout_rng=rng,
            block_q=block_q,
            block_k=block_k,
        )
        return jax.lax.all_to_all(out, AXIS, split_axis=1, concat_axis=2, tiled=True)

    args = (q, k, v, km, q_seg, kv_seg)
    fn = jax.shard_map(
        body,
        in_specs=(*_specs(*args), None if rng is None else P()),
        out_specs=P(None, AXIS),
        axis_names={AXIS},
        check_vma=False,
    )
    return fn(*args, rng)
