"""Context (sequence) parallel attention over the ``sequence`` mesh axis.

Two ways to attend when every device holds only ``T / n`` of the sequence (``n`` = size of
the ``sequence`` axis of the ambient mesh, ``jax.set_mesh``):

* **Ring attention** (Liu, Zaharia & Abbeel 2023, §3, Alg. 1): inside ``jax.shard_map`` each
  device keeps its query block and passes its key/value block around the ring with
  ``jax.lax.ppermute``; the partial attentions are merged exactly from their log-sum-exps
  (``numerics.merge_lse``: the online softmax of Milakov & Gimelshein 2018 applied to whole
  blocks). Each pair (query block, visiting key block) runs the FlashAttention engine of
  ``seqjax.attention.blockwise`` (memory linear in the local length).

  *Causal load balancing* ("zigzag", as in Brandon et al. 2023 "Striped attention" §3 and
  the zigzag variant of ring-flash-attention): the sequence is cut into ``2n`` chunks and
  device ``r`` holds chunks ``r`` and ``2n-1-r``, so at every ring step every device does
  the same half block of work: step 0 the local causal block; from a device ``src < r``
  all local queries against the visitor's first chunk; from ``src > r`` the local second
  chunk against the whole visitor. The reordering from the contiguous sharding the model
  uses is two ``ppermute``s (and two back), never a gather.

  *Backward*: a custom VJP that keeps only ``q, k, v, out, lse`` of the local block (O(T/n)
  per device) and sends ``dK, dV`` around the ring with the key/value block, as the
  FlashAttention-2 backward (Dao 2023, Alg. 2) accumulates them per key block; after ``n``
  steps they arrive home. Each pair's gradients are the VJP of its partial attention with
  cotangents ``w g`` for the partial output and ``w rowsum(g (out_p - out))`` for its lse,
  ``w = exp(lse_p - lse)``: this makes the engine's ``P_p w = exp(S - lse)`` and
  ``delta = rowsum(g out)``, the exact terms of the global softmax backward (the partial
  forward is recomputed, so a ring step costs one forward and one backward of the engine).

* **All-to-all** (DeepSpeed-Ulysses, Jacobs et al. 2023, §3.1): an ``all_to_all`` turns the
  sequence-sharded ``[B, T/n, H, D]`` into head-sharded ``[B, T, H/n, D]``, every device
  runs ``chunked`` attention over the whole sequence for its heads, and a second
  ``all_to_all`` turns the output back. It needs the (per tensor-parallel shard) heads to
  divide ``n``. Derivatives by autodiff (the transpose of an ``all_to_all`` is the inverse
  ``all_to_all``; the engine's own VJP keeps memory linear). It lives in ``ulysses.py``.

``choose`` is the rule ``dense`` ``implementation="auto"`` uses under a sequence axis: all-to-all
when the heads divide the axis (each device sends ``4 (n-1)/n^2`` of its ``T H D`` q/k/v/out
elements per layer, against ``2 (n-1)/n`` of them for the ring), else the ring.

Block-sparse and ``flex`` patterns run on the ring in ``seqjax.attention.ring_sparse``
(ring steps the pattern leaves empty are skipped).

Masks: ``mask`` (``[B, S]`` key padding) and ``segment_ids`` travel with their keys (ring) or
are gathered (all-to-all); causal is bottom-right aligned as in ``seqjax.attention.masks``,
and both need self-attention (``T == S``). Dropout masks differ from ``chunked``'s (same
rate, different random stream).

Legend: B batch, T sequence (query) length, S key length, H heads, D head dim, n size of
the sequence axis, r this device's index on it, Tl = T / n local length.
"""

from __future__ import annotations

import functools
import logging

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from seqjax.attention import blockwise, numerics, registry
from seqjax.attention import masks as masks_lib

log = logging.getLogger(__name__)

AXIS = "sequence"


