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
    *,
    num_params: int,
    lookup_params: int,
    num_layers: int,
    d_model: int,
    seq_len: int,
    attn_width: int | None = None,
    key_len: int | None = None,
) -> float:
    """Training FLOPs per sequence of a decoder LM: ``6 N T + 12 L T S (H Q)``.

    PaLM (Chowdhery et al. 2022, App. B) counts ``12 L H Q T`` per token for the scores and
    the weighted values (forward and backward): ``H Q`` = heads x head dim (the attention
    width, which equals ``d`` only when ``head_dim = d / H``) and ``T`` keys per query; with
    a memory (Transformer-XL) each query sees ``S = T + M`` keys.

    Args:
      num_params: all parameters.
      lookup_params: parameters used only as lookup tables, with no matmul: learned
        position tables, and the token table when the output projection is not tied to it
        (a tied table is also the logits matmul, so it counts).
      num_layers, d_model, seq_len: L, d, T.
      attn_width: H Q (None: d_model).
      key_len: S, keys each query sees (None: T).
    """
    n = num_params - lookup_params
    width = d_model if attn_width is None else attn_width
    keys = seq_len if key_len is None else key_len
    return 6.0 * n * seq_len + 12.0 * num_layers * seq_len * keys * width


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


def train_flops_per_step(
    model_cfg,
    params,
    *,
    batch_size: int,
    seq_len: int,
    tied_output: bool,
    mem_len: int = 0,
    relative: bool = False,
) -> float:
    """Analytic model FLOPs of one training step of a seqjax model (``analytic_lm_flops``).

    Lookup-only tables: learned positions, and the token table unless ``tied_output`` (it
    is also the output projection: an LM with ``tie_embeddings``; the task says,
    ``seqjax.tasks.Task.flops_per_step``). Attention is counted dense (``12 L T S H Q``) for
    every mechanism, so a sparse model's MFU is its dense-equivalent utilization. A model
    config without attention fields (another family) counts ``6 N`` per token for all N.

    A memory of ``mem_len`` positions (Transformer-XL, Dai et al. 2019 §3.2-3.3) adds what
    runs for it: each query sees ``S = T + M`` keys; the keys and values of the memory are
    projected in the forward pass only (``4 L M d H Q``, no gradient flows into the memory);
    with ``relative`` attention the position term ``Q (W_R R)^T`` is a second score matrix
    (``6 L T S H Q``) and ``W_R`` projects ``S`` positions, not ``T`` tokens.
    """
    num_params = sum(int(x.size) for x in jax.tree.leaves(params))
    if not hasattr(model_cfg, "num_heads"):  # a family without attention layers (an RNN)
        return 6.0 * num_params * seq_len * batch_size  # every parameter in a matmul
    d = model_cfg.d_model
    width = model_cfg.num_heads * model_cfg.dim_head
    lookup = model_cfg.max_len * d if getattr(model_cfg, "positional", "") == "learned" else 0
    if not tied_output:
        lookup += model_cfg.vocab_size * d
    L, T, M = model_cfg.num_layers, seq_len, int(mem_len)
    S = T + M
    per_seq = analytic_lm_flops(
        num_params=num_params, lookup_params=min(lookup, num_params),
        num_layers=L, d_model=d, seq_len=T, attn_width=width, key_len=S,
    )  # fmt: skip
    per_seq += 4.0 * L * M * d * width  # memory keys/values, forward only
    if relative:
        per_seq += 6.0 * L * T * S * width  # the position scores (forward + backward)
        per_seq += 6.0 * L * (S - T) * d * width  # W_R over S positions (T are in 6 N T)
    return batch_size * per_seq


def parse_profile_steps(value) -> tuple[int, int] | None:
    """``config.train.profile_steps`` ("start,stop", e.g. "10,20"; "" = off) -> (start, stop).

    Raises:
      ValueError: naming the field and the valid form.
    """
    if value in (None, "", ()):
        return None
    parts = value.split(",") if isinstance(value, str) else list(value)
    try:
        start, stop = (int(p) for p in parts)
    except (TypeError, ValueError):
        start = stop = -1
    if not 1 <= start < stop:
        raise ValueError(
            f"config.train.profile_steps={value!r} is invalid; valid: 'start,stop' with "
            "1 <= start < stop (steps to trace with jax.profiler), or '' for none"
        )
    return start, stop
