"""Block-sparse and ``flex`` patterns on the ring, skipping the ring steps they leave empty.

Ring attention (Liu, Zaharia & Abbeel 2023, §3, Alg. 1; ``seqjax.attention.ring``) for a
static sparsity pattern: each device of the ``sequence`` mesh axis keeps its query shard and
at ring step s attends to the key/value shard of device ``src = (r - s) mod n``, computing
only the (query block, key block) pairs of that shard pair that the pattern marks non-empty
(the block tables of the block-sparse engine ``seqjax.attention.blockwise``, derived here
per shard pair from the pattern at the tokens' absolute positions), and merges the partial
attentions exactly from their log-sum-exps (``numerics.merge_lse``, the online softmax of
Milakov & Gimelshein 2018 applied to whole shards).

**Static schedule.** The pattern is known before tracing, so the whole schedule is numpy:

* a ring step at which no device has a non-empty block pair is **skipped entirely** (no
  ``ppermute``, no compute): a sliding window narrower than a shard runs steps 0 and 1
  (causal) or 0, 1 and n - 1 (bidirectional) instead of n;
* an isolated executed step fetches the visitor's K/V straight from its home device: one
  ``ppermute`` with shift s (so K/V jump over the skipped steps) whose permutation lists
  only the devices that have work at that step (idle devices neither receive nor
  compute); a run of ``LOOP_MIN`` or more consecutive executed steps is one ``fori_loop``
  in which the K/V travel one hop per step as in the dense ring (buffers reused by
  construction: unrolled steps did not share buffers on XLA:CPU, see
  ``experiments/context_parallel``);
* on each device the step runs a ``lax.switch`` over the distinct block tables of that
  step (indexed by ``axis_index`` and the step); an idle device takes the empty branch.

**Placement.** ``contiguous`` (device r holds positions ``[r Tl, (r + 1) Tl)``) or
``zigzag`` (Brandon et al. 2023 §3, as the dense causal ring: halves r and 2n-1-r). The
pattern, causality included, is evaluated at absolute positions through a per-device
position table, so both give the same result. ``auto`` prices both (sum over executed steps
of the busiest device's block pairs, the steps being synchronous) and keeps the cheaper;
zigzag only when causal and T is a multiple of 2n. A causal window stays contiguous (2
steps); causal BigBird or strided patterns go zigzag.

**Backward.** A custom VJP as the dense ring's: residuals are only the local ``q, k, v,
out, lse`` (O(T/n) per device); the backward replays the schedule, fetches each visitor's
K/V again, recomputes the partial attention and takes its VJP with cotangents
``w g`` and ``w rowsum(g (out_p - out))``, ``w = exp(lse_p - lse)`` (the exact terms of the
global softmax backward, see ``ring``), and sends the visitor's dK/dV back home with the
inverse ``ppermute`` (in a loop they travel with the K/V and go home after its last step).
The VJP is taken inside every switch branch (a VJP of the switch would keep the residuals
of all branches).

Mechanisms (``ring_pattern``): ``sparse_strided``/``sparse_fixed`` (Child et al. 2019,
§4.2-4.3, every head mode) and ``flex`` (named patterns, BigBird's block layout, a user
``mask_fn`` or ``block_mask``) and ``local`` run as their element patterns on the plain-JAX
engine. The Sparse Transformer's single-device split into a band and a transposed column
part does not shard along the sequence, so on the ring the strided pattern's columns make
every earlier shard pair non-empty: no step is skipped and the work per device is the
masked blockwise one, O(T^2 / n) (the fixed pattern skips key blocks without summary cells
when ``block_size < stride``).

Legend: B batch, T sequence length, H heads, D head dim, n size of the sequence axis, r
this device's index, Tl = T / n local length, bs engine block, nb = Tl / bs blocks.
"""

from __future__ import annotations

import functools
import logging

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from seqjax.attention import blockwise, numerics, ring
from seqjax.attention.ring_schedule import (  # noqa: F401 (public API)
    MECHANISMS,
    PLACEMENTS,
    BlockLayout,
    Schedule,
    SparseHeads,
    choose_schedule,
    positions,
    ring_pattern,
    schedule,
)

log = logging.getLogger(__name__)

# Fetch a visitor only once the step two before it is merged (at most two visitors live).
LOOKAHEAD = True
# Runs of this many consecutive executed steps run as one loop (bounded memory; unrolled
# steps did not share buffers on XLA:CPU), shorter ones unrolled (idle devices receive
# nothing).
LOOP_MIN = 3