def axis_size(mesh=None) -> int:
    """Size of the ``sequence`` axis of ``mesh`` (default: the ambient mesh); 1 if absent."""
    mesh = jax.sharding.get_abstract_mesh() if mesh is None else mesh
    if mesh is None or mesh.empty or AXIS not in mesh.axis_names:
        return 1
    return int(mesh.shape[AXIS])


def local_heads(num_heads: int, mesh=None) -> int:
    """Heads per device before the all-to-all: ``num_heads / tensor`` when the heads are
    tensor-parallel."""
    mesh = jax.sharding.get_abstract_mesh() if mesh is None else mesh
    tp = int(mesh.shape["tensor"]) if mesh is not None and "tensor" in mesh.axis_names else 1
    return num_heads // tp if num_heads % tp == 0 else num_heads


def unsupported(t: int, s: int, n: int, *, causal: bool) -> str | None:
    """Why a sequence-parallel implementation cannot take these lengths (None if it can)."""
    if t != s:
        return f"it needs self-attention (query length {t} != key length {s})"
    chunks = 2 * n if causal else n
    if t % chunks:
        what = "2 x sequence axis (causal zigzag placement)" if causal else "the sequence axis"
        return f"length {t} is not a multiple of {chunks} = {what}"
    return None


def choose(num_heads: int, n: int, mesh=None) -> tuple[str, str]:
    """``(implementation, reason)``: ``"ulysses"`` when the heads divide the axis, else
    ``"ring"`` (see the module docstring for the communication volumes)."""
    h = local_heads(num_heads, mesh)
    if h % n == 0:
        return "ulysses", (
            f"{h} heads per device divide sequence={n}: all-to-all sends 4(n-1)/n^2 of the "
            "local q/k/v/out per layer, less than the ring's 2(n-1)/n"
        )
    return "ring", f"{h} heads per device do not divide sequence={n}, so all-to-all cannot"


@functools.lru_cache(maxsize=32)
def log_choice(choice: str, why: str) -> None:
    log.info("dense attention 'auto' on a sequence axis uses %r: %s", choice, why)


def _normalize(q, k, mask, segment_ids):
    """Key mask as bool ``[B, S]`` (or None) and segment ids as a pair (or Nones)."""
    b, t = q.shape[:2]
    s = k.shape[1]
    km = masks_lib.check_key_mask(mask, b, s)
    if km is not None:
        km = jnp.broadcast_to(km, (b, s))
    q_seg, kv_seg = masks_lib.split_segment_ids(segment_ids, t, s)
    return km, q_seg, kv_seg


def _check(q, k, causal, n, name):
    why = unsupported(q.shape[1], k.shape[1], n, causal=causal)
    if why:
        raise ValueError(f"dense implementation {name!r} on sequence={n} cannot run: {why}")


def _ppermute(x, perm):
    return jax.tree.map(lambda a: jax.lax.ppermute(a, AXIS, perm), x)


def _zigzag_perms(n):
    """The two ``ppermute``s that move contiguous halves ``2c``, ``2c+1`` of device ``c``
    to their zigzag owners (half ``h`` belongs to device ``h`` if ``h < n`` else
    ``2n-1-h``); each is a bijection of the devices."""
    owner = [h if h < n else 2 * n - 1 - h for h in range(2 * n)]
    first = [(c, owner[2 * c]) for c in range(n)]
    second = [(c, owner[2 * c + 1]) for c in range(n)]
    return first, second


def _to_zigzag(x, n):
    """Local ``[B, Tl, ...]`` of contiguous chunk r -> ``[half r ; half 2n-1-r]``."""
    if x is None:
        return None
    first, second = _zigzag_perms(n)
    a, b = jnp.split(x, 2, axis=1)
    ra, rb = jax.lax.ppermute(a, AXIS, first), jax.lax.ppermute(b, AXIS, second)
    even = jax.lax.axis_index(AXIS) % 2 == 0  # even r receives its low half first
    return jnp.concatenate([jnp.where(even, ra, rb), jnp.where(even, rb, ra)], axis=1)


