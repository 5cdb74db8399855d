"""XLNet's memory across training batches (Yang et al. 2019 §2.4 and appendix A.2: the
segment recurrence of Transformer-XL, with the ``reuse_len`` halves), as the recurrent model
kind ``config.model.kind = "xlnet"`` (``seqjax.models.memory``).

Each row of every batch continues a contiguous stream of the corpus by ``reuse_len`` tokens
(``data.lm_batching = "stream"``, stride ``data.plm_reuse_len``; ``seqjax.data.plm``): the
window of step ``s`` covers ``[s R, s R + T)``, and the memory after it holds, for every
layer, the layer inputs of the first ``R`` positions, the last ``model.mem_len`` kept
(``xlnet.cache_memory``, the reference's ``_cache_mem``). So the memory always ends right
where the next window starts, as in the reference's data (``i += reuse_len``). The memory
starts as zeros that every query may attend to, as the reference's training initialises
``mems`` (``train_gpu.py``); it is emptied again where the streams start over.

Legend: B batch, M ``mem_len``, E width, T window, R ``reuse_len``.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from seqjax.models import memory as memory_lib
from seqjax.models.xlnet import XLNet

KIND = "xlnet"


class XLNetWithMemory(XLNet):
    """``XLNet`` (the same parameters) with the recurrent calling convention:
    ``apply(params, tokens_BT, memory, **kw) -> (logits, new_memory)``; without ``memory``
    it is ``XLNet`` (logits only). ``memory``: ``num_layers`` arrays ``[B, M, E]``."""

    def init_memory(self, batch: int):
        """Zeros ``[B, M, E]`` for each layer (visible, as the reference starts)."""
        cfg = self.cfg
        return tuple(
            jnp.zeros((batch, cfg.mem_len, cfg.d_model), jnp.float32) for _ in range(cfg.num_layers)
        )

    def __call__(self, tokens_BT, memory=None, **kwargs):
        if memory is None:
            return super().__call__(tokens_BT, **kwargs)
        logits, (new_mems, _) = super().__call__(
            tokens_BT, mems=memory, return_state=True, **kwargs
        )
        return logits, tuple(new_mems)


def _lengths(config) -> dict:
    """The window ``data.seq_len`` (streams are corpus windows), ``model.mem_len`` and
    ``data.plm_reuse_len`` (default ``seq_len // 2``, as ``seqjax.data.plm``)."""
    t = int(config.data.seq_len)
    reuse = int(config.data.get("plm_reuse_len") or t // 2)
    return {"tgt_len": t, "mem_len": int(config.model.mem_len), "reuse_len": reuse}


def _model(cfg, lengths: dict) -> XLNetWithMemory:
    keys = ("mem_len", "reuse_len")
    return XLNetWithMemory(dataclasses.replace(cfg, **{k: lengths[k] for k in keys}))


def _validate(config, bad) -> None:
    """The memory kind needs the XLNet family, the permutation LM over contiguous streams
    and a memory length; one update per batch (the memory moves on with every batch)."""
    m, d, o = config.model, config.data, config.optimizer
    if m.get("family") != "xlnet":
        bad("model.family", m.get("family"), f"'xlnet' with model.kind={KIND!r}")
    if d.get("objective") != "plm":
        bad("data.objective", d.get("objective"), f"'plm' with model.kind={KIND!r}")
    if d.get("lm_batching") != "stream":
        bad("data.lm_batching", d.get("lm_batching"), f"'stream' with model.kind={KIND!r}")
    mem_len = m.get("mem_len", 0)
    if not isinstance(mem_len, int) or isinstance(mem_len, bool) or mem_len < 1:
        bad("model.mem_len", mem_len, f"an integer >= 1 with model.kind={KIND!r}")
    if o.get("grad_accum_steps", 1) != 1:
        bad("optimizer.grad_accum_steps", o.grad_accum_steps, f"1 with model.kind={KIND!r}")


RECURRENCE = memory_lib.register(
    memory_lib.Recurrence(
        kind=KIND,
        train_model=lambda cfg, config: _model(cfg, _lengths(config)),
        eval_lengths=_lengths,
        eval_model=_model,
        attention_options=lambda config, options: options,
        validate=_validate,
    )
)
