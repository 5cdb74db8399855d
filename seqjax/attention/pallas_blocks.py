"""Pallas kernels for exact block-sparse attention over a static block table.

Tiles come from ``plan`` (``seqjax.attention.pallas_plan``: the largest tiles whose shared
memory fits the device); head dims that are not powers of two are zero-padded inside.

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
Attention dropout is applied inside the kernels with the counter-based keep mask of
``numerics.dropout_keep`` (a hash of seed, batch, head, query, key), the mask the plain-JAX
engines draw, so kernel == ``chunked`` == ``reference`` with dropout too.
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

from seqjax.attention import blockwise, numerics, pallas_plan, splash
from seqjax.attention import masks as masks_lib
from seqjax.attention import pallas_kernels as kernels
from seqjax.attention import score_mod as score_mod_lib

plan = pallas_plan.plan  # the tile planner every Pallas caller uses (public API)


def default_interpret() -> bool:
    """Interpret mode everywhere but on a GPU (where the kernels lower through Triton)."""
    return jax.default_backend() != "gpu"


def supported(
    q, k, v, *, block_q: int, block_k: int, table, dropout_rate=0.0, score_mod=None
) -> str | None:
    """Why the kernels cannot run these inputs (None when they can).

    Triton needs power-of-two tiles of at least 16 rows (a one-block table is re-tiled by
    the planner, so any block size works there); head dims that are not powers of two are
    zero-padded inside (``pallas_plan.pow2_at_least_16``) up to ``pallas_plan.MAX_HEAD_DIM``.
    A score modification must have a kernel form (ALiBi, T5 bias; ``score_mod.KernelForm``).
    """
    if score_mod is not None and score_mod.form is None:
        return (
            "the score modification has no kernel form (the kernels compute only the ALiBi "
            "and T5 biases of score_mod.alibi / score_mod.t5_bias, not a remapped or custom one)"
        )
    why = pallas_plan.check_head_dims(q.shape[-1], v.shape[-1])
    if why is not None:
        return why
    if _single_block(table):
        return None
    for name, x in (("block_q", block_q), ("block_k", block_k)):
        if x < 16 or x & (x - 1):
            return f"{name} {x} is not a power of two >= 16"
    return None


def learned_bias(score_mod) -> bool:
    """Whether the kernels carry a learned bias table (T5's: its gradient in dK/dV)."""
    return (
        score_mod is not None
        and score_mod.form is not None
        and (score_mod.form.scheme == "t5_bias")
    )


def _single_block(table) -> bool:
    return tuple(np.shape(table)) == (1, 1)


_pow2_at_least_16 = pallas_plan.pow2_at_least_16


def _retile_single_block(count, t: int, s: int, bq: int, bk: int, causal: bool):
    """The dense (or causal) table of ``bq x bk`` tiles standing for one whole block."""
    nq, nk = -(-t // bq), -(-s // bk)
    table, new_count = blockwise.dense_table(
        nq, nk, bq, bk, causal=causal, offset=masks_lib.causal_offset(t, s)
    )
    if int(np.asarray(count).reshape(-1)[0]) == 0:  # the one block was empty
        new_count = np.zeros_like(new_count)
    return table, new_count


def _launch_settings(dtype, d, dv, bq, bk, num_warps, num_stages, *, check: bool, learned=False):
    """``(num_warps, num_stages)``: given values, else the deepest pipeline whose shared
    memory fits the device (``pallas_plan``). With ``check`` (compiling for a GPU), tiles
    that fit no pipeline depth raise before anything compiles."""
    dp, dvp = pallas_plan.pow2_at_least_16(d), pallas_plan.pow2_at_least_16(dv)
    itemsize = np.dtype(dtype).itemsize
    budget = pallas_plan.device_budget()
    stages = (num_stages,) if num_stages else pallas_plan.STAGES

    def need(st):
        smem = pallas_plan.smem_of(bq, bk, dp, dvp, itemsize, st, learned_bias=learned)
        return max(smem.values())

    fitting = [st for st in stages if need(st) <= budget]
    if check and not fitting:
        best = pallas_plan.plan(
            bq, bk, d, dv, dtype=dtype, budget=budget, learned_bias=learned
        ).block_q
        raise ValueError(
            f"Pallas block-sparse attention: tiles {bq}x{bk} at head dims {d}/{dv} in "
            f"{np.dtype(dtype).name} need {need(stages[-1])} bytes of shared memory, above this "
            f"device's {budget}; use tiles <= {best} (seqjax.attention.pallas_blocks.plan)"
        )
    warps = num_warps or pallas_plan.num_warps(bq, bk, dp, dvp)
    return warps, (fitting or stages)[0]


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
    num_stages: int | None = None,
    score_mod=None,
):
    """Exact attention restricted to the key blocks of ``table``, as Pallas kernels.

    Arguments and results are those of ``blockwise.blockwise_attention`` (the plain-JAX
    engine it is tested against), plus the kernel settings:

    Args:
      interpret: run the kernels in Pallas interpret mode (default: everywhere but on GPU).
      num_warps, num_stages: Triton launch settings on GPU (default: from the tiles and
        the device's shared-memory budget, ``pallas_plan``).
      score_mod: optional ALiBi or T5 bias (``seqjax.attention.score_mod``, with a
        ``KernelForm``), computed inside the kernels from (query position, key position,
        head); the T5 table's gradient is summed per bucket in the dK/dV kernel.

    Raises:
      ValueError: for inputs the kernels do not support (see ``supported``), and, when the
        kernels compile for a GPU, for tiles whose shared memory exceeds the device's
        budget (tiles from ``plan`` always fit).
    """
    b, t, h, d = q.shape
    s, dv_in = k.shape[1], v.shape[-1]
    why = supported(q, k, v, block_q=block_q, block_k=block_k, table=table,
                    dropout_rate=dropout_rate, score_mod=score_mod)  # fmt: skip
    if why is not None:
        raise ValueError(f"Pallas block-sparse attention: {why}")
    interpret = default_interpret() if interpret is None else interpret
    blockwise._check_not_forward_mode(q, k, v)
    learned = learned_bias(score_mod)
    if _single_block(table):
        # One dense block (e.g. the Sparse Transformer's column part, n = T / l rows):
        # tiled by the planner over the dense table; positions past t / s are masked.
        tiles = pallas_plan.plan(t, s, d, dv_in, dtype=q.dtype, learned_bias=learned)
        block_q, block_k = tiles.block_q, tiles.block_k
        table, count = _retile_single_block(count, t, s, block_q, block_k, causal)
    num_warps, num_stages = _launch_settings(
        q.dtype, d, dv_in, block_q, block_k, num_warps, num_stages, check=not interpret,
        learned=learned,
    )  # fmt: skip
    bq, bk = block_q, block_k
    nq, nk = -(-t // bq), -(-s // bk)
    if table.shape[0] != nq:
        raise ValueError(f"block table has {table.shape[0]} rows, expected {nq}")
    scale = float(numerics.default_scale(scale, d))  # of the true head dim
    # Head dims padded to powers of two with zeros: q.k and p.v are unchanged (the padded
    # output columns are dropped below), as FlashAttention handles odd head dims.
    d = pallas_plan.pow2_at_least_16(d)
    q, k = numerics.pad_to(q, d, axis=3), numerics.pad_to(k, d, axis=3)
    v = numerics.pad_to(v, pallas_plan.pow2_at_least_16(dv_in), axis=3)
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
    numerics.check_dropout(dropout_rate, dropout_rng)
    has_drop = dropout_rate > 0.0
    # Dropout seeds (int32 [16]): entries 0, 1 the hash's seeds, entry 2 the batch offset of
    # this device's shard (set under shard_map), so that the mask is numerics.dropout_keep's.
    drop_args = ()
    if has_drop:
        drop_args = (jnp.zeros((16,), jnp.int32).at[:2].set(numerics.dropout_seeds(dropout_rng)),)
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
        drop_ref = rest.pop(0) if has_drop else None
        return (km_ref, qs_ref, ks_ref), bias_refs, drop_ref, tuple(rest)

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
        kernels.element_mask,
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
        params = plgpu.CompilerParams(num_warps=num_warps, num_stages=num_stages)
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
        if has_drop:  # the seeds and the batch offset, whole
            specs.append(pl.BlockSpec((16,), lambda *_: (0,)))
        return specs

    def kernel_inputs(aux_in, params):
        """The kernels' aux inputs from ``(*masks, [offset], [seeds])``."""
        masks_in, rest = list(aux_in[: len(aux_arrays)]), list(aux_in[len(aux_arrays) :])
        if has_bias:
            masks_in += [rest.pop(0), coefficients(params)]
        return (*masks_in, *rest)

    tab, cnt = _flat_table(table), _counts(count)
    ttab, tcnt = _flat_table(t_table), _counts(t_count)
    dv_dim = v.shape[-1]

    def forward(qp, kp, vp, aux_in, params=None):
        qp, kp, vp = blockwise._first_order_only((qp, kp, vp))  # no second derivatives
        b = qp.shape[0]  # this device's batch under shard_map
        out, lse = call(
            functools.partial(kernels.fwd_kernel, cfg=cfg),
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
            functools.partial(kernels.dkdv_kernel, cfg=cfg),
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
            functools.partial(kernels.dq_kernel, cfg=cfg),
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

    def keep(i, j, seed_ref, bh):  # float32 [bq, bk]: dropout keep-scale of block (i, j)
        row = (bh[0] + seed_ref[2]) * h + bh[1]  # program (batch, head), global batch row
        q_pos = i * bq + jnp.arange(bq, dtype=jnp.int32)
        k_pos = j * bk + jnp.arange(bk, dtype=jnp.int32)
        kept = numerics.dropout_keep(
            seed_ref[0], seed_ref[1], row, q_pos[:, None], k_pos[None, :], dropout_rate
        )
        return numerics.dropout_scale(kept, dropout_rate)

    cfg["keep"] = keep

    def attend(qp, kp, vp, *args):
        args = list(args)
        params = args.pop(0) if has_bias else None
        off = [args.pop(0)] if has_bias else []
        seeds = [args.pop(0)] if has_drop else []
        if seeds and split and split.batch:  # this shard's first batch row: entry 2
            first = jax.lax.axis_index(split.batch) * qp.shape[0]
            seeds = [seeds[0].at[2].set(first.astype(jnp.int32))]
        aux_in = (*args, *off, *seeds)
        if not has_bias:
            return blockwise.call_with_vjp(forward, backward, qp, kp, vp, aux_in)
        return blockwise.call_with_vjp_params(forward, backward, qp, kp, vp, aux_in, params)

    split = splash.mesh_split(b, h, same_heads=False)
    if split and split.batch:  # XLA would run an opaque kernel whole on every device
        x_spec, aux_spec = P(split.batch, None, None, None), P(split.batch, None)
        attend = jax.shard_map(
            attend,
            mesh=split.mesh,
            in_specs=(x_spec,) * 3
            + (P(),) * (len(bias_args) + len(drop_args))
            + (aux_spec,) * len(aux_arrays),
            out_specs=(x_spec, P(split.batch, None, None)),
            check_vma=False,
        )
    out, lse_BHT = attend(qp, kp, vp, *bias_args, *drop_args, *aux_arrays)
    out = out[:, :t, :, :dv_in]
    if not return_lse:
        return out
    return out, lse_BHT[:, :, :t]
