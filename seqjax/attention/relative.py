"""Transformer-XL relative positional attention (Dai et al. 2019, §3.3 and appendix B).

For query i (absolute position ``M + i`` after a memory of ``M = S - T`` positions) and key
j at distance ``d = M + i - j``:

    score(i, j) = [(q_i + u) . k_j  +  (q_i + v) . (W_R R_d)] / sqrt(D)      (eq. in §3.3)

terms (a)+(c) and (b)+(d) of the paper. ``R`` is the sinusoid embedding of the distance
(``[sin, cos]`` concatenated, Vaswani et al. §3.5) capped at ``clamp_len``; ``u`` and ``v``
are learned ``[H, D]`` biases (per layer with ``untie_r``, else shared by all layers).

The relative shift: ``BD_raw[i, m] = (q_i + v) . r[m]`` is computed against the ``S``
projected embeddings ordered by distance ``S-1 ... 0`` (row m has distance ``S-1-m``), and
``BD[i, j] = BD_raw[i, j + T - 1 - i]`` is taken with an exact gather (equivalent to the
reference code's pad-reshape trick, with no garbage entries: positions the trick fills with
garbage are the future ones the causal mask hides anyway).

Masks: causal (query i sees memory and segment positions ``j <= M + i``), optionally
``same_length`` (every query sees at most ``mem_len`` keys: distance ``< mem_len``, the
reference code's ``same_length`` band used for evaluation), key padding, segments.

Implementations (option ``implementation``), equal in values and gradients:
  * ``"reference"`` (default): materializes the ``[B, H, T, S]`` scores and the shift gather
    above; supports attention dropout and every JAX transformation.
  * ``"blockwise"``: ``seqjax.attention.relative_blockwise``: online softmax over key
    blocks, the shift done inside each block, blocks outside the causal / ``same_length``
    band skipped; memory linear in S. No attention dropout (asking for it raises).
  * ``"auto"``: ``blockwise``, or ``reference`` when attention dropout is on (the reason is
    logged once).

Legend: B batch, T segment (query) length, S = M + T key length, H heads, D head dim,
E = H * D width of the sinusoid embeddings.
"""

from __future__ import annotations

import functools
import logging

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from seqjax.attention import masks as masks_lib
from seqjax.attention import numerics, registry, relative_blockwise

log = logging.getLogger(__name__)

IMPLEMENTATIONS = ("reference", "blockwise", "auto")


def relative_sinusoid(klen: int, width: int, clamp_len: int = -1):
    """Sinusoid embeddings of distances ``klen-1 ... 0`` (descending), ``[klen, width]``.

    Distances above ``clamp_len`` (when ``clamp_len > 0``) use the embedding of
    ``clamp_len`` (Transformer-XL evaluation with a long memory).
    """
    dist = jnp.arange(klen - 1, -1, -1, dtype=jnp.float32)
    if clamp_len > 0:
        dist = jnp.minimum(dist, float(clamp_len))
    inv_freq = 1.0 / (10000.0 ** (jnp.arange(0.0, width, 2.0) / width))
    angle = dist[:, None] * inv_freq[None, :]
    return jnp.concatenate([jnp.sin(angle), jnp.cos(angle)], axis=-1)


def rel_shift_gather(bd_raw_BHTS):
    """``out[..., i, j] = bd_raw[..., i, j + T - 1 - i]`` (clipped; future entries are masked)."""
    t, s = bd_raw_BHTS.shape[-2:]
    idx_TS = jnp.arange(s)[None, :] + (t - 1) - jnp.arange(t)[:, None]
    idx_TS = jnp.clip(idx_TS, 0, s - 1)
    idx = jnp.broadcast_to(idx_TS, bd_raw_BHTS.shape)
    return jnp.take_along_axis(bd_raw_BHTS, idx, axis=-1)


