"""Tiles of the Pallas block-table kernels sized from the device's shared-memory budget.

Triton keeps a kernel's dot operands and its software-pipelined loads in shared memory;
a tile that asks for more than one block may use fails in the device compiler
(``RESOURCE_EXHAUSTED: Shared memory size limit exceeded``), after everything else has
compiled. ``plan`` picks the tiles, ``num_warps`` and ``num_stages`` for the three kernels
of ``pallas_blocks`` (forward; backward dK/dV; backward dQ) so that the estimate of each
kernel's shared memory fits the budget of the device, and every Pallas caller (``dense``,
``sparse_*``, ``flex``, ``local``, the score-mod kernels) takes its tiles from it.

The figures (bytes) are the compiler's: ``pallas_smem.TABLE`` holds each kernel's shared
memory as XLA's GPU compiler (Triton) allocates it, for every square tile, padded head dim,
element size and pipeline depth the planner can choose, compiled with a key mask, segment
ids and dropout (so the figure bounds every caller's), generated on a compile-only H100 by
``experiments/accelerator/smem_table.py`` and re-checked by
``tests/accelerator/test_compile_gpu.py`` (issue 49). The T5 bias adds its table's gradient to
dK/dV (``learned_bias``: ``pallas_smem.T5_DKDV_PER_ELEMENT`` bytes per tile element).

Where the table has no entry (tiles of two sizes, 1-byte elements) the estimate stands in
(``st`` = num_stages, ``e`` = the element size of q/k/v, the dims padded to the kernels'
powers of two; FlashAttention-2, Dao 2023, Alg. 1-2 loop structure):

* forward:  ``e (bq D + st bk (D + Dv)) + e bq bk`` — the resident query tile, ``st``
  pipelined key and value tiles, and the probabilities re-laid out as a dot operand;
* dK/dV:    ``e (bk (D + Dv) + st bq (D + Dv)) + 8 st bq + 2 e bq bk`` — resident key and
  value tiles, pipelined query and output-gradient tiles with their two float32 row
  statistics, and ``P^T`` and ``dS^T`` as dot operands;
* dQ:       ``e (bq (D + Dv) + st bk (D + Dv)) + e bq bk``;

plus the per-block mask rows (key mask, segment ids: ``4 st (bq + bk)``). Against the
compiler's figures it is safe but loose (the operand re-layouts are not all allocated).

The budget (bytes of shared memory one block may opt in to): read from the device where
JAX exposes it, else from its compute capability, else a table by ``device_kind``; with no
GPU at hand (CPU, lowering for ``cuda`` on a CPU host) ``DEFAULT_BUDGET``, the smallest of
the current parts, so tiles planned anywhere fit everywhere. ``SEQJAX_PALLAS_SMEM_BYTES``
overrides it.

Legend: T query length, S key length, D/Dv head dims, bq/bk tiles.
"""

from __future__ import annotations

import dataclasses
import functools
import os

import jax
import numpy as np

from seqjax import compile_targets
from seqjax.attention import pallas_smem

KIB = 1024
# Shared memory one block may use (the opt-in maximum), by compute capability.
BUDGET_BY_CAPABILITY = {
    "7.0": 96 * KIB,  # V100
    "7.5": 64 * KIB,  # T4, RTX 20xx
    "8.0": 163 * KIB,  # A100, A800
    "8.6": 99 * KIB,  # A10, A40, RTX 30xx
    "8.7": 163 * KIB,  # Jetson Orin
    "8.9": 99 * KIB,  # L4, L40, RTX 40xx
    "9.0": 227 * KIB,  # H100, H200, GH200
    "10.0": 227 * KIB,  # B200, GB200
    "12.0": 99 * KIB,  # RTX 50xx
}
# The same by a substring of ``device_kind`` (when the capability is not exposed).
BUDGET_BY_KIND = (
    ("H100", 227 * KIB),
    ("H200", 227 * KIB),
    ("H800", 227 * KIB),
    ("GH200", 227 * KIB),
    ("B200", 227 * KIB),
    ("A100", 163 * KIB),
    ("A800", 163 * KIB),
    ("V100", 96 * KIB),
    ("T4", 64 * KIB),
    ("A10", 99 * KIB),
    ("A40", 99 * KIB),
    ("L4", 99 * KIB),
    ("RTX", 99 * KIB),
)
DEFAULT_BUDGET = 99 * KIB
ENV_BUDGET = compile_targets.PALLAS_BUDGET_ENV  # "SEQJAX_PALLAS_SMEM_BYTES"
# Square tiles, largest first (one size for the query and key tables: the sparse tables
# are built with one block size), and the pipeline depths tried for each.
TILES = (128, 64, 32, 16)
STAGES = (2, 1)
MIN_TILE = 16
# The largest padded head dim the kernels take (FlashAttention's limit too).
MAX_HEAD_DIM = 256
KERNELS = ("fwd", "dkdv", "dq")