def _from_zigzag(x, n):
    """Inverse of ``_to_zigzag``."""
    first, second = _zigzag_perms(n)
    lo, hi = jnp.split(x, 2, axis=1)
    even = jax.lax.axis_index(AXIS) % 2 == 0
    ra, rb = jnp.where(even, lo, hi), jnp.where(even, hi, lo)
    a = jax.lax.ppermute(ra, AXIS, [(d, c) for c, d in first])
    b = jax.lax.ppermute(rb, AXIS, [(d, c) for c, d in second])
    return jnp.concatenate([a, b], axis=1)


def _ring_core(n, causal, engine_kwargs):
    """The per-device ring attention ``f(q, k, v, aux) -> out`` with its custom VJP.

    ``aux = (q_seg, kv_aux, rng)``: local query segment ids, the key mask and key segment
    ids that travel with the keys, and the dropout key (all non-differentiable).
    """
    rotate = [(i, (i + 1) % n) for i in range(n)]

    def pair(kind, q, k, v, q_seg, kv_aux, rng):
        """Partial attention of the local queries to a visiting key block: ``(out_p [B, Tl,
        H, Dv] float32, lse_p [B, Tl, H])``. ``kind``: 0 the local causal block (or the
        whole block when not causal), 1 all queries vs the visitor's first chunk, 2 the
        second query chunk vs the whole visitor."""
        km, kv_seg = kv_aux
        tl = q.shape[1]
        half = tl // 2

        def attend(q_, k_, v_, km_, qs_, ks_, causal_):
            segs = None if qs_ is None else (qs_, ks_)
            out, lse_BHT = blockwise_chunked(
                q_, k_, v_, causal=causal_, mask=km_, segment_ids=segs, dropout_rng=rng
            )
            return out.astype(jnp.float32), lse_BHT.transpose(0, 2, 1)

        def cut(x, lo, hi):
            return None if x is None else x[:, lo:hi]

        if kind == 0:
            return attend(q, k, v, km, q_seg, kv_seg, causal)
        if kind == 1:
            return attend(
                q, k[:, :half], v[:, :half], cut(km, 0, half), q_seg, cut(kv_seg, 0, half), False
            )
        out, lse = attend(q[:, half:], k, v, km, cut(q_seg, half, tl), kv_seg, False)
        out = jnp.concatenate([jnp.zeros_like(out), out], axis=1)
        return out, jnp.concatenate([jnp.full_like(lse, -jnp.inf), lse], axis=1)

    def blockwise_chunked(q, k, v, **kw):

        return blockwise.chunked_attention(q, k, v, return_lse=True, **engine_kwargs, **kw)

    def kind_index(s, r):
        """0 for the local block; for a visitor from ``src``: 1 if ``src < r`` else 2."""
        if not causal:
            return jnp.int32(0)
        src = (r - s) % n
        return jnp.where(s == 0, 0, jnp.where(src < r, 1, 2)).astype(jnp.int32)

    def step_rng(rng, r, s):
        return None if rng is None else jax.random.fold_in(rng, r * n + (r - s) % n)

    kinds = (0, 1, 2) if causal else (0,)

    def switch(s, r, fn, *operands):
        branches = [functools.partial(fn, kd) for kd in kinds]
        if len(branches) == 1:
            return branches[0](*operands)
        return jax.lax.switch(kind_index(s, r), branches, *operands)

    def forward(q, k, v, aux):
        q_seg, kv_aux, rng = aux
        r = jax.lax.axis_index(AXIS)

        def partial(kd, k, v, kv_aux, s):
            return pair(kd, q, k, v, q_seg, kv_aux, step_rng(rng, r, s))

        out, lse = switch(0, r, partial, k, v, kv_aux, 0)

        def body(s, carry):
            k, v, kv_aux, out, lse = carry
            k, v, kv_aux = _ppermute((k, v, kv_aux), rotate)
            out_p, lse_p = switch(s, r, partial, k, v, kv_aux, s)
            out, lse = numerics.merge_lse([out, out_p], [lse, lse_p], return_lse=True)
            return k, v, kv_aux, out, lse

        *_, out, lse = jax.lax.fori_loop(1, n, body, (k, v, kv_aux, out, lse))
        return out.astype(q.dtype), lse

    @jax.custom_vjp
    def ring(q, k, v, aux):
        return forward(q, k, v, aux)[0]

    def ring_fwd(q, k, v, aux):
        out, lse = forward(q, k, v, aux)
        return out, (q, k, v, aux, out, lse)

    def ring_bwd(res, g):
        q, k, v, aux, out, lse = res
        q_seg, kv_aux, rng = aux
        r = jax.lax.axis_index(AXIS)
        g32, out32 = g.astype(jnp.float32), out.astype(jnp.float32)
        lse_safe = jnp.where(jnp.isfinite(lse), lse, 0.0)

        def grads(kd, k, v, kv_aux, s):
            rng_s = step_rng(rng, r, s)
            (out_p, lse_p), vjp = jax.vjp(
                lambda q_, k_, v_: pair(kd, q_, k_, v_, q_seg, kv_aux, rng_s), q, k, v
            )
            w = jnp.where(jnp.isfinite(lse_p), jnp.exp(lse_p - lse_safe), 0.0)
            g_out = w[..., None] * g32
            g_lse = w * jnp.sum(g32 * (out_p - out32), axis=-1)
            dq, dk, dv = vjp((g_out, g_lse))
            f32 = jnp.float32
            return dq.astype(f32), dk.astype(f32), dv.astype(f32)

        dq, dk, dv = switch(0, r, grads, k, v, kv_aux, 0)

        def body(s, carry):
            k, v, kv_aux, dk, dv, dq = carry
            k, v, kv_aux, dk, dv = _ppermute((k, v, kv_aux, dk, dv), rotate)
            dq_s, dk_s, dv_s = switch(s, r, grads, k, v, kv_aux, s)
            return k, v, kv_aux, dk + dk_s, dv + dv_s, dq + dq_s

        *_, dk, dv, dq = jax.lax.fori_loop(1, n, body, (k, v, kv_aux, dk, dv, dq))
        dk, dv = _ppermute((dk, dv), rotate)  # the last hop brings them home
        return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None

    ring.defvjp(ring_fwd, ring_bwd)
    return ring


