"""Additive attention (Bahdanau et al. 2015, App. A.1.2) as a mechanism of the one attention
interface: per head ``h``, ``score(i, j) = v_hᵀ tanh(q_i + k_j)``, where ``q_i = W q`` and
``k_j = U h_j`` are the layer's own query and key projections (the ``W`` and ``U`` of
``vᵀ tanh(W q + U h_j)``) and ``v_h`` ``[D]`` is the mechanism's parameter
(``additive_v``, ``[H, D]``, created by the ``module_params`` hook). The scores then go
through the common masked softmax (``numerics.attend_logits``), so a Transformer runs with
it exactly as with scaled dot products (``model.attention="additive"``).

It materializes ``tanh(q_i + k_j)`` for every pair: ``O(B T S H D)`` memory, a reference
mechanism for short sequences (the comparison against dot products is the point).

Legend: B batch, T queries, S keys, H heads, D head dim.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from seqjax.attention import masks, numerics, registry


def additive_attention(
    q,
    k,
    v,
    *,
    causal=False,
    mask=None,
    segment_ids=None,
    dropout_rate=0.0,
    dropout_rng=None,
    scale=None,
    additive_v=None,
):
    """``softmax_j(v_hᵀ tanh(q_i + k_j)) V`` per head (module docstring).

    Args:
      q: ``[B, T, H, D]``; k: ``[B, S, H, D]``; v: ``[B, S, H, Dv]``.
      causal, mask, segment_ids, dropout_rate, dropout_rng: the common keywords.
      scale: multiplies the scores when given (None: 1; the tanh already bounds them).
      additive_v: ``[H, D]``, the score vector of every head.
    """
    if additive_v is None:
        raise ValueError(
            "additive attention needs its parameter additive_v [heads, head_dim]: run it "
            "through MultiHeadAttention (module_params creates it) or pass additive_v"
        )
    b, t, h, d = q.shape
    s = k.shape[1]
    if additive_v.shape != (h, d):
        raise ValueError(f"additive_v must be [heads, head_dim] = {(h, d)}; got {additive_v.shape}")
    hidden_BTSHD = jnp.tanh(q.astype(jnp.float32)[:, :, None] + k.astype(jnp.float32)[:, None, :])
    logits_BHTS = jnp.einsum("btshd,hd->bhts", hidden_BTSHD, additive_v.astype(jnp.float32))
    if scale is not None:
        logits_BHTS = logits_BHTS * scale
    valid = masks.dense_mask(b, t, s, causal=causal, mask=mask, segment_ids=segment_ids)
    return numerics.attend_logits(
        logits_BHTS, v, valid, dropout_rate=dropout_rate, dropout_rng=dropout_rng,
        out_dtype=q.dtype,
    )  # fmt: skip


def _module_params(module, *, q, k, v, options):
    del k, v, options
    _, _, h, d = q.shape
    init = nn.initializers.normal(stddev=d**-0.5)
    additive_v = module.param(
        "additive_v", nn.with_logical_partitioning(init, ("heads", "kv")), (h, d)
    )
    return {"additive_v": additive_v}


registry.register(
    registry.Mechanism(
        name="additive",
        fn=additive_attention,
        module_params=_module_params,
        doc="additive scores v_h^T tanh(q_i + k_j) (Bahdanau et al. 2015) in the Transformer",
    )
)
