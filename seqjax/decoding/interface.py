"""The model-agnostic step interface shared by every search in ``seqjax.decoding``.

A model decodes through one function

    step_fn(tokens_N1, cache) -> (logits_NV, cache)

that takes the last token of each of N rows (int32 ``[N, 1]``) and its decoding state
(any pytree: a Flax ``"cache"`` collection, a recurrent memory, an encoder output) and
returns the next-token logits ``[N, V]`` and the new state, with the same structure,
shapes and dtypes. Every cache leaf of rank >= 1 is per row (leading axis N): beam search
reorders those by gathering along axis 0 when beams are re-ranked. Leaves of rank 0 (a
decode position counter such as Flax's ``cache_index``) are shared by all rows and left
as they are. Per-example state (``[B, ...]``, e.g. an encoder output) is tiled to the
beams with ``expand_to_beams``.

Legend: B batch, K beams, N = B * K rows, V vocabulary, T max_len.
"""

from __future__ import annotations

import numbers

import jax
import jax.numpy as jnp


def check_decode(*, batch_size, max_len, eos_id, start_id) -> None:
    """Raises ``ValueError`` for sizes or ids that no vocabulary can fix (checked in
    Python, before tracing)."""
    for name, value, low in (("batch_size", batch_size, 1), ("max_len", max_len, 1)):
        if not _is_int(value) or value < low:
            raise ValueError(f"{name}={value!r} must be an integer >= {low}")
    for name, value in (("eos_id", eos_id), ("start_id", start_id)):
        if not _is_int(value) or value < 0:
            raise ValueError(f"{name}={value!r} must be a token id (an integer >= 0)")


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def probe_step(step_fn, cache, rows: int, *, eos_id: int, start_id: int) -> int:
    """Checks ``step_fn``'s contract on abstract values (nothing compiles) and returns V.

    Raises ``ValueError`` naming what is wrong: a cache leaf whose leading axis is not
    ``rows``, logits not ``[rows, V]``, a returned cache that differs from the input in
    structure, shape or dtype, token ids outside the vocabulary.
    """
    for path, leaf in jax.tree_util.tree_leaves_with_path(cache):
        shape = jnp.shape(leaf)
        if len(shape) >= 1 and shape[0] != rows:
            raise ValueError(
                f"cache leaf {jax.tree_util.keystr(path)} has shape {shape}; every cache leaf "
                f"of rank >= 1 needs the rows (batch_size * beam_size = {rows}) as its leading "
                "axis (tile per-example state with expand_to_beams)"
            )
    tokens_N1 = jax.ShapeDtypeStruct((rows, 1), jnp.int32)
    logits, new_cache = jax.eval_shape(step_fn, tokens_N1, cache)
    if len(logits.shape) != 2 or logits.shape[0] != rows:
        raise ValueError(
            f"step_fn must return logits [N, V] with N = {rows}; got shape {logits.shape}"
        )
    want = jax.tree.map(lambda x: (jnp.shape(x), jnp.result_type(x)), cache)
    got = jax.tree.map(lambda x: (x.shape, x.dtype), new_cache)
    if jax.tree.structure(cache) != jax.tree.structure(new_cache) or want != got:
        raise ValueError(
            "step_fn must return a cache with the structure, shapes and dtypes of the one it "
            f"was given; given {want}, returned {got}"
        )
    vocab = int(logits.shape[1])
    if vocab < 2:
        raise ValueError(f"the vocabulary must have at least 2 tokens; step_fn gives V={vocab}")
    for name, value in (("eos_id", eos_id), ("start_id", start_id)):
        if value >= vocab:
            raise ValueError(f"{name}={value} is outside the vocabulary [0, {vocab})")
    return vocab


def expand_to_beams(tree, beam_size: int):
    """Tiles every ``[B, ...]`` leaf to ``[B * K, ...]`` (row ``b * K + k`` is example
    ``b``), the layout ``beam_search`` gives ``step_fn``; rank-0 leaves stay as they are."""
    if not _is_int(beam_size) or beam_size < 1:
        raise ValueError(f"beam_size={beam_size!r} must be an integer >= 1")

    def tile(x):
        x = jnp.asarray(x)
        return x if x.ndim == 0 else jnp.repeat(x, beam_size, axis=0)

    return jax.tree.map(tile, tree)


def gather_rows(tree, rows_N: jax.Array):
    """``leaf[rows_N]`` along axis 0 for every leaf of rank >= 1 (rank 0 unchanged)."""
    return jax.tree.map(lambda x: x if jnp.ndim(x) == 0 else jnp.take(x, rows_N, axis=0), tree)


def sequence_lengths(sequences_BT: jax.Array, eos_id: int) -> jax.Array:
    """int32 lengths ``[...]`` of decoded sequences: up to and including the first EOS, or
    T when there is none (the length the GNMT penalty uses)."""
    t = sequences_BT.shape[-1]
    is_eos_BT = sequences_BT == eos_id
    first_B = jnp.argmax(is_eos_BT, axis=-1)
    return jnp.where(is_eos_BT.any(-1), first_B + 1, t).astype(jnp.int32)


def length_penalty(length, alpha: float) -> jax.Array:
    """GNMT length penalty (Wu et al. 2016, eq. 14): ``lp(Y) = ((5 + |Y|) / 6) ** alpha``,
    float32; ``alpha = 0`` gives 1 (plain log-probability)."""
    length = jnp.asarray(length, jnp.float32)
    return ((5.0 + length) / 6.0) ** jnp.float32(alpha)