def _specs(*xs):
    return tuple(None if x is None else P(None, AXIS) for x in xs)


def ring_attention(
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
    """Ring attention over the ambient mesh's ``sequence`` axis (see module docstring).

    Args:
      q, k, v: ``[B, T, H, D]``, ``[B, T, H, D]``, ``[B, T, H, Dv]`` (global arrays, any
        sharding; run sharded over ``sequence`` along T).
      causal, mask, segment_ids, scale, dropout_rate, dropout_rng: as ``dense``.
      block_q, block_k: block sizes of the per-device FlashAttention engine.

    Returns:
      ``[B, T, H, Dv]`` in the dtype of ``q``, sharded along T over ``sequence``. Without a
      ``sequence`` axis of more than one device this is ``dense.chunked_attention``.

    Raises:
      ValueError: when ``T != S`` or T is not a multiple of ``n`` (``2n`` when causal).
    """
    n = axis_size()
    if n == 1:  # no sequence axis (or of size 1): the ring is one device's chunked attention
        return blockwise.chunked_attention(
            q, k, v, causal=causal, mask=mask, segment_ids=segment_ids, scale=scale,
            dropout_rate=dropout_rate, dropout_rng=dropout_rng, block_q=block_q,
            block_k=block_k,
        )  # fmt: skip
    _check(q, k, causal, n, "ring")
    blockwise._check_not_forward_mode(q, k, v)
    numerics.check_dropout(dropout_rate, dropout_rng)
    km, q_seg, kv_seg = _normalize(q, k, mask, segment_ids)
    engine = dict(scale=scale, dropout_rate=dropout_rate, block_q=block_q, block_k=block_k)
    core = _ring_core(n, causal, engine)
    rng = dropout_rng if dropout_rate > 0.0 else None

    def body(q, k, v, km, q_seg, kv_seg, rng):
        if causal and n > 1:
            q, k, v, km, q_seg, kv_seg = (_to_zigzag(x, n) for x in (q, k, v, km, q_seg, kv_seg))
        out = core(q, k, v, (q_seg, (km, kv_seg), rng))
        return _from_zigzag(out, n) if causal and n > 1 else out

    args = (q, k, v, km, q_seg, kv_seg)
    fn = jax.shard_map(
        body,
        in_specs=(*_specs(*args), None if rng is None else P()),
        out_specs=P(None, AXIS),
        axis_names={AXIS},
        check_vma=False,
    )
    return fn(*args, rng)


# How each mechanism runs on a sequence-sharded model, or why it cannot, is declared where it
# is registered (``Mechanism.context_parallel`` / ``context_parallel_refusal``; config
# validation refuses the others when config.mesh.sequence > 1, before anything compiles):
# dense/causal run as ring or all-to-all attention ("ring"); Linformer runs sequence-sharded as
# it is ("sharded"); the block-sparse and flex patterns run on the ring with their empty steps
# skipped ("ring_sparse": ``seqjax.attention.ring_sparse``).
SEQUENCE_PARALLEL_IMPLEMENTATIONS = ("auto", "ring", "ulysses")


def refusal(mechanism: str) -> str | None:
    """One sentence on why ``mechanism`` cannot run with ``mesh.sequence > 1`` (None if it
    can: ``registry.context_parallel_refusal``)."""
    return registry.context_parallel_refusal(mechanism)


def config_problems(
    implementation: str, *, length: int, num_heads: int, n: int, tensor: int
) -> list[str]:
    """Problems of a ``dense``/``causal`` layer with ``implementation`` on a ``sequence``
    axis of ``n`` devices (one sentence each; config validation prefixes the field)."""
    out: list[str] = []
    if n <= 1:
        return out
    if implementation not in SEQUENCE_PARALLEL_IMPLEMENTATIONS:
        out.append(
            f"dense implementation {implementation!r} would gather the whole sequence on every "
            f"device with config.mesh.sequence={n}; valid: "
            f"{', '.join(SEQUENCE_PARALLEL_IMPLEMENTATIONS)}"
        )
        return out
    h = num_heads // tensor if num_heads % tensor == 0 else num_heads
    if implementation == "ulysses" and h % n:
        out.append(
            f"dense implementation 'ulysses' needs the heads per device ({h}) to be a multiple "
            f"of config.mesh.sequence={n}; valid: 'ring' or 'auto'"
        )
    uses_ring = implementation == "ring" or (implementation == "auto" and h % n)
    chunks = 2 * n if uses_ring else n
    if length % chunks:
        out.append(
            f"the input length {length} (config.data.seq_len/max_len) must be a multiple of "
            f"{chunks} = {'2 x ' if uses_ring else ''}config.mesh.sequence for "
            f"{'ring (zigzag causal placement)' if uses_ring else 'all-to-all'} attention"
        )
    return out


def sparse_config_problems(names, *, length: int, n: int, positional: str) -> list[str]:
    """Problems of the block-sparse/flex layers ``names`` on a ``sequence`` axis of ``n``
    devices (``ring_sparse``; one sentence each, config validation prefixes the field)."""
    used = [nm for nm in names if registry.capable(nm, "context_parallel", "ring_sparse")]
    if n <= 1 or not used:
        return []
    out = []
    if length % n:
        out.append(
            f"the input length {length} (config.data.seq_len/max_len) must be a multiple of "
            f"config.mesh.sequence={n} for {', '.join(used)} on the ring"
        )
    if positional in ("alibi", "t5_bias"):
        out.append(
            f"{', '.join(used)} on the ring cannot add the score bias of "
            f"config.model.positional={positional!r}; valid there: a position embedding or "
            "'rope'"
        )
    return out