def segments(steps: tuple[int, ...]) -> list[list[tuple[int, int]]]:
    """The executed steps ``(index, step)`` cut into what runs unrolled (one step each) and
    what runs as one loop: ``LOOP_MIN`` or more consecutive steps, whose K/V then travel one
    hop per step inside a ``fori_loop`` (buffers reused by construction)."""
    runs: list[list[tuple[int, int]]] = []
    for i, s in enumerate(steps):
        if runs and s == runs[-1][-1][1] + 1:
            runs[-1].append((i, s))
        else:
            runs.append([(i, s)])
    out = []
    for run in runs:
        out.extend([run] if len(run) >= LOOP_MIN else [[x] for x in run])
    return out


def _ring_core(sched: Schedule, fn, n, bs, causal, engine_kwargs):
    """The per-device ``f(q, k, v, aux) -> out`` with its custom VJP (module docstring);
    ``aux = (q_seg, (km, kv_seg), rng)``."""
    pos = sched.pos
    rotate = [(r, (r + 1) % n) for r in range(n)]

    def mask_fn_at(s):
        def mask_fn(q_pos, k_pos):  # local block positions -> absolute, per device
            r = jax.lax.axis_index(ring.AXIS)
            pos_j = jnp.asarray(pos)
            qa, ka = pos_j[r][q_pos], pos_j[(r - s) % n][k_pos]
            m = fn(qa[:, None], ka[None, :])
            if causal:
                c = ka[None, :] <= qa[:, None]
                m = m & (c if m.ndim == 2 else c[None])
            return m

        return mask_fn

    def attend(s, table, count):
        """Step s's partial attention for one block table: ``f(q, k, v, km, q_seg, kv_seg,
        rng) -> (out_p [B, Tl, H, Dv] float32, lse_p [B, Tl, H])``."""

        def branch(q, k, v, km, q_seg, kv_seg, rng):
            segs = None if q_seg is None else (q_seg, kv_seg)
            out, lse_BHT = blockwise.blockwise_attention(
                q, k, v, table=table, count=count, block_q=bs, block_k=bs, causal=False,
                mask=km, segment_ids=segs, mask_fn=mask_fn_at(s),
                dropout_rng=None if rng is None else jax.random.fold_in(rng, s),
                return_lse=True, **engine_kwargs,
            )  # fmt: skip
            return out.astype(jnp.float32), lse_BHT.transpose(0, 2, 1)

        return branch

    def table_of(seg):
        """``(fns, index [len(seg), n])``: the segment's branches (idle first) and each
        device's branch at each of its steps."""
        fns, index = [None], np.zeros((len(seg), n), np.int32)
        for j, (i, s) in enumerate(seg):
            tables = sched.branches[i][1:]
            index[j] = np.where(sched.which[i] > 0, sched.which[i] + len(fns) - 1, 0)
            fns.extend(attend(s, *tc) for tc in tables)
        return fns, index

    def switch(fns, index, j, operands):
        """This device's branch (no switch when every device always runs the same one)."""
        if len(fns) == 2 and (index == 1).all():
            return fns[1](*operands)
        idx = jnp.asarray(index)[j, jax.lax.axis_index(ring.AXIS)]
        return jax.lax.switch(idx, fns, *operands)

    def idle_out(q, k, v, *_):
        b, tl, h, _ = q.shape
        return jnp.zeros((b, tl, h, v.shape[-1]), jnp.float32), jnp.full((b, tl, h), -jnp.inf)

    def grads_of(f):
        def grads(q, k, v, km, q_seg, kv_seg, rng, g32, out32, lse_safe):
            """``(dq, dk, dv)`` float32 of one partial attention for the global cotangent
            (taken inside every branch: a VJP of the switch would keep the residuals of
            all branches)."""
            (out_p, lse_p), vjp = jax.vjp(
                lambda q_, k_, v_: f(q_, k_, v_, km, q_seg, kv_seg, rng), q, k, v
            )
            w = jnp.where(jnp.isfinite(lse_p), jnp.exp(lse_p - lse_safe), 0.0)
            g_lse = w * jnp.sum(g32 * (out_p - out32), axis=-1)
            return tuple(x.astype(jnp.float32) for x in vjp((w[..., None] * g32, g_lse)))

        return grads

    def idle_grads(q, k, v, *_):
        return tuple(jnp.zeros(x.shape, jnp.float32) for x in (q, k, v))

    def fetch(seg, x, done):
        """The visitor of the segment's first step from its home device: only the devices
        with work receive, unless the K/V travel on through a loop. With ``done`` (the
        accumulator two steps back) the transfer waits for it (at most two visitors live)."""
        i, s = seg[0]
        if s == 0:
            return x
        if done is not None:
            x, _ = jax.lax.optimization_barrier((x, done))
        receivers = range(n) if len(seg) > 1 else sched.active[i]
        return ring._ppermute(x, [((r - s) % n, r) for r in receivers])

    def send_home(seg, x):
        """dK/dV of the segment's last visitor back to its home device."""
        i, s = seg[-1]
        if s == 0:
            return x
        senders = range(n) if len(seg) > 1 else sched.active[i]
        return ring._ppermute(x, [(r, (r - s) % n) for r in senders])

    def after(history):
        return history[-2] if LOOKAHEAD and len(history) >= 2 else None

    def merge(acc, part):
        if acc is None:
            return part
        return numerics.merge_lse([acc[0], part[0]], [acc[1], part[1]], return_lse=True)

    def forward(q, k, v, aux):
        q_seg, kv_aux, rng = aux
        acc, history = None, []
        for seg in segments(sched.steps):
            fns, index = table_of(seg)
            fns[0] = idle_out
            kv = fetch(seg, (k, v, kv_aux), after(history))

            def run(j, kv, fns=fns, index=index):
                k_s, v_s, (km, kv_seg) = kv
                return switch(fns, index, j, (q, k_s, v_s, km, q_seg, kv_seg, rng))

            acc = merge(acc, run(0, kv))
            if len(seg) > 1:

                def body(j, carry, run=run):
                    kv, acc = carry
                    kv = ring._ppermute(kv, rotate)
                    return kv, merge(acc, run(j, kv))

                _, acc = jax.lax.fori_loop(1, len(seg), body, (kv, acc))
            history.append(acc[0])
        if acc is None:  # the pattern is empty everywhere
            acc = idle_out(q, k, v)
        out, lse = acc
        return out.astype(q.dtype), lse

    @jax.custom_vjp
    def core(q, k, v, aux):
        return forward(q, k, v, aux)[0]

    def core_fwd(q, k, v, aux):
        out, lse = forward(q, k, v, aux)
        return out, (q, k, v, aux, out, lse)

    def core_bwd(res, g):
        q, k, v, aux, out, lse = res
        q_seg, kv_aux, rng = aux
        g32, out32 = g.astype(jnp.float32), out.astype(jnp.float32)
        lse_safe = jnp.where(jnp.isfinite(lse), lse, 0.0)
        f32 = jnp.float32
        dq = jnp.zeros(q.shape, f32)
        dk, dv = jnp.zeros(k.shape, f32), jnp.zeros(v.shape, f32)
        history = []
        for seg in segments(sched.steps):
            fns, index = table_of(seg)
            fns = [idle_grads] + [grads_of(f) for f in fns[1:]]
            kv = fetch(seg, (k, v, kv_aux), after(history))

            def run(j, kv, fns=fns, index=index):
                k_s, v_s, (km, kv_seg) = kv
                operands = (q, k_s, v_s, km, q_seg, kv_seg, rng, g32, out32, lse_safe)
                return switch(fns, index, j, operands)

            dq_s, dk_s, dv_s = run(0, kv)
            dq = dq + dq_s
            if len(seg) > 1:

                def body(j, carry, run=run):
                    kv, dkv, dq = carry
                    kv, dkv = ring._ppermute((kv, dkv), rotate)
                    dq_s, dk_s, dv_s = run(j, kv)
                    return kv, (dkv[0] + dk_s, dkv[1] + dv_s), dq + dq_s

                _, (dk_s, dv_s), dq = jax.lax.fori_loop(1, len(seg), body, (kv, (dk_s, dv_s), dq))
            dk_s, dv_s = send_home(seg, (dk_s, dv_s))
            dk, dv = dk + dk_s, dv + dv_s
            history.append(dq)
        return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None

    core.defvjp(core_fwd, core_bwd)
    return core


