"""The kernel bodies of ``pallas_blocks`` (forward, backward dK/dV, backward dQ).

FlashAttention-2's loops (Dao 2023, Alg. 1 forward, Alg. 2 backward with ``dS = P (dP -
delta)``) over a static key-block table: each program owns one query (or key) block of one
(batch, head) and visits the blocks its table row lists. ``cfg`` carries the tiles, the
mask and bias functions, and the dropout keep-scale (``numerics.dropout_keep``), all built
by ``pallas_blocks.block_sparse_attention``.

Legend: bq/bk block sizes, D head dim (Dv of the values), W table width.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from seqjax.attention import numerics

# ``dot`` moved from ``pallas`` to ``pallas.triton`` (JAX 0.8); take whichever exists.
_pl_dot = getattr(plgpu, "dot", None) or pl.dot

# Masked logits get this finite value, so that a block with no visible key never produces
# inf - inf; probabilities of masked entries are zeroed explicitly.
_NEG = -1e30


def element_mask(i, j, *, bq, bk, t, s, causal, offset, mask_fn, km_ref, qs_ref, ks_ref):
    """bool ``[bq, bk]`` mask of block (i, j) inside a kernel."""
    q_pos = i * bq + jnp.arange(bq, dtype=jnp.int32)
    k_pos = j * bk + jnp.arange(bk, dtype=jnp.int32)
    valid = (q_pos[:, None] < t) & (k_pos[None, :] < s)
    if causal:
        valid = valid & (k_pos[None, :] <= q_pos[:, None] + offset)
    if mask_fn is not None:
        extra = mask_fn(q_pos, k_pos)
        valid = valid & (extra.reshape(extra.shape[-2:]) if extra.ndim > 2 else extra)
    if km_ref is not None:
        valid = valid & (km_ref[pl.ds(j * bk, bk)] != 0)[None, :]
    if qs_ref is not None:
        sq = qs_ref[pl.ds(i * bq, bq)]
        sk = ks_ref[pl.ds(j * bk, bk)]
        valid = valid & (sq[:, None] == sk[None, :])
    return valid


def _dot(a, b, *, trans_a=False, trans_b=False):
    precision = jax.lax.Precision.HIGHEST if a.dtype == jnp.float32 else None
    return _pl_dot(a, b, trans_a=trans_a, trans_b=trans_b, precision=precision)


def fwd_kernel(table_ref, count_ref, q_ref, k_ref, v_ref, *refs, cfg):
    (km_ref, qs_ref, ks_ref), bias_refs, drop_ref, (o_ref, lse_ref) = cfg["aux"](refs)
    bh = (pl.program_id(1), pl.program_id(2))  # (batch, head) of this program
    i = pl.program_id(0)
    bq, bk, w = cfg["bq"], cfg["bk"], cfg["w"]
    q = q_ref[...]
    dv = v_ref.shape[-1]

    def body(n, carry):
        m, l, acc = carry
        j = table_ref[i * w + n]
        k = k_ref[pl.ds(j * bk, bk), :]
        v = v_ref[pl.ds(j * bk, bk), :]
        s_ = _dot(q, k, trans_b=True) * cfg["scale"]
        if bias_refs:
            s_ = s_ + cfg["bias"](i, j, *bias_refs)
        valid = cfg["mask"](i, j, km_ref=km_ref, qs_ref=qs_ref, ks_ref=ks_ref)
        s_ = jnp.where(valid, s_, _NEG)
        m_new = jnp.maximum(m, s_.max(axis=-1))
        p = jnp.where(valid, jnp.exp(s_ - m_new[:, None]), 0.0)
        corr = jnp.exp(m - m_new)
        l = l * corr + p.sum(axis=-1)
        if drop_ref is not None:  # dropout after the statistics (numerics.attend_logits)
            p = p * cfg["keep"](i, j, drop_ref, bh)
        acc = acc * corr[:, None] + _dot(p.astype(v.dtype), v)
        return m_new, l, acc

    init = (
        jnp.full((bq,), _NEG, jnp.float32),
        jnp.zeros((bq,), jnp.float32),
        jnp.zeros((bq, dv), jnp.float32),
    )
    out, lse = numerics.finish_online_softmax(*jax.lax.fori_loop(0, count_ref[i], body, init))
    o_ref[...] = out.astype(o_ref.dtype)
    lse_ref[...] = lse


def dkdv_kernel(t_table_ref, t_count_ref, q_ref, k_ref, v_ref, g_ref, lse_ref, dl_ref, *refs, cfg):
    (km_ref, qs_ref, ks_ref), bias_refs, drop_ref, (dk_ref, dv_ref, *dcoef_ref) = cfg["aux"](refs)
    bh = (pl.program_id(1), pl.program_id(2))  # (batch, head) of this program
    j = pl.program_id(0)
    bq, w = cfg["bq"], cfg["tw"]
    k = k_ref[...]
    v = v_ref[...]

    def body(n, carry):
        dk, dv, dcoef = carry
        i = t_table_ref[j * w + n]
        q = q_ref[pl.ds(i * bq, bq), :]
        g = g_ref[pl.ds(i * bq, bq), :]
        lse = lse_ref[pl.ds(i * bq, bq)]
        delta = dl_ref[pl.ds(i * bq, bq)]
        s_ = _dot(q, k, trans_b=True) * cfg["scale"]
        if bias_refs:
            s_ = s_ + cfg["bias"](i, j, *bias_refs)
        valid = cfg["mask"](i, j, km_ref=km_ref, qs_ref=qs_ref, ks_ref=ks_ref)
        p = jnp.where(valid, jnp.exp(s_ - lse[:, None]), 0.0)
        dp = _dot(g, v, trans_b=True)
        p_drop = p
        if drop_ref is not None:  # d out / d P goes through the same keep mask
            keep = cfg["keep"](i, j, drop_ref, bh)
            p_drop, dp = p * keep, dp * keep
        dv = dv + _dot(p_drop.astype(g.dtype), g, trans_a=True)
        ds_raw = p * (dp - delta[:, None])  # d loss / d (biased logits)
        if dcoef_ref:  # the learned table's cotangent: ds summed per bucket
            dcoef = dcoef + cfg["bias_grad"](i, j, bias_refs[0], ds_raw)
        ds = (ds_raw * cfg["scale"]).astype(q.dtype)
        dk = dk + _dot(ds, q, trans_a=True)
        return dk, dv, dcoef

    dcoef0 = jnp.zeros((cfg["coef_width"],), jnp.float32) if dcoef_ref else None
    init = (jnp.zeros(k.shape, jnp.float32), jnp.zeros(v.shape, jnp.float32), dcoef0)
    dk, dv, dcoef = jax.lax.fori_loop(0, t_count_ref[j], body, init)
    dk_ref[...] = dk.astype(dk_ref.dtype)
    dv_ref[...] = dv.astype(dv_ref.dtype)
    if dcoef_ref:
        dcoef_ref[0][...] = dcoef


def dq_kernel(table_ref, count_ref, q_ref, k_ref, v_ref, g_ref, lse_ref, dl_ref, *refs, cfg):
    (km_ref, qs_ref, ks_ref), bias_refs, drop_ref, (dq_ref,) = cfg["aux"](refs)
    bh = (pl.program_id(1), pl.program_id(2))  # (batch, head) of this program
    i = pl.program_id(0)
    bk, w = cfg["bk"], cfg["w"]
    q, g = q_ref[...], g_ref[...]
    lse, delta = lse_ref[...], dl_ref[...]

    def body(n, dq):
        j = table_ref[i * w + n]
        k = k_ref[pl.ds(j * bk, bk), :]
        v = v_ref[pl.ds(j * bk, bk), :]
        s_ = _dot(q, k, trans_b=True) * cfg["scale"]
        if bias_refs:
            s_ = s_ + cfg["bias"](i, j, *bias_refs)
        valid = cfg["mask"](i, j, km_ref=km_ref, qs_ref=qs_ref, ks_ref=ks_ref)
        p = jnp.where(valid, jnp.exp(s_ - lse[:, None]), 0.0)
        dp = _dot(g, v, trans_b=True)
        if drop_ref is not None:
            dp = dp * cfg["keep"](i, j, drop_ref, bh)
        ds = (p * (dp - delta[:, None]) * cfg["scale"]).astype(k.dtype)
        return dq + _dot(ds, k)

    dq = jax.lax.fori_loop(0, count_ref[i], body, jnp.zeros(q.shape, jnp.float32))
    dq_ref[...] = dq.astype(dq_ref.dtype)
