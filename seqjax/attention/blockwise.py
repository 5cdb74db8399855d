"""Exact blockwise attention over a static table of (query block, key block) pairs.

This is the engine behind ``dense`` ``implementation="chunked"`` (every key block, or the
lower triangle of blocks when causal) and the block-sparse mechanisms (only the key blocks
a sparsity pattern touches). It is FlashAttention (Dao et al. 2022, Alg. 1 forward with the
online softmax of Milakov & Gimelshein 2018; Dao 2023, Alg. 2 backward) written in plain
JAX with a ``custom_vjp``:

* forward: for each query block, loop over its key blocks keeping the running max ``m``,
  normaliser ``l`` and accumulator ``acc`` in float32; store only ``out`` and the
  log-sum-exp ``lse`` (O(T) memory, never ``T x S``);
* backward: one pass over key blocks; for each, loop over the query blocks that use it,
  recompute ``P = exp(S - lse)`` and accumulate ``dK``, ``dV`` for the block and ``dQ`` into
  a carried float32 buffer. ``dS = P * (dP - rowsum(dO * O))``.

Loops have data-dependent trip counts (``count[i]``), so blocks outside the pattern are
never computed: causal attention does about half the work of full attention.

Derivatives: first-order reverse mode only (``jax.grad``, ``jax.vjp``, ``jax.value_and_grad``,
any number of times in sequence). Forward mode (``jax.jvp``, ``jax.jacfwd``,
``jax.linearize`` of a jvp) is impossible through a ``custom_vjp``, and second-order reverse
mode (``grad`` of ``grad``, ``jax.hessian``) would have to transpose the dynamic-length loops.
Both raise ``NotImplementedError(HIGHER_ORDER_MESSAGE)`` at trace time, naming the
materializing implementations that support every transformation: dense
``implementation="reference"`` and block-sparse ``implementation="masked"``. Note that dense
``implementation="auto"`` switches to this engine above ``AUTO_CHUNK_THRESHOLD`` logits per
head, so Hessian-vector products need ``"reference"`` explicitly.

Legend: B batch, T query length, S key length, H heads, D head dim, bq/bk block sizes,
nq/nk number of query/key blocks.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from seqjax.attention import masks as masks_lib
from seqjax.attention import numerics

MaskFn = Callable[[jax.Array, jax.Array], jax.Array]

HIGHER_ORDER_MESSAGE = (
    "blockwise attention (dense implementation='chunked', or 'auto' on long sequences; "
    "block-sparse implementation='blocksparse') supports first-order reverse mode only "
    "(jax.grad/jax.vjp); for forward mode (jvp, jacfwd) or second-order derivatives "
    '(grad of grad, hessian) use dense implementation="reference" (block-sparse: '
    'implementation="masked")'
)


try:  # the tracer type of forward mode; guarded: a private name of the installed JAX
    from jax._src.interpreters.ad import JVPTracer as _JVPTracer
except ImportError:  # pragma: no cover
    _JVPTracer = ()


def forward_mode_active(*xs) -> bool:
    """True when ``xs`` carry forward-mode tangents (``jax.jvp``/``jax.jacfwd``) at trace
    time. Functions with a ``custom_vjp`` check it to raise a message that names the way out
    (JAX itself fails only when lowering a jitted program). With direct linearization
    (JAX's default) reverse mode never traces a ``JVPTracer``, so ``grad`` is unaffected."""
    return bool(jax.config.jax_use_direct_linearize and any(isinstance(x, _JVPTracer) for x in xs))


def _check_not_forward_mode(*xs) -> None:
    """Raises ``NotImplementedError(HIGHER_ORDER_MESSAGE)`` under forward mode."""
    if forward_mode_active(*xs):
        raise NotImplementedError(HIGHER_ORDER_MESSAGE)


@jax.custom_jvp
def _first_order_only(xs):
    """Identity whose JVP raises: marks computations that must never be differentiated
    again (the custom VJP's forward and backward passes; see the module docstring)."""
    return xs


@_first_order_only.defjvp
def _first_order_only_jvp(primals, tangents):
    del primals, tangents
    raise NotImplementedError(HIGHER_ORDER_MESSAGE)


def dense_table(nq: int, nk: int, bq: int, bk: int, *, causal: bool, offset: int):
    """Key-block table for dense attention: all blocks, or those a causal query block sees.

    Returns:
      ``(table int32 [nq, W], count int32 [nq])``: row i lists the key blocks of query
      block i in its first ``count[i]`` entries (the rest are padding).
    """
    table = np.tile(np.arange(nk, dtype=np.int32), (nq, 1))
    if not causal:
        return table, np.full((nq,), nk, np.int32)
    last_q = np.arange(nq) * bq + bq - 1 + offset  # last absolute position in block i
    count = np.clip(last_q // bk + 1, 0, nk).astype(np.int32)
    return table, count


def transpose_table(table: np.ndarray, count: np.ndarray, nk: int):
    """For each key block, the query blocks that attend to it (for the backward pass)."""
    rows = [[] for _ in range(nk)]
    for i in range(table.shape[0]):
        for j in table[i, : count[i]]:
            rows[int(j)].append(i)
    width = max(1, max(len(r) for r in rows))
    t_table = np.zeros((nk, width), np.int32)
    t_count = np.zeros((nk,), np.int32)
    for j, r in enumerate(rows):
        t_table[j, : len(r)] = r
        t_count[j] = len(r)
    return t_table, t_count


def call_with_vjp(forward, backward, qp, kp, vp, aux):
    """``forward(qp, kp, vp, aux) -> (out, lse)`` under the custom VJP ``backward(res, (g,
    g_lse))`` with residuals ``(qp, kp, vp, aux, out, lse)``: the FlashAttention wiring
    (store ``out`` and ``lse`` only, recompute ``P`` backward; Dao et al. 2022, §3.1) shared
    by this engine and the Pallas kernels. Forward mode raises ``HIGHER_ORDER_MESSAGE``."""

    @jax.custom_vjp
    def attend(qp, kp, vp, aux):
        return forward(qp, kp, vp, aux)

    def attend_fwd(qp, kp, vp, aux):
        out, lse = forward(qp, kp, vp, aux)
        return (out, lse), (qp, kp, vp, aux, out, lse)

    attend.defvjp(attend_fwd, backward)
    try:
        return attend(qp, kp, vp, aux)
    except TypeError as e:  # jvp of a custom_vjp: JAX's message does not name the way out
        if "forward-mode" in str(e):
            raise NotImplementedError(HIGHER_ORDER_MESSAGE) from e
        raise


def call_with_vjp_params(forward, backward, qp, kp, vp, aux, params):
    """``call_with_vjp`` with a fifth, differentiable input ``params`` (a pytree: a score
    modification's parameters, ``seqjax.attention.score_mod``); ``backward`` returns its
    cotangent as a fifth gradient."""

    @jax.custom_vjp
    def attend(qp, kp, vp, aux, params):
        return forward(qp, kp, vp, aux, params)

    def attend_fwd(qp, kp, vp, aux, params):
        out, lse = forward(qp, kp, vp, aux, params)
        return (out, lse), (qp, kp, vp, aux, params, out, lse)

    attend.defvjp(attend_fwd, backward)
    try:
        return attend(qp, kp, vp, aux, params)
    except TypeError as e:
        if "forward-mode" in str(e):
            raise NotImplementedError(HIGHER_ORDER_MESSAGE) from e
        raise


def blockwise_attention(
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
    mask_fn: MaskFn | None = None,
    scale: float | None = None,
    dropout_rate: float = 0.0,
    dropout_rng=None,
    return_lse: bool = False,
    score_mod=None,
):
    """Exact attention restricted to the key blocks listed in ``table``.

    Args:
      q: ``[B, T, H, D]``; k: ``[B, S, H, D]``; v: ``[B, S, H, Dv]``.
      table, count: static numpy key-block table (see ``dense_table``), ``nq = ceil(T/bq)``
        rows.
      block_q, block_k: block sizes; T and S are zero-padded up to multiples of them.
      causal, mask, segment_ids: as in ``seqjax.attention.masks``.
      mask_fn: optional extra element mask ``fn(q_pos [bq], k_pos [bk]) -> bool``
        broadcastable to ``[H, bq, bk]`` (sparsity patterns, per-head patterns).
      scale: logit scale, default ``1/sqrt(D)``.
      dropout_rate, dropout_rng: attention-probability dropout; the keep mask is the hash
        ``numerics.dropout_keep`` of (seed, batch, head, query, key), the reference's mask
        whatever the blocks, regenerated by the backward pass.
      return_lse: also return the float32 log-sum-exp of the logits ``[B, H, T]`` (``-inf``
        for rows with no visible key), differentiable, so partial attentions over disjoint
        key sets can be merged exactly: ``out = sum_p exp(lse_p - lse) out_p`` with
        ``lse = logsumexp_p lse_p`` (used by the sparse and LSH mechanisms).
      score_mod: optional ``seqjax.attention.score_mod.ScoreMod``: its bias of block (i, j)
        (absolute query positions ``q_offset + i * bq + arange(bq)``) is added to the scaled
        logits, recomputed in the backward pass, and its parameters get the exact gradient
        ``sum_B dS`` pulled back through the bias (``jax.vjp`` per block).

    Returns:
      ``[B, T, H, Dv]`` in the dtype of ``q`` (and ``lse`` if ``return_lse``).
    """
    _check_not_forward_mode(q, k, v)
    b, t, h, d = q.shape
    s = k.shape[1]
    bq, bk = block_q, block_k
    nq, nk = -(-t // bq), -(-s // bk)
    if table.shape[0] != nq:
        raise ValueError(f"block table has {table.shape[0]} rows, expected {nq}")
    scale = float(numerics.default_scale(scale, d))
    offset = masks_lib.causal_offset(t, s)
    key_mask = masks_lib.check_key_mask(mask, b, s)
    q_seg, kv_seg = masks_lib.split_segment_ids(segment_ids, t, s)
    numerics.check_dropout(dropout_rate, dropout_rng)
    use_dropout = dropout_rate > 0.0
    t_table, t_count = transpose_table(table, count, nk)

    pad = numerics.pad_to
    qp, kp, vp = pad(q, nq * bq), pad(k, nk * bk), pad(v, nk * bk)
    # Auxiliary (non-differentiable) inputs; padded positions are masked by position.
    km = pad(key_mask, nk * bk) if key_mask is not None else None
    qs = pad(q_seg, nq * bq) if q_seg is not None else None
    ks = pad(kv_seg, nk * bk) if kv_seg is not None else None
    q_off = None if score_mod is None else jnp.asarray(score_mod.q_offset, jnp.int32)
    seeds = numerics.dropout_seeds(dropout_rng) if use_dropout else None
    aux = (km, qs, ks, seeds, q_off)

    def slice_rows(x, start, size):
        return jax.lax.dynamic_slice_in_dim(x, start, size, axis=1)

    def mask_and_drop(i, j, aux):
        """bool [B|1, H|1, bq, bk] mask of block (i, j) and its dropout keep-scale."""
        km, qs, ks, seeds, _ = aux
        q_pos = i * bq + jnp.arange(bq)
        k_pos = j * bk + jnp.arange(bk)
        valid = masks_lib.block_mask(q_pos, k_pos, causal=causal, offset=offset, t=t, s=s)
        valid = valid[None, None]
        if mask_fn is not None:
            m = mask_fn(q_pos, k_pos)  # [bq, bk] or [H, bq, bk]
            valid = valid & m.reshape((1,) * (valid.ndim - m.ndim) + m.shape)
        if km is not None:
            valid = valid & slice_rows(km, j * bk, bk)[:, None, None, :]
        if qs is not None:
            sq = slice_rows(qs, i * bq, bq)
            sk = slice_rows(ks, j * bk, bk)
            valid = valid & (sq[:, :, None] == sk[:, None, :])[:, None]
        keep = None
        if use_dropout:  # the hash of (seed, b, h, q, k): the reference's mask
            row = (
                jnp.arange(b, dtype=jnp.int32)[:, None] * h
                + jnp.arange(h, dtype=jnp.int32)[None, :]
            )
            keep = numerics.dropout_keep(
                seeds[0], seeds[1], row[:, :, None, None], q_pos[:, None], k_pos[None, :],
                dropout_rate,
            )  # fmt: skip
            keep = numerics.dropout_scale(keep, dropout_rate)
        return valid, keep

    def logits(q_blk, k_blk):
        # [B, bq, H, D] x [B, bk, H, D] -> [B, H, bq, bk], statistics in float32.
        with jax.named_scope("content_scores"):
            s_ = jnp.einsum("bqhd,bkhd->bhqk", q_blk, k_blk, preferred_element_type=jnp.float32)
            return s_ * scale

    def block_bias(params, i, j, aux):
        """The score modification's float32 ``[1, H, bq, bk]`` bias of block (i, j)."""
        q_pos = aux[-1] + i * bq + jnp.arange(bq)
        return score_mod.bias(params, q_pos, j * bk + jnp.arange(bk))[None]

    def forward(qp, kp, vp, aux, params=None):
        # Tables become constants here, not in the enclosing trace: a custom_vjp rule must
        # not close over tracers of an outer jit.
        table_j, count_j = jnp.asarray(table), jnp.asarray(count)
        qp, kp, vp = _first_order_only((qp, kp, vp))  # differentiating this again raises
        dv = vp.shape[-1]

        def one_q_block(i):
            q_blk = slice_rows(qp, i * bq, bq)

            def body(n, carry):
                m, l, acc = carry
                j = table_j[i, n]
                k_blk, v_blk = slice_rows(kp, j * bk, bk), slice_rows(vp, j * bk, bk)
                valid, keep = mask_and_drop(i, j, aux)
                s_ = logits(q_blk, k_blk)
                if score_mod is not None:
                    s_ = s_ + block_bias(params, i, j, aux)
                s_ = jnp.where(valid, s_, -jnp.inf)
                m_new = jnp.maximum(m, s_.max(-1))
                m_safe = jnp.where(jnp.isfinite(m_new), m_new, 0.0)
                p = jnp.exp(s_ - m_safe[..., None])
                corr = jnp.exp(m - m_safe)
                l = l * corr + p.sum(-1)
                if keep is not None:
                    p = p * keep
                with jax.named_scope("weighted_values"):
                    pv = jnp.einsum(
                        "bhqk,bkhd->bhqd",
                        p.astype(vp.dtype),
                        v_blk,
                        preferred_element_type=jnp.float32,
                    )
                return m_new, l, acc * corr[..., None] + pv

            init = (
                jnp.full((b, h, bq), -jnp.inf, jnp.float32),
                jnp.zeros((b, h, bq), jnp.float32),
                jnp.zeros((b, h, bq, dv), jnp.float32),
            )
            out, lse = numerics.finish_online_softmax(*jax.lax.fori_loop(0, count_j[i], body, init))
            return out.transpose(0, 2, 1, 3), lse  # [B, bq, H, Dv], [B, H, bq]

        out, lse = jax.lax.map(one_q_block, jnp.arange(nq))
        out = out.transpose(1, 0, 2, 3, 4).reshape(b, nq * bq, h, dv)
        return out.astype(q.dtype), lse  # lse: [nq, B, H, bq]

    def backward(res, cotangents):
        if score_mod is None:
            qp, kp, vp, aux, out, lse = res
            params = None
        else:
            qp, kp, vp, aux, params, out, lse = res
        g, g_lse = cotangents
        qp, kp, vp, g, g_lse = _first_order_only((qp, kp, vp, g, g_lse))
        t_table_j, t_count_j = jnp.asarray(t_table), jnp.asarray(t_count)
        g = g.astype(jnp.float32)
        # delta_i = rowsum(dO * O) - dlse_i, grouped per query block [nq, B, H, bq].
        rowsum = jnp.einsum("bqhd,bqhd->bhq", g, out.astype(jnp.float32))
        rowsum = rowsum.reshape(b, h, nq, bq).transpose(2, 0, 1, 3)
        delta, lse_safe = numerics.backward_stats(rowsum, lse, g_lse)
        g_c = g.astype(qp.dtype)

        def one_k_block(carry, j):
            dq, dparams = carry
            k_blk, v_blk = slice_rows(kp, j * bk, bk), slice_rows(vp, j * bk, bk)

            def body(n, carry):
                dq, dk, dv, dparams = carry
                i = t_table_j[j, n]
                q_blk, g_blk = slice_rows(qp, i * bq, bq), slice_rows(g_c, i * bq, bq)
                valid, keep = mask_and_drop(i, j, aux)
                s_ = logits(q_blk, k_blk)
                if score_mod is not None:
                    bias, bias_vjp = jax.vjp(lambda p_: block_bias(p_, i, j, aux), params)
                    s_ = s_ + bias
                p = jnp.where(valid, jnp.exp(s_ - lse_safe[i][..., None]), 0.0)
                p_drop = p if keep is None else p * keep
                dv = dv + jnp.einsum(
                    "bhqk,bqhd->bkhd",
                    p_drop.astype(g_c.dtype),
                    g_blk,
                    preferred_element_type=jnp.float32,
                )
                dp = jnp.einsum("bqhd,bkhd->bhqk", g_blk, v_blk, preferred_element_type=jnp.float32)
                if keep is not None:
                    dp = dp * keep
                ds_raw = p * (dp - delta[i][..., None])  # d loss / d (biased logits)
                if score_mod is not None:
                    (d_p,) = bias_vjp(ds_raw.sum(0, keepdims=True))
                    dparams = jax.tree.map(jnp.add, dparams, d_p)
                ds = (ds_raw * scale).astype(qp.dtype)
                dk = dk + jnp.einsum(
                    "bhqk,bqhd->bkhd", ds, q_blk, preferred_element_type=jnp.float32
                )
                dq_i = jnp.einsum("bhqk,bkhd->bqhd", ds, k_blk, preferred_element_type=jnp.float32)
                dq = jax.lax.dynamic_update_slice_in_dim(
                    dq, slice_rows(dq, i * bq, bq) + dq_i, i * bq, axis=1
                )
                return dq, dk, dv, dparams

            zk, zv = jnp.zeros(k_blk.shape, jnp.float32), jnp.zeros(v_blk.shape, jnp.float32)
            dq, dk, dv, dparams = jax.lax.fori_loop(0, t_count_j[j], body, (dq, zk, zv, dparams))
            return (dq, dparams), (dk, dv)

        dq0 = jnp.zeros(qp.shape, jnp.float32)
        dparams0 = jax.tree.map(lambda p_: jnp.zeros(p_.shape, jnp.float32), params)
        (dq, dparams), (dk, dv) = jax.lax.scan(one_k_block, (dq0, dparams0), jnp.arange(nk))
        dk = dk.transpose(1, 0, 2, 3, 4).reshape(kp.shape)
        dv = dv.transpose(1, 0, 2, 3, 4).reshape(vp.shape)
        grads = (dq.astype(qp.dtype), dk.astype(kp.dtype), dv.astype(vp.dtype), None)
        if score_mod is None:
            return grads
        dparams = jax.tree.map(lambda d_, p_: d_.astype(p_.dtype), dparams, params)
        return (*grads, dparams)

    if score_mod is None:
        out, lse_nBHb = call_with_vjp(forward, backward, qp, kp, vp, aux)
    else:
        out, lse_nBHb = call_with_vjp_params(forward, backward, qp, kp, vp, aux, score_mod.params)
    out = out[:, :t]
    if not return_lse:
        return out
    lse_BHT = lse_nBHb.transpose(1, 2, 0, 3).reshape(b, h, nq * bq)[:, :, :t]
    return out, lse_BHT


def chunked_attention(q, k, v, *, causal=False, block_q=512, block_k=512, **kwargs):
    """Memory-efficient exact attention (FlashAttention in JAX): ``blockwise_attention`` over
    the dense block table (``dense``'s ``implementation="chunked"``).

    Blocks are clipped to the sequence lengths, so short inputs use a single block.
    """
    t, s = q.shape[1], k.shape[1]
    bq, bk = min(block_q, t), min(block_k, s)
    nq, nk = -(-t // bq), -(-s // bk)
    table, count = dense_table(nq, nk, bq, bk, causal=causal, offset=masks_lib.causal_offset(t, s))
    return blockwise_attention(
        q, k, v, table=table, count=count, block_q=bq, block_k=bk, causal=causal, **kwargs
    )