@functools.lru_cache(maxsize=8)
def _log_engine(mechanism: str, implementation: str) -> None:
    log.info(
        "%s implementation %r on the ring: the ring runs the plain-JAX block-sparse engine",
        mechanism, implementation,
    )  # fmt: skip


def ring_sparse_attention(
    q,
    k,
    v,
    *,
    mechanism: str,
    causal=False,
    mask=None,
    segment_ids=None,
    scale=None,
    dropout_rate=0.0,
    dropout_rng=None,
    placement="auto",
    **options,
):
    """``mechanism`` (one of ``MECHANISMS``) with ``options`` on the ring of the ambient
    mesh's ``sequence`` axis (module docstring).

    Args:
      q, k, v: ``[B, T, H, D]``, ``[B, T, H, D]``, ``[B, T, H, Dv]`` (global arrays,
        sharded or not; run sharded over ``sequence`` along T). Self-attention only.
      mechanism: ``"sparse_strided"``, ``"sparse_fixed"``, ``"flex"`` or ``"local"``.
      causal, mask, segment_ids, scale, dropout_rate, dropout_rng: as the mechanism's
        (dropout masks differ from the single-device ones: same rate, other stream).
      placement: ``"auto"``, ``"contiguous"`` or ``"zigzag"`` (module docstring).
      **options: the mechanism's options (``implementation`` is ignored: the ring runs the
        plain-JAX engine).

    Returns:
      ``[B, T, H, Dv]`` in the dtype of ``q``, sharded along T over ``sequence``.

    Raises:
      ValueError: for T != S, T not a multiple of n, a positional score bias, or bad
        options (naming them).
    """
    from seqjax.attention import registry

    registry.check_options(mechanism, options)
    registry.check_qkv(q, k, v)
    n = ring.axis_size()
    common = dict(causal=causal, mask=mask, segment_ids=segment_ids, scale=scale)
    if n <= 1:  # no sequence axis: the mechanism itself
        return registry.get(mechanism)(
            q, k, v, dropout_rate=dropout_rate, dropout_rng=dropout_rng, **common, **options
        )
    if options.pop("score_mod", None) is not None:
        raise ValueError(
            f"attention {mechanism!r} on config.mesh.sequence > 1 cannot add a positional "
            "score bias (model.positional 'alibi'/'t5_bias'); use 'rope' or 'learned'"
        )
    impl = options.pop("implementation", "auto")
    if impl not in ("auto", "blocksparse"):
        _log_engine(mechanism, impl)
    b, t, h, d = q.shape
    why = ring.unsupported(t, k.shape[1], max(n, 1), causal=False)
    if why:
        raise ValueError(f"attention {mechanism!r} on sequence={n} cannot run: {why}")
    fn, bs = ring_pattern(mechanism, options, t=t, num_heads=h, causal=causal)
    blockwise._check_not_forward_mode(q, k, v)
    numerics.check_dropout(dropout_rate, dropout_rng)
    bs = min(int(bs), t // n)
    sched = choose_schedule(fn, t, n, bs, bool(causal), placement)
    km, q_seg, kv_seg = ring._normalize(q, k, mask, segment_ids)
    engine = dict(scale=float(numerics.default_scale(scale, d)), dropout_rate=dropout_rate)
    core = _ring_core(sched, fn, n, bs, bool(causal), engine)
    rng = dropout_rng if dropout_rate > 0.0 else None
    zigzag = sched.placement == "zigzag"

    def body(q, k, v, km, q_seg, kv_seg, rng):
        if zigzag:
            q, k, v, km, q_seg, kv_seg = (
                ring._to_zigzag(x, n) for x in (q, k, v, km, q_seg, kv_seg)
            )
        if rng is not None:
            rng = jax.random.fold_in(rng, jax.lax.axis_index(ring.AXIS))
        out = core(q, k, v, (q_seg, (km, kv_seg), rng))
        return ring._from_zigzag(out, n) if zigzag else out

    args = (q, k, v, km, q_seg, kv_seg)
    fn_sharded = jax.shard_map(
        body,
        in_specs=(*ring._specs(*args), None if rng is None else P()),
        out_specs=P(None, ring.AXIS),
        axis_names={ring.AXIS},
        check_vma=False,
    )
    return fn_sharded(*args, rng)


def dispatch(mechanism: str, fn):
    """The attention function a layer calls: ``fn`` itself, or, for a ``MECHANISMS`` entry
    under a ``sequence`` axis of n > 1 devices on self-attention, its ring execution."""
    if mechanism not in MECHANISMS:
        return fn

    def call(q, k, v, **kwargs):
        if ring.axis_size() <= 1 or k is None or q.shape[1] != k.shape[1]:
            return fn(q, k, v, **kwargs)
        return ring_sparse_attention(q, k, v, mechanism=mechanism, **kwargs)

    return call
