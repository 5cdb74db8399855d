"""PyTorch nanoGPT, the peer of ``peers.py``: nanoGPT's published GPT (Karpathy, ``model.py``)
and its training-loop body (``train.py``), written for this project.

Architecture (``bias=False``, ``dropout=0.0``, as nanoGPT's shakespeare_char CPU command):
token embedding ``wte`` + learned positions ``wpe``; ``n_layer`` pre-LayerNorm blocks
``x + attn(ln_1(x))``, ``x + mlp(ln_2(x))`` with a fused ``c_attn`` [E, 3E] projection,
causal ``scaled_dot_product_attention``, ``c_proj`` [E, E], and an MLP ``c_fc`` [E, 4E] ->
exact GELU -> ``c_proj`` [4E, E]; final ``ln_f``; ``lm_head`` sharing ``wte``'s weight.
Initialization N(0, 0.02), residual projections (``c_proj``) N(0, 0.02 / sqrt(2 n_layer)).

Training step: AdamW (``betas``, decay on parameters of >= 2 dims, none on the rest), the
learning rate of nanoGPT's ``get_lr`` (linear warm-up ``lr * (it + 1) / (warmup + 1)``,
then cosine to ``min_lr`` at ``max_iters``), cross-entropy, ``zero_grad(set_to_none=True)``,
backward, ``clip_grad_norm_`` at ``grad_clip``, ``step``; eager (no ``torch.compile``).

Legend: B batch, T context, E width, H heads, V vocabulary.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=False)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=False)

    def forward(self, x_BTE):
        b, t, e = x_BTE.shape
        q, k, v = self.c_attn(x_BTE).split(e, dim=2)
        # [B, T, E] -> [B, H, T, E / H]
        q, k, v = (z.view(b, t, self.n_head, e // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, e))


class MLP(nn.Module):
    def __init__(self, n_embd: int):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=False)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=False)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, bias=False)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd, bias=False)
        self.mlp = MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size: int, block_size: int, n_layer: int, n_head: int, n_embd: int):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd, bias=False)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as nanoGPT
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    def forward(self, idx_BT):
        t = idx_BT.shape[1]
        pos = torch.arange(t, dtype=torch.long, device=idx_BT.device)
        x = self.wte(idx_BT) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def nanogpt_lr(it: int, lr: float, warmup: int, decay_iters: int, min_lr: float) -> float:
    """nanoGPT's ``get_lr``: linear warm-up, cosine to ``min_lr`` at ``decay_iters``."""
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    if it > decay_iters:
        return min_lr
    ratio = (it - warmup) / max(decay_iters - warmup, 1)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def make_optimizer(model: GPT, hp):
    """AdamW with decay on >= 2-D parameters only (nanoGPT's ``configure_optimizers``)."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": hp.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=hp.lr, betas=tuple(hp.betas))


def make_torch_peer(hp, vocab_size: int, batches, steps: int, seed: int = 0):
    """``(step, val_loss)``: one nanoGPT training iteration per ``step()`` call on the next
    batch of ``batches`` (numpy ``(x_BT, y_BT)``), and the mean validation loss."""
    torch.manual_seed(seed)
    model = GPT(vocab_size, hp.block_size, hp.n_layer, hp.n_head, hp.n_embd)
    opt = make_optimizer(model, hp)
    box = {"i": 0}

    def step():
        it = box["i"]
        x, y = batches[it % len(batches)]
        box["i"] += 1
        lr = nanogpt_lr(it, hp.lr, hp.warmup, steps, hp.min_lr)
        for group in opt.param_groups:
            group["lr"] = lr
        x_t, y_t = torch.from_numpy(x).long(), torch.from_numpy(y).long()
        logits = model(x_t)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y_t.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if hp.grad_clip:
            nn.utils.clip_grad_norm_(model.parameters(), hp.grad_clip)
        opt.step()
        return loss.detach()

    @torch.no_grad()
    def val_loss(val_batches) -> float:
        model.eval()
        losses = []
        for x, y in val_batches:
            logits = model(torch.from_numpy(x).long())
            losses.append(F.cross_entropy(logits.view(-1, logits.size(-1)),
                                          torch.from_numpy(y).long().view(-1)).item())  # fmt: skip
        model.train()
        return float(sum(losses) / len(losses))

    step.model = model
    return step, val_loss
