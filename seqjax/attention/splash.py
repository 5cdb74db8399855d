"""TPU kernels: splash attention (``jax.experimental.pallas.ops.tpu.splash_attention``)
running any seqjax pattern, forward and backward.

Splash attention is the maintained block-sparse FlashAttention of the JAX team for TPUs: it
takes a per-head mask, derives which (query block, key block) tiles hold any visible pair,
and skips the rest in the forward and both backward kernels. seqjax hands it

* ``dense``/``causal``: a full or (bottom-right) causal mask;
* ``sparse_strided``/``sparse_fixed``: the per-head patterns of Child et al. 2019 §4.2-4.3
  (``sparse_patterns.head_layout``, so ``head_mode="split"`` and distinct summary blocks
  are per-head masks);
* ``flex``: any ``Pattern``/mask function.

Masks are lazy (a mask function evaluated on index tiles, never a ``T x T`` array in HBM).
Key padding and packed segments go through splash's segment ids: a padded key gets
segment -1, which no query has. Sequences are padded to a multiple of the 128-row tile.
Rows with no visible key are set to zero afterwards (seqjax's convention) when the
pattern alone can leave a row empty; rows emptied by key padding are zeroed through the
segment check below.

On a multi-device mesh the kernel runs under ``shard_map`` (XLA cannot partition a Mosaic
kernel): batch and, when all heads share one mask, heads split as the logical-axis rules
split ``"batch"`` and ``"heads"`` (``mesh_split``).

Off TPU (tests, CI) the kernels run in Pallas interpret mode. Attention dropout is not
supported (callers fall back to the plain-JAX engines).

Legend: B batch, T query length, S key length, H heads, D head dim.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from seqjax.attention import masks as masks_lib
from seqjax.attention import sparse_patterns as patterns

TILE = 128


@dataclasses.dataclass(frozen=True)
class SparseHeadMask:
    """One head's Sparse Transformer pattern (union of ``parts``) as a mask function."""

    parts: tuple
    stride: int
    c: int | None
    causal: bool
    summary_block: int = 0

    def __call__(self, q, k):
        xp = np if isinstance(q, np.ndarray) and isinstance(k, np.ndarray) else jnp
        m = None
        for part in self.parts:
            p = patterns.pattern_from_positions(
                xp, part, q, k, self.stride, c=self.c, causal=self.causal,
                summary_block=self.summary_block,
            )  # fmt: skip
            m = p if m is None else m | p
        return m


def default_interpret() -> bool:
    return jax.default_backend() != "tpu"


def _splash_modules():
    """The splash kernel and mask modules (imported on first use)."""
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

    return sk, sm


@functools.lru_cache(maxsize=1)
def _fn_mask_class():
    _, sm = _splash_modules()

    class FnMask(sm._ComputableMask):
        """A lazy ``[T, S]`` mask from ``fn(q_idx, k_idx)`` plus bottom-right causality
        (``fn`` already takes absolute query positions: ``masks.at_absolute``)."""

        def __init__(self, shape, fn: Callable | None, causal: bool, offset: int, valid_len):
            t, s = valid_len

            def mask_function(q, k):
                m = (q < t) & (k < s)
                if causal:
                    m = m & (k <= q + offset)
                if fn is not None:
                    m = m & fn(q, k)
                return m

            super().__init__(shape, mask_function)
            self._key = (shape, fn, causal, offset, valid_len)

        def __eq__(self, other):
            return isinstance(other, FnMask) and self._key == other._key

        def __hash__(self):
            return hash(self._key)

    return FnMask


@functools.lru_cache(maxsize=32)
def _kernel(head_fns: tuple, t: int, s: int, tp: int, sp: int, causal: bool, interpret: bool):
    """The splash kernel and its empty-row table, built once per argument set.

    The first call may come from inside a ``jit``/``eval_shape``/``grad`` trace, and
    ``make_splash_mha`` turns its mask info into arrays with ``jnp.array``: built there, the
    cached kernel would hold that trace's tracers and every later trace would fail with
    ``UnexpectedTracerError``. ``ensure_compile_time_eval`` builds it eagerly (concrete
    arrays, constants of every later trace) wherever the first call comes from, outside the
    caller's mesh (whose devices may be compile-only: ``seqjax.compile_targets``).
    """
    with _outside_mesh(), jax.ensure_compile_time_eval():
        return _build_kernel(head_fns, t, s, tp, sp, causal, interpret)


