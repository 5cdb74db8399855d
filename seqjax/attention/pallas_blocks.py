"""Pallas kernels for exact block-sparse attention over a static block table.

The same contract as the plain-JAX engine ``seqjax.attention.blockwise.blockwise_attention``
(one key-block table, an element mask evaluated inside visited blocks, the log-sum-exp as a
differentiable second output), written as three Pallas kernels:

* forward: grid ``(nq, B, H)``; query block i loops over the ``count[i]`` key blocks of its
  table row with the online softmax (Dao et al. 2022, Alg. 1; statistics in float32) and
  writes ``out`` and ``lse``;
* backward ``dK, dV``: grid ``(nk, B, H)``; key block j loops over the query blocks that use
  it (the transposed table) and accumulates ``dV = P^T dO`` and ``dK = dS^T Q``
  (Dao 2023, Alg. 2, with ``dS = P * (dP - delta)``);
* backward ``dQ``: grid ``(nq, B, H)``; query block i loops over its table row again and
  accumulates ``dQ = dS K`` (a separate kernel, so no atomics are needed).

Only the listed (query block, key block) pairs are ever loaded or multiplied, so the cost is
proportional to the number of table entries: this is what makes a Sparse Transformer
pattern cheaper than dense attention on an accelerator.

On GPUs the kernels lower through Triton; everywhere else (and in CI) they run in Pallas
interpret mode (``interpret=True``), which executes the same kernel body with ``jax.numpy``.
Attention dropout is not supported here (callers fall back to the plain-JAX engine).
On a multi-device mesh the kernels run under ``shard_map`` over the batch (as the logical
rules split ``"batch"``; ``splash.mesh_split``): XLA cannot partition an opaque kernel and
would otherwise run the whole batch on every device.

Legend: B batch, T query length, S key length, H heads, D head dim, bq/bk block sizes,
nq/nk query/key blocks, W table width.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu
from jax.sharding import PartitionSpec as P

from seqjax.attention import blockwise, numerics, splash
from seqjax.attention import masks as masks_lib
from seqjax.attention import score_mod as score_mod_lib

# ``dot`` moved from ``pallas`` to ``pallas.triton`` (JAX 0.8); take whichever exists.
_pl_dot = getattr(plgpu, "dot", None) or pl.dot

# Masked logits get this finite value, so that a block with no visible key never produces
# inf - inf; probabilities of masked entries are zeroed explicitly.
_NEG = -1e30


def default_interpret() -> bool:
    """Interpret mode everywhere but on a GPU (where the kernels lower through Triton)."""
    return jax.default_backend() != "gpu"


def supported(
    q, k, v, *, block_q: int, block_k: int, table, dropout_rate=0.0, score_mod=None
) -> str | None:
    """Why the kernels cannot run these inputs (None when they can).

    Triton needs power-of-two tiles of at least 16 rows and a head dim that is a power of two.
    A score modification must have a kernel form (ALiBi, T5 bias; ``score_mod.KernelForm``).
    """
    if dropout_rate > 0.0:
        return "attention dropout is not implemented in the Pallas kernels"
    if score_mod is not None and score_mod.form is None:
        return (
            "the score modification has no kernel form (the kernels compute only the ALiBi "
            "and T5 biases of score_mod.alibi / score_mod.t5_bias, not a remapped or custom one)"
        )
    d, dv = q.shape[-1], v.shape[-1]
    for name, x in (("head dim", d), ("value head dim", dv)):
        if x < 16 or x & (x - 1):
            return f"{name} {x} is not a power of two >= 16"
    single = table.shape == (1, 1)
    for name, x in (("block_q", block_q), ("block_k", block_k)):
        if not single and (x < 16 or x & (x - 1)):
            return f"{name} {x} is not a power of two >= 16"
    return None


def _pow2_at_least_16(n: int) -> int:
    return max(16, 1 << (int(n) - 1).bit_length())


def _element_mask(i, j, *, bq, bk, t, s, causal, offset, mask_fn, km_ref, qs_ref, ks_ref):
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


def _fwd_kernel(table_ref, count_ref, q_ref, k_ref, v_ref, *refs, cfg):
    (km_ref, qs_ref, ks_ref), bias_refs, (o_ref, lse_ref) = cfg["aux"](refs)
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


def _dkdv_kernel(t_table_ref, t_count_ref, q_ref, k_ref, v_ref, g_ref, lse_ref, dl_ref, *refs, cfg):
    (km_ref, qs_ref, ks_ref), bias_refs, (dk_ref, dv_ref, *dcoef_ref) = cfg["aux"](refs)
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
        dv = dv + _dot(p.astype(g.dtype), g, trans_a=True)
        dp = _dot(g, v, trans_b=True)
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


def _dq_kernel(table_ref, count_ref, q_ref, k_ref, v_ref, g_ref, lse_ref, dl_ref, *refs, cfg):
    (km_ref, qs_ref, ks_ref), bias_refs, (dq_ref,) = cfg["aux"](refs)
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
        ds = (p * (dp - delta[:, None]) * cfg["scale"]).astype(k.dtype)
        return dq + _dot(ds, k)

    dq = jax.lax.fori_loop(0, count_ref[i], body, jnp.zeros(q.shape, jnp.float32))
    dq_ref[...] = dq.astype(dq_ref.dtype)


def _flat_table(table: np.ndarray) -> jax.Array:
    """Row-major flat table, zero-padded to a power of two (Triton block shapes)."""
    flat = np.ascontiguousarray(table, np.int32).reshape(-1)
    return jnp.asarray(np.pad(flat, (0, _pow2_at_least_16(flat.size) - flat.size)))


def _counts(count: np.ndarray) -> jax.Array:
    count = np.asarray(count, np.int32)
    return jnp.asarray(np.pad(count, (0, _pow2_at_least_16(count.size) - count.size)))


def block_sparse_attention(
    q,
    k,
    v,
    *,
    table: np.ndarray,
    count: np.ndarray,
    block_q: int,
    block_k: int,
    causal: bool = False,
    mask=None,
    segment_ids=None,
    mask_fn: blockwise.MaskFn | None = None,
    scale: float | None = None,
    dropout_rate: float = 0.0,
    dropout_rng=None,
    return_lse: bool = False,
    interpret: bool | None = None,
    num_warps: int | None = None,
    num_stages: int = 2,
    score_mod=None,
):
    """Exact attention restricted to the key blocks of ``table``, as Pallas kernels.

    Arguments and results are those of ``blockwise.blockwise_attention`` (the plain-JAX
    engine it is tested against), plus the kernel settings:

    Args:
      interpret: run the kernels in Pallas interpret mode (default: everywhere but on GPU).
      num_warps, num_stages: Triton launch settings on GPU.
      score_mod: optional ALiBi or T5 bias (``seqjax.attention.score_mod``, with a
        ``KernelForm``), computed inside the kernels from (query position, key position,
        head); the T5 table's gradient is summed per bucket in the dK/dV kernel.

    Raises:
      ValueError: for inputs the kernels do not support (see ``supported``).
    """
    b, t, h, d = q.shape
    s = k.shape[1]
    if table.shape == (1, 1) and (block_q & (block_q - 1) or block_q < 16):
        # One dense block (e.g. the Sparse Transformer's column part): any tile size works,
        # so round it up to a power of two; positions past t / s are masked.
        block_q = block_k = _pow2_at_least_16(max(block_q, block_k))
    why = supported(q, k, v, block_q=block_q, block_k=block_k, table=table,
                    dropout_rate=dropout_rate, score_mod=score_mod)  # fmt: skip
    if why is not None:
        raise ValueError(f"Pallas block-sparse attention: {why}")
    del dropout_rng
    interpret = default_interpret() if interpret is None else interpret
    blockwise._check_not_forward_mode(q, k, v)
    bq, bk = block_q, block_k
    nq, nk = -(-t // bq), -(-s // bk)
    if table.shape[0] != nq:
        raise ValueError(f"block table has {table.shape[0]} rows, expected {nq}")
    scale = float(numerics.default_scale(scale, d))
    key_mask = masks_lib.check_key_mask(mask, b, s)
    q_seg, kv_seg = masks_lib.split_segment_ids(segment_ids, t, s)
    t_table, t_count = blockwise.transpose_table(table, count, nk)

    pad = numerics.pad_to
    qp, kp, vp = pad(q, nq * bq), pad(k, nk * bk), pad(v, nk * bk)
    aux_arrays, has_km, has_seg = [], key_mask is not None, q_seg is not None
    if has_km:
        km = jnp.broadcast_to(key_mask, (b, s)).astype(jnp.int32)
        aux_arrays.append(pad(km, nk * bk))
    if has_seg:
        aux_arrays += [
            pad(q_seg.astype(jnp.int32), nq * bq),
            pad(kv_seg.astype(jnp.int32), nk * bk),
        ]

    has_bias = score_mod is not None
    form = score_mod.form if has_bias else None
    learned = has_bias and form.scheme == "t5_bias"
    # Bias inputs: the query offset (int32 [16], entry 0) and the per-head coefficients
    # [H, cw] (ALiBi's slope in column 0, or the T5 table's column of the head).
    cw = _pow2_at_least_16(form.num_buckets if learned else 1)
    bias_args = ()
    if has_bias:
        off = jnp.zeros((16,), jnp.int32) + jnp.asarray(score_mod.q_offset, jnp.int32)
        bias_args = (score_mod.params, off)

    def coefficients(params):
        c_NH = score_mod.coefficients(params).reshape(-1, h)  # [1 | N, H]
        return jnp.pad(c_NH.T, ((0, 0), (0, cw - c_NH.shape[0])))

    def aux(refs):
        rest = list(refs)
        km_ref = rest.pop(0) if has_km else None
        qs_ref, ks_ref = (rest.pop(0), rest.pop(0)) if has_seg else (None, None)
        bias_refs = (rest.pop(0), rest.pop(0)) if has_bias else ()
        return (km_ref, qs_ref, ks_ref), bias_refs, tuple(rest)

    def positions(i, j, off_ref):
        q_pos = off_ref[0] + i * bq + jnp.arange(bq, dtype=jnp.int32)
        return q_pos, j * bk + jnp.arange(bk, dtype=jnp.int32)

    def block_bias(i, j, off_ref, coef_ref):  # float32 [bq, bk] of this program's head
        q_pos, k_pos = positions(i, j, off_ref)
        return score_mod_lib.kernel_bias(form, q_pos, k_pos, lambda n: coef_ref[n])

    def block_bias_grad(i, j, off_ref, ds_raw):  # float32 [cw]: ds summed per T5 bucket
        q_pos, k_pos = positions(i, j, off_ref)
        return score_mod_lib.kernel_bias_grad(form, q_pos, k_pos, ds_raw, cw)

    mask_block = functools.partial(
        _element_mask,
        bq=bq,
        bk=bk,
        t=t,
        s=s,
        causal=causal,
        offset=masks_lib.causal_offset(t, s),
        mask_fn=mask_fn,
    )
    cfg = dict(bq=bq, bk=bk, w=table.shape[1], tw=t_table.shape[1], scale=scale, aux=aux,
               mask=mask_block, bias=block_bias, bias_grad=block_bias_grad,
               coef_width=cw)  # fmt: skip
    params = None
    if not interpret:
        warps = num_warps or (4 if max(d, bq, bk) <= 64 else 8)
        params = plgpu.CompilerParams(num_warps=warps, num_stages=num_stages)
    call = functools.partial(pl.pallas_call, interpret=interpret, compiler_params=params)

    def full(x):  # the whole (small) array in every program
        return pl.BlockSpec(x.shape, lambda *_: (0,) * x.ndim)

    def rows(size, dim):  # [B, N, H, dim] -> one (b, h) slab of ``size`` rows at block r
        return pl.BlockSpec((None, size, None, dim), lambda r, bi, hi: (bi, r, hi, 0))

    def seq(size, dim):  # [B, N, H, dim] -> the whole sequence of (b, h)
        return pl.BlockSpec((None, size, None, dim), lambda r, bi, hi: (bi, 0, hi, 0))

    def stat(size):  # [B, H, N] -> a block of ``size`` rows of (b, h) at block r
        return pl.BlockSpec((None, None, size), lambda r, bi, hi: (bi, hi, r))

    def stat_all(size):
        return pl.BlockSpec((None, None, size), lambda r, bi, hi: (bi, hi, 0))

    def aux_specs():
        specs = []
        if has_km:
            specs.append(pl.BlockSpec((None, nk * bk), lambda r, bi, hi: (bi, 0)))
        if has_seg:
            specs.append(pl.BlockSpec((None, nq * bq), lambda r, bi, hi: (bi, 0)))
            specs.append(pl.BlockSpec((None, nk * bk), lambda r, bi, hi: (bi, 0)))
        if has_bias:  # the offset whole, the coefficients of head hi
            specs.append(pl.BlockSpec((16,), lambda *_: (0,)))
            specs.append(pl.BlockSpec((None, cw), lambda r, bi, hi: (hi, 0)))
        return specs

    def kernel_inputs(aux_in, params):
        if not has_bias:
            return aux_in
        *masks_in, off = aux_in
        return (*masks_in, off, coefficients(params))

    tab, cnt = _flat_table(table), _counts(count)
    ttab, tcnt = _flat_table(t_table), _counts(t_count)
    dv_dim = v.shape[-1]

    def forward(qp, kp, vp, aux_in, params=None):
        qp, kp, vp = blockwise._first_order_only((qp, kp, vp))  # no second derivatives
        b = qp.shape[0]  # this device's batch under shard_map
        out, lse = call(
            functools.partial(_fwd_kernel, cfg=cfg),
            grid=(nq, b, h),
            in_specs=[full(tab), full(cnt), rows(bq, d), seq(nk * bk, d), seq(nk * bk, dv_dim)]
            + aux_specs(),
            out_specs=[rows(bq, dv_dim), stat(bq)],
            out_shape=[
                jax.ShapeDtypeStruct((b, nq * bq, h, dv_dim), q.dtype),
                jax.ShapeDtypeStruct((b, h, nq * bq), jnp.float32),
            ],
            name="seqjax_block_sparse_fwd",
        )(tab, cnt, qp, kp, vp, *kernel_inputs(aux_in, params))
        return out, lse

    def backward(res, cotangents):
        if has_bias:
            qp, kp, vp, aux_in, params, out, lse = res
        else:
            (qp, kp, vp, aux_in, out, lse), params = res, None
        g, g_lse = cotangents
        b = qp.shape[0]
        qp, kp, vp, g, g_lse = blockwise._first_order_only((qp, kp, vp, g, g_lse))
        g = g.astype(qp.dtype)
        rowsum = jnp.einsum("bqhd,bqhd->bhq", g.astype(jnp.float32), out.astype(jnp.float32))
        delta, lse_safe = numerics.backward_stats(rowsum, lse, g_lse)
        dcoef_spec, dcoef_shape = [], []
        if learned:  # per (key block, batch, head) partial sums of the table's cotangent
            dcoef_spec = [pl.BlockSpec((None, None, None, cw), lambda r, bi, hi: (r, bi, hi, 0))]
            dcoef_shape = [jax.ShapeDtypeStruct((nk, b, h, cw), jnp.float32)]
        kernel_in = kernel_inputs(aux_in, params)
        dk, dv, *dcoef = call(
            functools.partial(_dkdv_kernel, cfg=cfg),
            grid=(nk, b, h),
            in_specs=[
                full(ttab),
                full(tcnt),
                seq(nq * bq, d),
                rows(bk, d),
                rows(bk, dv_dim),
                seq(nq * bq, dv_dim),
                stat_all(nq * bq),
                stat_all(nq * bq),
            ]
            + aux_specs(),
            out_specs=[rows(bk, d), rows(bk, dv_dim), *dcoef_spec],
            out_shape=[
                jax.ShapeDtypeStruct(kp.shape, kp.dtype),
                jax.ShapeDtypeStruct(vp.shape, vp.dtype),
                *dcoef_shape,
            ],
            name="seqjax_block_sparse_dkdv",
        )(ttab, tcnt, qp, kp, vp, g, lse_safe, delta, *kernel_in)
        (dq,) = call(
            functools.partial(_dq_kernel, cfg=cfg),
            grid=(nq, b, h),
            in_specs=[
                full(tab),
                full(cnt),
                rows(bq, d),
                seq(nk * bk, d),
                seq(nk * bk, dv_dim),
                rows(bq, dv_dim),
                stat(bq),
                stat(bq),
            ]
            + aux_specs(),
            out_specs=[rows(bq, d)],
            out_shape=[jax.ShapeDtypeStruct(qp.shape, qp.dtype)],
            name="seqjax_block_sparse_dq",
        )(tab, cnt, qp, kp, vp, g, lse_safe, delta, *kernel_in)
        grads = dq, dk, dv, tuple(None for _ in aux_in)
        if not has_bias:
            return grads
        if not learned:
            return (*grads, jax.tree.map(jnp.zeros_like, params))
        dtable_NH = dcoef[0].sum((0, 1))[:, : form.num_buckets].T
        return (*grads, dtable_NH.astype(params.dtype))

    def attend(qp, kp, vp, *args):
        if not has_bias:
            return blockwise.call_with_vjp(forward, backward, qp, kp, vp, tuple(args))
        params, off, aux_in = args[0], args[1], tuple(args[2:])
        return blockwise.call_with_vjp_params(forward, backward, qp, kp, vp, (*aux_in, off), params)

    split = splash.mesh_split(b, h, same_heads=False)
    if split and split.batch:  # XLA would run an opaque kernel whole on every device
        x_spec, aux_spec = P(split.batch, None, None, None), P(split.batch, None)
        attend = jax.shard_map(
            attend,
            mesh=split.mesh,
            in_specs=(x_spec,) * 3 + (P(),) * len(bias_args) + (aux_spec,) * len(aux_arrays),
            out_specs=(x_spec, P(split.batch, None, None)),
            check_vma=False,
        )
    out, lse_BHT = attend(qp, kp, vp, *bias_args, *aux_arrays)
    out = out[:, :t]
    if not return_lse:
        return out
    return out, lse_BHT[:, :, :t]
