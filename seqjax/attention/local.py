"""Block-local attention: the "Local Attention" baseline of the Long Range Arena.

The sequence is cut into consecutive, non-overlapping blocks of ``block_len`` positions and
each query attends to the keys of its own block only (Tay et al. 2020, LRA §4 "Local
Attention"; the local-attention model of the LRA code base): position i sees j iff
``i // block_len == j // block_len`` (and j <= i when causal). Time and memory
O(T block_len).

It is one pattern of ``flex`` (``seqjax.attention.flex``): ``BlockLocal`` is a hashable mask
function, so the key-block table is derived once and only the diagonal blocks are computed
by the block-sparse engines (exactly the blocks of the pattern when ``block_len`` is a
multiple of the engine's ``block_size``). All common options (padding mask, causal,
segment ids, dropout, scale) are flex's.

Legend: B batch, T query length, S key length, H heads, D head dim.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from seqjax.attention import flex, registry

DEFAULT_BLOCK_LEN = 64
OPTIONS = ("block_len", "block_size", "implementation")


@dataclasses.dataclass(frozen=True)
class BlockLocal:
    """Mask function ``(q_idx, k_idx) -> bool``: same block of ``block_len`` positions."""

    block_len: int

    def __call__(self, q, k):
        return (q // self.block_len) == (k // self.block_len)


def check_block_len(block_len) -> int:
    """Validates ``block_len`` (one clear error naming the option)."""
    v = block_len
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise ValueError(
            f"local option block_len={v!r} must be a positive integer (the length of each "
            "attention block; set config.model.attention_options.local.block_len)"
        )
    return int(v)


def local_attention(
    q_BTHD,
    k_BSHD,
    v_BSHD,
    *,
    block_len=DEFAULT_BLOCK_LEN,
    block_size=None,
    implementation="auto",
    **common,
):
    """Block-local attention (module docstring), registered as ``"local"``.

    Args:
      q_BTHD, k_BSHD, v_BSHD: ``[B, T, H, D]``, ``[B, S, H, D]``, ``[B, S, H, Dv]``.
      block_len: positions per attention block.
      block_size: the engines' block (default: ``block_len`` capped at 64; a power of two
        >= 16 for the Pallas kernels).
      implementation: flex's (``masked`` is the dense ground truth).
      common: causal, mask, segment_ids, dropout_rate, dropout_rng, scale.

    Returns:
      ``[B, T, H, Dv]`` in the dtype of ``q``.
    """
    block_len = check_block_len(block_len)
    if block_size is None:
        block_size = min(block_len, 64)
    return flex.flex_attention(
        q_BTHD, k_BSHD, v_BSHD, mask_fn=BlockLocal(block_len), block_size=block_size,
        implementation=implementation, **common,
    )  # fmt: skip


def _validate(options: dict, seq_len: int) -> None:
    """Config-time check of the options (called before anything compiles)."""
    del seq_len
    check_block_len(options.get("block_len", DEFAULT_BLOCK_LEN))
    impl = options.get("implementation", "auto")
    if impl not in flex.IMPLEMENTATIONS:
        raise ValueError(
            f"local option implementation={impl!r} is not one of {flex.IMPLEMENTATIONS}"
        )
    bs = options.get("block_size")
    if bs is not None and (isinstance(bs, bool) or not isinstance(bs, (int, np.integer)) or bs < 1):
        raise ValueError(f"local option block_size must be a positive integer; got {bs!r}")


registry.register(
    registry.Mechanism(
        name="local",
        fn=local_attention,
        options=OPTIONS,
        validate=_validate,
        doc="LRA block-local attention: non-overlapping blocks of block_len (a flex pattern)",
        packing_period=lambda options, row_len: int(options.get("block_len", DEFAULT_BLOCK_LEN)),
        decode_cache="pattern",
        context_parallel="ring_sparse",
    )
)