def _outside_mesh():
    """Eager ops on the default device, not the caller's mesh (``jax.set_mesh`` cannot be
    entered inside ``jit``; JAX's internal context does it)."""
    from jax._src import mesh as mesh_lib
    from jax._src import sharding_impls

    use = getattr(sharding_impls, "_internal_use_concrete_mesh", None)
    empty = getattr(mesh_lib, "empty_concrete_mesh", None)
    return contextlib.nullcontext() if use is None or empty is None else use(empty)


def _build_kernel(head_fns, t, s, tp, sp, causal, interpret):
    sk, sm = _splash_modules()
    fn_mask = _fn_mask_class()
    masks = [fn_mask((tp, sp), fn, causal, s - t, (t, s)) for fn in head_fns]
    block = min(TILE, tp, sp)
    sizes = sk.BlockSizes(
        block_q=block, block_kv=block, block_kv_compute=block,
        block_q_dkv=block, block_kv_dkv=block, block_kv_dkv_compute=block,
        block_q_dq=block, block_kv_dq=block,
    )  # fmt: skip
    kernel = sk.make_splash_mha(
        sm.MultiHeadMask(masks),
        block_sizes=sizes,
        head_shards=1,
        q_seq_shards=1,
        interpret=interpret,
    )
    # Rows the pattern leaves without any key (before padding/segments): zeroed afterwards.
    strips = range(0, tp, 1024)  # row strips: never a whole [T, S] array on the host
    empty_TH = np.stack(
        [
            np.concatenate([~np.asarray(m[i : min(i + 1024, tp), :]).any(1) for i in strips])
            for m in masks
        ],
        axis=1,
    )
    return kernel, empty_TH