def pow2_at_least_16(n: int) -> int:
    """The smallest power of two >= max(n, 16) (Triton block shapes)."""
    return max(MIN_TILE, 1 << (int(n) - 1).bit_length())


def pow2_at_most(n: int) -> int:
    """The largest power of two <= n (n >= 1)."""
    return 1 << (int(n).bit_length() - 1)


def budget_of(device) -> int:
    """Shared-memory bytes one block of ``device`` may use (module docstring)."""
    if device is None or getattr(device, "platform", "") != "gpu":
        return DEFAULT_BUDGET
    for attr in ("shared_memory_per_block_optin", "max_shared_memory_per_block_optin"):
        value = getattr(device, attr, None)
        if isinstance(value, (int, np.integer)) and value > 0:
            return int(value)
    capability = getattr(device, "compute_capability", None)
    if capability is not None and str(capability) in BUDGET_BY_CAPABILITY:
        return BUDGET_BY_CAPABILITY[str(capability)]
    kind = str(getattr(device, "device_kind", ""))
    for name, value in BUDGET_BY_KIND:
        if name in kind:
            return value
    return DEFAULT_BUDGET


def device_budget() -> int:
    """The budget of this process's first device (``SEQJAX_PALLAS_SMEM_BYTES`` wins)."""
    env = os.environ.get(ENV_BUDGET)
    if env:
        return int(env)
    return _first_device_budget()


@functools.lru_cache(maxsize=1)
def _first_device_budget() -> int:
    try:
        return budget_of(jax.devices()[0])
    except RuntimeError:  # no backend
        return DEFAULT_BUDGET


@dataclasses.dataclass(frozen=True)
class Plan:
    """Tiles and launch settings of the three kernels, with their shared-memory estimates.

    Attributes:
      block_q, block_k: query / key tiles (powers of two >= 16).
      num_warps, num_stages: Triton launch settings.
      head_dim, value_head_dim: the dims the kernels run at (padded to powers of two).
      smem: estimated bytes per kernel, ``{"fwd", "dkdv", "dq"}``.
      budget: the budget they were planned for.
    """

    block_q: int
    block_k: int
    num_warps: int
    num_stages: int
    head_dim: int
    value_head_dim: int
    smem: dict
    budget: int

    @property
    def fits(self) -> bool:
        return max(self.smem.values()) <= self.budget


def num_warps(bq: int, bk: int, d: int, dv: int) -> int:
    """Triton warps for the tiles: 8 for 128-row tiles or 64-row tiles of wide heads
    (FlashAttention-2's Triton settings), else 4 (small tiles cannot feed 8 warps)."""
    wide = max(d, dv) >= 128
    return 8 if max(bq, bk) >= 128 or (min(bq, bk) >= 64 and wide) else 4


def smem_estimate(bq: int, bk: int, d: int, dv: int, itemsize: int, stages: int) -> dict:
    """Estimated shared-memory bytes of each kernel (module docstring)."""
    e, st, dd = itemsize, stages, d + dv
    masks = 4 * st * (bq + bk)
    return {
        "fwd": e * (bq * d + st * bk * dd) + e * bq * bk + masks,
        "dkdv": e * (bk * dd + st * bq * dd) + 8 * st * bq + 2 * e * bq * bk + masks,
        "dq": e * (bq * dd + st * bk * dd) + e * bq * bk + masks,
    }


