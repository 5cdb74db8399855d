"""PyTorch peers of the accelerator benchmark (``run.py``), timed in the same process and
interleaved with the seqjax contenders.

* ``train``: nanoGPT's GPT (``experiments/char_lm_quality/nanogpt_torch.py``: Karpathy's
  ``model.py``, bias-free, tied ``lm_head``) at the benchmark's shape, one training
  iteration of nanoGPT's ``train.py`` per call (bf16 autocast, cross-entropy, backward,
  ``clip_grad_norm_`` 1.0, AdamW ``fused`` on CUDA, ``zero_grad``): ``torch_compile``
  (``torch.compile(model)``, inductor on CUDA) and ``torch_eager``.
* ``dense``: ``F.scaled_dot_product_attention`` fwd+bwd (``torch_sdpa``; PyTorch picks
  its backend: the flash kernel for bf16 on a recent NVIDIA GPU).
* ``sparse``: FlexAttention (Dong et al. 2024) with the Sparse Transformer strided and
  fixed masks as ``mask_mod`` functions (the same sets as
  ``seqjax.attention.sparse_patterns``), block mask built once, ``torch.compile``'d
  ``flex_attention`` fwd+bwd.

On a CPU (``--scale smoke``: the script's dry run) the peers run at toy sizes with two
documented differences, recorded in the rows' ``notes``: ``torch.compile`` uses the
``aot_eager`` backend (inductor's C++ build takes minutes on a small CPU; the GPU path is
inductor's Triton code, which no CPU run checks), and FlexAttention runs forward only
(PyTorch has no FlexAttention backward on CPU).

Every peer is a ``fn(*jax_args)`` that ignores the JAX arrays, runs on its own torch
tensors of the same shapes, and synchronises the device before returning, so
``run.interleaved`` times it like a JAX contender. Absent torch: no peers (``available``).

Legend: B batch, T length, H heads, D head dim, V vocabulary, l stride, c summary cells.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

HERE = Path(__file__).resolve().parent
NANOGPT = HERE.parent / "char_lm_quality" / "nanogpt_torch.py"


def available() -> bool:
    return importlib.util.find_spec("torch") is not None


def _torch():
    import torch

    return torch


def device():
    torch = _torch()
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _sync(dev) -> None:
    if dev.type == "cuda":
        _torch().cuda.synchronize()


def _nanogpt():
    spec = importlib.util.spec_from_file_location("nanogpt_torch", NANOGPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def version() -> str:
    return _torch().__version__ if available() else "not installed"


# ---- train ------------------------------------------------------------------------------


def train_peers(tokens_np, *, vocab: int, layers: int, heads: int, width: int):
    """``({name: fn}, info)``: one nanoGPT iteration per call on ``tokens_np [B, T + 1]``;
    ``info`` has the peer's parameter counts (for its model FLOPs) and notes."""
    torch = _torch()
    F = torch.nn.functional
    dev = device()
    gpt = _nanogpt()
    t = tokens_np.shape[1] - 1
    x = torch.from_numpy(tokens_np[:, :-1]).long().to(dev)
    y = torch.from_numpy(tokens_np[:, 1:]).long().to(dev)
    fns, info = {}, {"notes": {}}
    for name in ("torch_compile", "torch_eager"):
        torch.manual_seed(0)
        model = gpt.GPT(vocab, t, layers, heads, width).to(dev)
        params = [p for p in model.parameters() if p.requires_grad]
        groups = [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
        opt = torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), fused=dev.type == "cuda")
        run_model = model
        if name == "torch_compile":
            backend = "inductor" if dev.type == "cuda" else "aot_eager"
            run_model = torch.compile(model, backend=backend)
            if backend != "inductor":
                info["notes"][name] = f"torch.compile backend={backend} on {dev.type}"

        def step(*_, m=run_model, opt=opt, params=params):
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
                logits = m(x)
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), y.view(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            _sync(dev)
            return None

        fns[name] = step
        n = sum(p.numel() for p in params)  # wte counted once (tied lm_head)
        info["params"] = int(n)
        info["lookup_params"] = int(model.wpe.weight.numel())
    return fns, info


# ---- attention --------------------------------------------------------------------------


def _qkv(b, t, h, d, dev, dtype, seed=0):
    torch = _torch()
    g = torch.Generator(device="cpu").manual_seed(seed)
    qkv = [torch.randn(b, h, t, d, generator=g, dtype=torch.float32) for _ in range(4)]
    return [z.to(device=dev, dtype=dtype) for z in qkv]


def _fwd_bwd(attend, q, k, v, ct, dev, backward=True):
    """``fn(*_)``: ``attend(q, k, v)`` and its backward against ``ct``, synchronised."""
    torch = _torch()
    if backward:
        q, k, v = (z.detach().requires_grad_(True) for z in (q, k, v))

    def fn(*_):
        if backward:
            out = attend(q, k, v)
            grads = torch.autograd.grad(out, (q, k, v), ct)
            del grads
        else:
            with torch.no_grad():
                attend(q, k, v)
        _sync(dev)
        return None

    return fn


def sdpa_peer(b, t, h, d, *, causal: bool):
    """``torch_sdpa`` fwd+bwd, bf16 ``[B, H, T, D]``."""
    torch = _torch()
    dev = device()
    q, k, v, ct = _qkv(b, t, h, d, dev, torch.bfloat16)
    F = torch.nn.functional
    return _fwd_bwd(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
        q, k, v, ct, dev,
    )  # fmt: skip


def strided_mask(stride: int):
    """Child et al. §4.2 (causal): ``i - l <= j <= i`` or ``(i - j) mod l = 0``."""

    def mask_mod(b, h, q_idx, kv_idx):
        dist = q_idx - kv_idx
        return (dist >= 0) & ((dist <= stride) | (dist % stride == 0))

    return mask_mod


def fixed_mask(stride: int, c: int):
    """Child et al. §4.3 (causal): same block of l, or ``j mod l >= l - c`` (seqjax's c)."""

    def mask_mod(b, h, q_idx, kv_idx):
        same_block = (q_idx // stride) == (kv_idx // stride)
        summary = (kv_idx % stride) >= (stride - c)
        return (kv_idx <= q_idx) & (same_block | summary)

    return mask_mod


def flex_peers(b, t, h, d, *, stride: int, c: int):
    """``({flex_strided, flex_fixed}: fn, notes)``: compiled FlexAttention fwd+bwd (CPU:
    eager, forward only)."""
    torch = _torch()
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    dev = device()
    on_gpu = dev.type == "cuda"
    q, k, v, ct = _qkv(b, t, h, d, dev, torch.bfloat16)
    attend = torch.compile(flex_attention) if on_gpu else flex_attention
    fns, notes = {}, {}
    for name, mask_mod in (("flex_strided", strided_mask(stride)),
                           ("flex_fixed", fixed_mask(stride, c))):  # fmt: skip
        block_mask = create_block_mask(mask_mod, None, None, t, t, device=str(dev))
        fns[name] = _fwd_bwd(
            lambda q, k, v, bm=block_mask: attend(q, k, v, block_mask=bm),
            q, k, v, ct, dev, backward=on_gpu,
        )  # fmt: skip
        if not on_gpu:
            notes[name] = "forward only, eager: PyTorch has no FlexAttention backward on CPU"
    return fns, notes


def dense_mask(mask_mod, t: int):
    """The ``[T, T]`` boolean matrix of a ``mask_mod`` (query, key), for checks."""
    torch = _torch()
    return mask_mod(0, 0, torch.arange(t)[:, None], torch.arange(t)[None, :]).numpy()