def splash_attention(
    q,
    k,
    v,
    *,
    head_fns: Sequence[Callable | None] | Callable | None = None,
    causal=False,
    mask=None,
    segment_ids=None,
    scale=None,
    dropout_rate=0.0,
    interpret: bool | None = None,
):
    """Attention through splash attention under per-head masks.

    Args:
      q, k, v: ``[B, T, H, D]``, ``[B, S, H, D]``, ``[B, S, H, D]``.
      head_fns: a mask function ``fn(q_idx, k_idx) -> bool`` (numpy-evaluable, hashable)
        for every head, one per head, or None (dense).
      causal, mask, segment_ids, scale: the common options.
      interpret: Pallas interpret mode (default: everywhere but on TPU).

    Returns:
      ``[B, T, H, D]`` in the dtype of ``q``.
    """
    if dropout_rate > 0.0:
        raise ValueError("splash attention does not apply attention dropout; use dropout 0")
    b, t, h, d = q.shape
    s = k.shape[1]
    if not callable(head_fns) and head_fns is not None and len(head_fns) != h:
        raise ValueError(f"splash: {len(head_fns)} head masks for {h} heads")
    fns = tuple(head_fns) if isinstance(head_fns, (list, tuple)) else (head_fns,) * h
    # Patterns at absolute (bottom-right aligned) query positions, like causality.
    fns = tuple(masks_lib.at_absolute(fn, t, s) for fn in fns)
    interpret = default_interpret() if interpret is None else interpret
    tp, sp = -(-t // TILE) * TILE, -(-s // TILE) * TILE
    split = mesh_split(b, h, same_heads=len(set(fns)) == 1)
    h_local = h // split.heads_size if split else h
    kernel, empty = _kernel(fns[:h_local], t, s, tp, sp, causal, interpret)
    if h_local != h:  # every head has the same mask: the local heads' rows, repeated
        empty = np.repeat(empty[:, :1], h, axis=1)
    scale = scale if scale is not None else 1.0 / np.sqrt(d)

    def to_hts(x, n):  # [B, N, H, D] -> [B, H, Np, D]
        x = jnp.pad(x, ((0, 0), (0, n - x.shape[1]), (0, 0), (0, 0)))
        return x.transpose(0, 2, 1, 3)

    qh = to_hts(q * jnp.asarray(scale, q.dtype), tp)
    kh, vh = to_hts(k, sp), to_hts(v, sp)
    q_seg = kv_seg = None
    if segment_ids is not None:
        if isinstance(segment_ids, (tuple, list)):
            q_seg, kv_seg = segment_ids
        else:
            q_seg = kv_seg = segment_ids
    if mask is not None:
        km = jnp.broadcast_to(mask.astype(bool), (b, s))
        base = kv_seg if kv_seg is not None else jnp.zeros((b, s), jnp.int32)
        kv_seg = jnp.where(km, base, -1)
        if q_seg is None:
            q_seg = jnp.zeros((b, t), jnp.int32)
    segs = ()
    if q_seg is not None:
        q_seg = jnp.pad(q_seg.astype(jnp.int32), ((0, 0), (0, tp - t)), constant_values=-2)
        kv_seg = jnp.pad(kv_seg.astype(jnp.int32), ((0, 0), (0, sp - s)), constant_values=-1)
        segs = (jnp.broadcast_to(q_seg, (b, tp)), jnp.broadcast_to(kv_seg, (b, sp)))

    def call(qh, kh, vh, *segs):  # [B, H, Tp, D] (or this device's share)
        if not segs:
            return jax.vmap(kernel)(qh, kh, vh)
        seg = _splash_modules()[0].SegmentIds(q=segs[0], kv=segs[1])
        return jax.vmap(kernel)(qh, kh, vh, segment_ids=seg)

    if split:  # Mosaic kernels are not partitioned automatically: one call per device
        x_spec = P(split.batch, split.heads, None, None)
        call = jax.shard_map(
            call,
            mesh=split.mesh,
            in_specs=(x_spec,) * 3 + (P(split.batch, None),) * len(segs),
            out_specs=x_spec,
            check_vma=False,
        )
    out = call(qh, kh, vh, *segs)
    out = out.transpose(0, 2, 1, 3)[:, :t]
    row_empty = jnp.asarray(empty[:t])[None, :, :, None]
    if q_seg is not None:  # rows whose every visible key is padded or of another segment
        row_empty = row_empty | ~_rows_with_a_key(fns, q_seg[:, :t], kv_seg[:, :s], causal)
    return jnp.where(row_empty, 0, out).astype(q.dtype)


@dataclasses.dataclass(frozen=True)
class MeshSplit:
    mesh: object
    batch: tuple | None  # mesh axes of the batch dimension (None: whole on every device)
    heads: tuple | None  # mesh axes of the heads dimension
    heads_size: int


def mesh_split(b: int, h: int, *, same_heads: bool) -> MeshSplit | None:
    """How to call the kernel on the current multi-device mesh (None: no mesh, one device).

    Mosaic kernels cannot be partitioned by XLA ("wrap the call in a shard_map"), so on a
    mesh the kernel runs under ``shard_map``: the batch split as the logical axis rules
    (``flax.linen.logical_axis_rules``, e.g. ``seqjax.models.sharding_rules.RULES``) split
    ``"batch"``, and the heads as they split ``"heads"`` when every head has the same mask
    (a per-head pattern keeps all heads on every device). A dimension the axes do not divide,
    or that no rule names, is whole on every device (correct, replicated work). Meshes
    with ``Explicit`` axes are left to the caller (None).
    """
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or mesh.size == 1:
        return None
    if any(t != jax.sharding.AxisType.Auto for t in mesh.axis_types):
        return None  # explicit sharding: the caller places the arrays (seqjax's meshes are Auto)
    import flax.linen as nn  # the logical-axis rules in force (seqjax's models set them)

    spec = nn.logical_to_mesh_axes(("batch", "heads")) or (None, None)

    def fits(ax, n):
        if ax is None:
            return None, 1
        names = tuple(a for a in ((ax,) if isinstance(ax, str) else ax) if a in mesh.shape)
        size = math.prod(mesh.shape[a] for a in names)
        return (names, size) if names and n % size == 0 else (None, 1)

    batch, _ = fits(spec[0], b)
    heads, heads_size = fits(spec[1], h) if same_heads else (None, 1)
    return MeshSplit(mesh, batch, heads, heads_size)


def _rows_with_a_key(fns, q_seg, kv_seg, causal: bool, tile: int = TILE):
    """bool ``[B, T, H, 1]``: the row has a visible key (pattern, causality, segments).

    Evaluated tile by tile of queries (``[B, tile, S]`` at a time, never ``T x S``).
    """
    b, t = q_seg.shape
    s = kv_seg.shape[1]
    tp = -(-t // tile) * tile
    q_seg = jnp.pad(q_seg, ((0, 0), (0, tp - t)), constant_values=-2)
    k_idx = jnp.arange(s)[None, :]

    def one_tile(i):
        q_idx = i * tile + jnp.arange(tile)[:, None]
        seg = jax.lax.dynamic_slice_in_dim(q_seg, i * tile, tile, axis=1)
        same_BQS = seg[:, :, None] == kv_seg[:, None, :]
        if causal:
            same_BQS = same_BQS & (k_idx <= q_idx + (s - t))[None]
        per_head = [
            (same_BQS if fn is None else same_BQS & fn(q_idx, k_idx)[None]).any(-1) for fn in fns
        ]
        return jnp.stack(per_head, -1)  # [B, tile, H]

    has_key = jax.lax.map(one_tile, jnp.arange(tp // tile))  # [n, B, tile, H]
    has_key = has_key.transpose(1, 0, 2, 3).reshape(b, tp, len(fns))[:, :t]
    return has_key[..., None]