def relative_attention(
    q,
    k,
    v,
    *,
    r,
    r_w_bias,
    r_r_bias,
    causal=True,
    mask=None,
    segment_ids=None,
    same_length=False,
    mem_len=0,
    clamp_len=-1,
    untie_r=False,
    scale=None,
    dropout_rate=0.0,
    dropout_rng=None,
    implementation="reference",
    block_q=relative_blockwise.BLOCK_Q,
    block_k=relative_blockwise.BLOCK_K,
):
    """Transformer-XL attention (see module docstring).

    Args:
      q: ``[B, T, H, D]`` queries of the current segment.
      k, v: ``[B, S, H, D]`` keys/values over ``[memory; segment]``.
      r: ``[S, H, D]`` projected relative embeddings ``W_R R`` for distances S-1 ... 0.
      r_w_bias: ``u``, ``[H, D]``; r_r_bias: ``v``, ``[H, D]``.
      causal: must be True (Transformer-XL is a decoder).
      same_length: restrict every query to its ``mem_len`` most recent keys.
      mem_len: the configured memory length (used by ``same_length``).
      clamp_len, untie_r: consumed where ``r`` and the biases are built (the module hooks);
        accepted here so the options of the mechanism are one set.
      implementation: one of ``IMPLEMENTATIONS``.
      block_q, block_k: block sizes of ``"blockwise"``.

    Returns:
      ``[B, T, H, D]``.
    """
    del clamp_len, untie_r
    registry.check_qkv(q, k, v)
    if not causal:
        raise ValueError("relative (Transformer-XL) attention is causal; causal=False is invalid")
    numerics.check_dropout(dropout_rate, dropout_rng)
    b, t, h, d = q.shape
    s = k.shape[1]
    if r.shape[0] != s or r.shape[1:] != (h, d):
        raise ValueError(f"r must have shape [seq_k, heads, head_dim] = {(s, h, d)}; got {r.shape}")
    if same_length and mem_len <= 0:
        raise ValueError("same_length=True needs mem_len > 0 (the window every query sees)")
    _check_implementation(implementation, block_q, block_k)
    if implementation == "auto":
        implementation = "blockwise"
        if dropout_rate > 0.0:
            implementation = "reference"
            _log_auto_choice("attention dropout (blockwise has none)")
    if implementation == "blockwise":
        if dropout_rate > 0.0:
            raise ValueError(
                f"relative implementation 'blockwise' has no attention dropout (dropout_rate="
                f"{dropout_rate}); use implementation 'reference' or 'auto', or set the "
                "attention dropout to 0"
            )
        return relative_blockwise.relative_blockwise_attention(
            q, k, v, r=r, r_w_bias=r_w_bias, r_r_bias=r_r_bias, mask=mask,
            segment_ids=segment_ids, same_length=same_length, mem_len=mem_len, scale=scale,
            block_q=block_q, block_k=block_k,
        )  # fmt: skip
    scale = numerics.default_scale(scale, d)
    f32 = jnp.float32
    with jax.named_scope("content_scores"):
        qw_BTHD = q + r_w_bias.astype(q.dtype)[None, None]
        ac_BHTS = jnp.einsum("bthd,bshd->bhts", qw_BTHD, k, preferred_element_type=f32)
    with jax.named_scope("position_scores"):
        bd_raw_BHTS = jnp.einsum(
            "bthd,shd->bhts",
            q + r_r_bias.astype(q.dtype)[None, None],
            r.astype(q.dtype),
            preferred_element_type=f32,
        )
        logits_BHTS = (ac_BHTS + rel_shift_gather(bd_raw_BHTS)) * scale
    valid = masks_lib.dense_mask(b, t, s, causal=True, mask=mask, segment_ids=segment_ids)
    if same_length:
        dist_TS = (s - t) + jnp.arange(t)[:, None] - jnp.arange(s)[None, :]
        valid = valid & (dist_TS < mem_len)[None, None]
    return numerics.attend_logits(
        logits_BHTS, v, valid, dropout_rate=dropout_rate, dropout_rng=dropout_rng,
        out_dtype=q.dtype,
    )  # fmt: skip


def _check_implementation(implementation, block_q, block_k) -> None:
    """One-line errors naming the option and its valid values."""
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(
            f"relative option implementation={implementation!r} is not one of {IMPLEMENTATIONS}"
        )
    for name, val in (("block_q", block_q), ("block_k", block_k)):
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 1:
            raise ValueError(f"relative option {name}={val!r} is invalid; valid: an integer >= 1")


@functools.lru_cache(maxsize=8)
def _log_auto_choice(why: str) -> None:
    log.info("relative attention 'auto' uses 'reference': %s", why)


def _validate(options: dict, seq_len: int) -> None:
    """Config-time check of the option values (``registry.Mechanism.validate``)."""
    del seq_len
    _check_implementation(
        options.get("implementation", "reference"),
        options.get("block_q", relative_blockwise.BLOCK_Q),
        options.get("block_k", relative_blockwise.BLOCK_K),
    )


def _bias_params(module, h: int, d: int) -> dict:
    init = nn.with_logical_partitioning(nn.initializers.normal(0.02), ("heads", "kv"))
    return {
        "r_w_bias": module.param("r_w_bias", init, (h, d)),
        "r_r_bias": module.param("r_r_bias", init, (h, d)),
    }


def _module_params(module, *, q, k, v, options):
    """Per layer: ``W_R`` projecting the sinusoids to heads, and u/v when ``untie_r``."""
    del v
    _, t, h, d = q.shape
    s = k.shape[1]
    r_SE = relative_sinusoid(s, h * d, options.get("clamp_len", -1))
    # W_R, stored as [E, H, D] so its logical names apply under sharding rules.
    w_r_EHD = module.param(
        "r_net",
        nn.with_logical_partitioning(
            nn.initializers.variance_scaling(
                1.0, "fan_in", "truncated_normal", in_axis=0, out_axis=(1, 2)
            ),
            ("embed", "heads", "kv"),
        ),
        (h * d, h, d),
    )
    r_SHD = jnp.einsum("se,ehd->shd", r_SE, w_r_EHD)
    out = {"r": r_SHD}
    if options.get("untie_r", False):
        out.update(_bias_params(module, h, d))
    return out


def _model_params(module, *, cfg, options):
    """u/v shared by every layer (the paper's default) unless ``untie_r``."""
    if options.get("untie_r", False):
        return {}
    return _bias_params(module, cfg.num_heads, cfg.dim_head)


registry.register(
    registry.Mechanism(
        name="relative",
        fn=relative_attention,
        module_params=_module_params,
        model_params=_model_params,
        options=("same_length", "mem_len", "clamp_len", "untie_r", "r", "r_w_bias", "r_r_bias")
        + ("implementation", "block_q", "block_k"),
        validate=_validate,
        doc="Transformer-XL relative positional attention over [memory; segment] (Dai et al. "
        "2019); reference | blockwise | auto",
        memory_model="Transformer-XL's relative attention needs its recurrent memory model",
        packing="Transformer-XL's memory carries the previous segment's states into the next",
        context_parallel_refusal="Transformer-XL's relative attention shifts position scores "
        "across the whole segment and attends to a memory of earlier segments, neither of "
        "which is split along the sequence",
    )
)
