"""Transformer-XL language model with segment-level recurrence (Dai et al. 2019, §3.2).

For layer n and segment tau+1 (eq. in §3.2):

    h~ = [SG(m_tau^{n-1}) ; h_{tau+1}^{n-1}]          memory and current segment
    q = h_{tau+1}^{n-1} W_q,   k, v = h~ W_k, h~ W_v     queries only from the segment
    h_{tau+1}^n = Block(q, k, v) with relative attention (``seqjax.attention.relative``)

The memory holds the last ``mem_len`` hidden states of every layer's input: ``n_layers + 1``
tensors (the embeddings included), updated as the last ``mem_len`` positions of
``concat(memory, hidden)`` under ``stop_gradient`` (memory first, then the new hidden
states: the argument order the PyTorch reference swaps). Memories have a fixed shape
``[B, mem_len, E]`` plus a validity mask ``[B, mem_len]`` so that the first segments (with
no or partial memory) compile to the same program as the rest.

Blocks are pre-LayerNorm like the rest of seqjax (the reference's ``pre_lnorm`` variant):
the LayerNorm is applied to ``[memory; segment]`` and the memory stores un-normalized
states.

Legend: B batch, T segment length, M memory length, E model width, V vocabulary.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from seqjax.models import layers
from seqjax.models.transformer import TransformerConfig, adaptive_embedding


class XLBlock(nn.Module):
    """Pre-LN block attending from the segment to ``[memory; segment]`` (§3.2): the shared
    ``layers.attention_sublayer`` with ``memory_BME``, then ``layers.feed_forward_sublayer``."""

    cfg: TransformerConfig
    layer: int

    @nn.compact
    def __call__(self, x_BTE, mem_BME, kv_mask_BS, deterministic, shared):
        cfg = self.cfg
        x_BTE = x_BTE + layers.attention_sublayer(
            cfg,
            self.layer,
            x_BTE,
            causal=True,
            memory_BME=mem_BME,
            mask_BS=kv_mask_BS,
            deterministic=deterministic,
            extra=shared,
        )
        x_BTE = x_BTE + layers.feed_forward_sublayer(cfg, x_BTE, deterministic=deterministic)
        return nn.with_logical_constraint(x_BTE, ("batch", "length", "embed"))


class TransformerXL(nn.Module):
    """Transformer-XL LM: ``(tokens [B, T], memory) -> (logits [B, T, V], new memory)``.

    Attributes:
      cfg: a ``TransformerConfig`` whose attention is ``"relative"`` (options
        ``same_length``, ``mem_len``, ``clamp_len``, ``untie_r``).
      mem_len: M, the number of positions kept in memory (0 disables recurrence).
    """

    cfg: TransformerConfig
    mem_len: int

    def init_memory(self, batch: int):
        """Empty memory: zeros ``[B, M, E]`` for each of the ``n_layers + 1`` inputs, and an
        all-False validity mask ``[B, M]``."""
        mems = tuple(
            jnp.zeros((batch, self.mem_len, self.cfg.d_model), jnp.float32)
            for _ in range(self.cfg.num_layers + 1)
        )
        return mems, jnp.zeros((batch, self.mem_len), bool)

    @nn.compact
    def __call__(self, tokens_BT, memory=None, *, deterministic=True):
        """Runs one segment.

        Args:
          tokens_BT: int ``[B, T]``.
          memory: ``(mems, valid_BM)`` from ``init_memory`` or a previous call; None means
            no memory at all (M = 0 for this call).
          deterministic: disables dropout.

        Returns:
          ``(logits_BTV float32, (new_mems, new_valid_BM))``.
        """
        cfg = self.cfg
        b, t = tokens_BT.shape
        if memory is None:
            mems = tuple(
                jnp.zeros((b, 0, cfg.d_model), jnp.float32) for _ in range(cfg.num_layers + 1)
            )
            valid_BM = jnp.zeros((b, 0), bool)
        else:
            mems, valid_BM = memory
            if len(mems) != cfg.num_layers + 1:
                want = cfg.num_layers + 1
                raise ValueError(
                    f"memory has {len(mems)} tensors; expected num_layers + 1 = {want}"
                )
            # SG(m_tau) in §3.2: no gradient flows into the memory.
            mems = tuple(jax.lax.stop_gradient(m) for m in mems)
        adaptive = getattr(cfg, "adaptive", False)  # adaptive input/softmax (WikiText-103)
        embed = adaptive_embedding(cfg) if adaptive else layers.token_embedding(cfg)
        x_BTE = embed.embed(tokens_BT) if adaptive else embed(tokens_BT)
        x_BTE = nn.Dropout(cfg.dropout_rate)(x_BTE, deterministic=deterministic)
        kv_mask_BS = jnp.concatenate([valid_BM, jnp.ones((b, t), bool)], axis=1)
        shared = layers.shared_attention_params(self, cfg)
        hiddens = [x_BTE]
        for i in range(cfg.num_layers):
            x_BTE = XLBlock(cfg, i, name=f"block_{i}")(
                x_BTE, mems[i], kv_mask_BS, deterministic, shared.get(cfg.layer_attention(i))
            )
            hiddens.append(x_BTE)
        x_BTE = layers.norm(name="ln_final")(x_BTE)
        if adaptive:  # exact log-probabilities (seqjax.models.adaptive)
            logits_BTV = embed.log_probs(x_BTE)
        else:
            logits_BTV = embed.attend(x_BTE.astype(jnp.float32)).astype(jnp.float32)
        return logits_BTV, update_memory(mems, valid_BM, hiddens, self.mem_len)


def update_memory(mems, valid_BM, hiddens, mem_len: int):
    """New memory: the last ``mem_len`` positions of ``concat(memory, hidden)`` per layer,
    under ``stop_gradient`` (no gradient flows into the memory)."""
    b, t = hiddens[0].shape[:2]
    new_mems = tuple(
        jax.lax.stop_gradient(
            jnp.concatenate([m.astype(jnp.float32), h.astype(jnp.float32)], axis=1)[
                :, max(0, m.shape[1] + t - mem_len) :
            ]
        )
        for m, h in zip(mems, hiddens)
    )
    new_valid = jnp.concatenate([valid_BM, jnp.ones((b, t), bool)], axis=1)
    new_valid = new_valid[:, max(0, new_valid.shape[1] - mem_len) :]
    if mem_len == 0:
        new_mems = tuple(m[:, :0] for m in new_mems)
        new_valid = new_valid[:, :0]
    return new_mems, new_valid


# --------------------------------------------------------------------------------------
# Transformer-XL as a recurrent model of the training system (``seqjax.models.memory``):
# how the config builds it, the lengths it evaluates and samples with, what it requires.
# (Kept apart from the model above; imported here so that this section stands alone.)
# --------------------------------------------------------------------------------------

import dataclasses  # noqa: E402

from seqjax.models import memory as memory_lib  # noqa: E402


def with_lengths(cfg: TransformerConfig, *, mem_len: int, clamp_len: int, same_length: bool):
    """``cfg`` whose "relative" layers use other lengths (evaluation, sampling).

    The parameters do not depend on them (``W_R`` maps the sinusoids of any distance), so a
    model built from the result applies the trained parameters unchanged.
    """
    new = {"mem_len": int(mem_len), "clamp_len": int(clamp_len), "same_length": bool(same_length)}
    attention = tuple(
        (name, tuple(sorted({**dict(opts), **new}.items())) if name == "relative" else opts)
        for name, opts in cfg.attention
    )
    return dataclasses.replace(cfg, attention=attention)


def _mem_len(config) -> int:
    return int(config.model.mem_len)


def _attention_options(config, options: dict) -> dict:
    """The relative mechanism's ``mem_len`` (its ``same_length`` window) is the model's."""
    return {**options, "relative": {**options.get("relative", {}), "mem_len": _mem_len(config)}}


def eval_lengths(config) -> dict:
    """Evaluation lengths: ``config.eval`` with None -> the training value.

    Returns:
      ``{'tgt_len', 'mem_len', 'clamp_len', 'same_length'}`` (Dai et al. 2019 evaluate enwik8
      with 80 / 2100 / 820 / True after training with 512 / 512 / -1 / False).
    """
    ev = config.get("eval") or {}
    rel = dict((config.model.get("attention_options") or {}).get("relative") or {})

    def pick(field, default):
        value = ev.get(field) if hasattr(ev, "get") else None
        return default if value is None else value

    return {
        "tgt_len": int(pick("tgt_len", config.data.seq_len)),
        "mem_len": int(pick("mem_len", _mem_len(config))),
        "clamp_len": int(pick("clamp_len", rel.get("clamp_len", -1))),
        "same_length": bool(pick("same_length", rel.get("same_length", False))),
    }


def _eval_model(cfg: TransformerConfig, lengths: dict) -> TransformerXL:
    keys = ("mem_len", "clamp_len", "same_length")
    return TransformerXL(with_lengths(cfg, **{k: lengths[k] for k in keys}), lengths["mem_len"])


def _validate(config, bad) -> None:
    """What segment recurrence needs (besides contiguous streams of a language-modelling
    corpus, which the config validator checks from the data set's registry entry): relative
    attention without absolute positions, one update per batch (the memory moves
    on with every batch), and valid evaluation lengths (``config.eval``)."""
    m, d, o = config.model, config.data, config.optimizer
    mem_len = m.get("mem_len", 0)
    if d.get("lm_batching") != "stream":
        bad("data.lm_batching", d.get("lm_batching"),
            '"stream" for model.kind="transformer_xl" (each row continues its text)')  # fmt: skip
    from seqjax.attention import registry as attention_registry

    if attention_registry.parse(m.attention) != ["relative"]:
        bad("model.attention", m.attention, '"relative" for model.kind="transformer_xl"')
    if m.positional != "none":
        bad("model.positional", m.positional,
            '"none" for model.kind="transformer_xl" (relative positions only)')  # fmt: skip
    if o.grad_accum_steps != 1:
        bad("optimizer.grad_accum_steps", o.grad_accum_steps,
            '1 for model.kind="transformer_xl" (the memory moves on with every batch)')  # fmt: skip
    if m.reversible or m.remat:
        bad("model.reversible/remat", (m.reversible, m.remat),
            'False for model.kind="transformer_xl" (not supported by TransformerXL)')  # fmt: skip
    rel = (m.get("attention_options") or {}).get("relative") or {}
    if "mem_len" in rel and rel["mem_len"] != mem_len:
        bad("model.attention_options.relative.mem_len", rel["mem_len"],
            f"unset or equal to model.mem_len={mem_len} (it is set from it)")  # fmt: skip
    if rel.get("same_length") and not mem_len:
        bad("model.attention_options.relative.same_length", True, "False when model.mem_len=0")
    ev = config.get("eval") or {}
    for field, low in (("tgt_len", 1), ("mem_len", 0)):
        value = ev.get(field)
        if value is not None and (not isinstance(value, int) or value < low):
            bad(f"eval.{field}", value, f"None (as in training) or an integer >= {low}")
    clamp = ev.get("clamp_len")
    if clamp is not None and not isinstance(clamp, int):
        bad("eval.clamp_len", clamp, "None, -1 (no clamping) or a positive integer")
    same = ev.get("same_length")
    same = rel.get("same_length", False) if same is None else same
    eval_mem = mem_len if ev.get("mem_len") is None else ev.get("mem_len")
    if same and not eval_mem:
        bad("eval.same_length", same, "False when the evaluation memory length is 0")


RECURRENCE = memory_lib.register(
    memory_lib.Recurrence(
        kind="transformer_xl",
        train_model=lambda cfg, config: TransformerXL(cfg, mem_len=_mem_len(config)),
        eval_lengths=eval_lengths,
        eval_model=_eval_model,
        attention_options=_attention_options,
        validate=_validate,
    )
)