def smem_of(
    bq: int, bk: int, d: int, dv: int, itemsize: int, stages: int, *, learned_bias=False
) -> dict:
    """Shared-memory bytes of each kernel: the compiler's (``pallas_smem.TABLE``, at the
    larger head dim) for square tiles, else ``smem_estimate`` (module docstring)."""
    row = pallas_smem.TABLE.get((itemsize, max(d, dv), bq, stages)) if bq == bk else None
    if row is None:
        smem = smem_estimate(bq, bk, d, dv, itemsize, stages)
    else:
        smem = dict(zip(KERNELS, row))
    if learned_bias:
        smem["dkdv"] += int(np.ceil(pallas_smem.T5_DKDV_PER_ELEMENT * bq * bk))
    return smem


def check_head_dims(d: int, dv: int) -> str | None:
    """Why the kernels cannot take these head dims (None when they can)."""
    for name, x in (("head dim", d), ("value head dim", dv)):
        if x > MAX_HEAD_DIM:
            return f"{name} {x} is above the kernels' limit (valid: 1..{MAX_HEAD_DIM})"
    return None


def plan(
    t: int,
    s: int,
    d: int,
    dv: int | None = None,
    *,
    dtype=np.float32,
    max_block: int | None = None,
    budget: int | None = None,
    learned_bias: bool = False,
) -> Plan:
    """The largest square tile (and pipeline depth) whose kernels fit the budget.

    Args:
      t, s: query and key lengths (tiles never exceed their next power of two).
      d, dv: head dims of q/k and of v (``dv`` defaults to ``d``); padded to powers of two
        >= 16 as the kernels pad them.
      dtype: dtype of q, k, v.
      max_block: an upper bound on the tile (a pattern's block); tiles stay powers of two.
      budget: shared-memory bytes per block; default ``device_budget()``.
      learned_bias: the kernels carry T5's learned bias (its gradient in dK/dV).

    Raises:
      ValueError: for a head dim above ``MAX_HEAD_DIM``, or a budget no tile fits.
    """
    dv = d if dv is None else dv
    why = check_head_dims(d, dv)
    if why is not None:
        raise ValueError(f"Pallas attention kernels: {why}")
    budget = device_budget() if budget is None else int(budget)
    dp, dvp = pow2_at_least_16(d), pow2_at_least_16(dv)
    itemsize = np.dtype(dtype).itemsize
    cap = pow2_at_least_16(max(t, s))
    if max_block is not None:
        cap = min(cap, max(MIN_TILE, pow2_at_most(max_block)))
    for tile in TILES:
        if tile > cap:
            continue
        for stages in STAGES:
            smem = smem_of(tile, tile, dp, dvp, itemsize, stages, learned_bias=learned_bias)
            if max(smem.values()) <= budget:
                warps = num_warps(tile, tile, dp, dvp)
                return Plan(tile, tile, warps, stages, dp, dvp, smem, budget)
    raise ValueError(
        f"Pallas attention kernels: no tile fits the shared-memory budget of {budget} bytes "
        f"for head dims {d}/{dv} in {np.dtype(dtype).name} (valid: budgets >= "
        f"{max(smem_of(MIN_TILE, MIN_TILE, dp, dvp, itemsize, 1).values())} bytes)"
    )


def kernel_tile(
    t: int, s: int, d: int, dv: int, dtype, block: int, *, exact: bool, learned_bias=False
) -> int | None:
    """The kernels' tile for a caller whose pattern is laid out in blocks of ``block``:
    the planner's tile bounded by ``block`` (``exact``: a power of two dividing ``block``,
    for a fixed block layout that is refined, ``refine_layout``). None when no tile of at
    least 16 exists (the caller then runs the plain-JAX engine) or the head dims are above
    the kernels' limit."""
    bound = (block & -block) if exact else block
    if bound < MIN_TILE or check_head_dims(d, dv) is not None:
        return None
    return plan(t, s, d, dv, dtype=dtype, max_block=bound, learned_bias=learned_bias).block_q


def refine_layout(layout_QK: np.ndarray, block: int, tile: int, t: int, s: int) -> np.ndarray:
    """A bool block layout ``[ceil(T/block), ceil(S/block)]`` at ``tile``-sized blocks
    (``tile`` divides ``block``): ``[ceil(T/tile), ceil(S/tile)]``, the same elements."""
    r = block // tile
    fine = np.repeat(np.repeat(np.asarray(layout_QK, bool), r, axis=0), r, axis=1)
    return fine[: -(-t // tile), : -(-s // tile)]
