"""Model FLOPs, device peaks and MFU (model FLOPs utilization; Chowdhery et al. 2022, App. B).

MFU = (model FLOPs per step / step time) / (peak FLOP/s of the devices). Model FLOPs are
counted two ways and the run header says which one MFU uses:

* ``analytic``: ``6 N`` per token for the parameter matmuls (forward + backward, N the
  non-embedding parameters plus the output projection) and ``12 L T d`` per token for the
  attention scores and values (PaLM's formula; causal attention counted in full, as PaLM
  does, so MFU is comparable across papers);
* ``xla``: ``compiled.cost_analysis()["flops"]`` of the jitted train step (what XLA
  counts, including the optimizer and element-wise work; 0 where the backend has no count).

Peaks are dense bf16 tensor-core FLOP/s per chip from the vendors' data sheets (no
structured sparsity). CPUs have no entry: MFU is not reported there.
"""

from __future__ import annotations

import jax

PEAK_BF16_FLOPS = {
    # NVIDIA (SXM unless named)
    "H200": 989e12,
    "H100 PCIe": 756e12,
    "H100": 989e12,
    "A100": 312e12,
    "L40S": 362e12,
    "A10G": 70e12,
    "V100": 125e12,  # fp16 tensor cores (V100 has no bf16)
    # Google TPUs (per chip)
    "TPU v6": 918e12,
    "TPU v5p": 459e12,
    "TPU v5 lite": 197e12,
    "TPU v5e": 197e12,
    "TPU v4": 275e12,
    "TPU v3": 123e12,
}


def peak_flops(device=None) -> float | None:
    """Dense bf16 peak FLOP/s of one device (None when unknown, e.g. on CPU)."""
    device = device if device is not None else jax.devices()[0]
    kind = getattr(device, "device_kind", "") or ""
    for name, peak in PEAK_BF16_FLOPS.items():  # most specific names first
        if name.lower() in kind.lower():
            return peak
    return None


def analytic_lm_flops(
    *, num_params: int, lookup_params: int, num_layers: int, d_model: int, seq_len: int
) -> float:
    """Training FLOPs per sequence of a decoder LM: ``6 N T + 12 L T^2 d``.

    Args:
      num_params: all parameters.
      lookup_params: parameters used only as lookup tables, with no matmul: learned
        position tables, and the token table when the output projection is not tied to it
        (a tied table is also the logits matmul, so it counts).
      num_layers, d_model, seq_len: L, d, T.
    """
    n = num_params - lookup_params
    return 6.0 * n * seq_len + 12.0 * num_layers * seq_len * seq_len * d_model


def compiled_flops(compiled) -> float:
    """XLA's FLOP count of a compiled computation (0.0 when the backend gives none)."""
    try:
        cost = compiled.cost_analysis()
    except Exception:  # noqa: BLE001 (some backends do not implement it)
        return 0.0
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else None
    return float(cost.get("flops", 0.0)) if cost else 0.0


def mfu(flops_per_step: float, step_seconds: float, num_devices: int, device=None):
    """Model FLOPs utilization in [0, 1] (None without a known peak)."""
    peak = peak_flops(device)
    if not peak or step_seconds <= 0:
        return None
    return flops_per_step / step_seconds / (peak * num_devices)
