"""Dense (full) scaled dot-product attention, Vaswani et al. 2017, eq. (1):

    Attention(Q, K, V) = softmax(Q K^T / sqrt(D) + mask) V

Implementations (option ``implementation``), all exact and mask-identical:
  * ``"reference"``: materializes the ``[B, H, T, S]`` logits in float32. The ground truth
    every other mechanism is tested against.
  * ``"chunked"``: blockwise online softmax with a recomputing backward pass
    (``seqjax.attention.blockwise``); memory linear in sequence length, and causal
    attention skips the key blocks the mask removes entirely.
  * ``"cudnn"``: ``jax.nn.dot_product_attention(implementation="cudnn")`` on NVIDIA GPUs
    (fused FlashAttention-style kernels; bf16/fp16, head dim <= 128 and a multiple of 8; no
    attention dropout: asking for it raises).
  * ``"pallas"``: the block-table kernels of ``seqjax.attention.pallas_blocks`` (Triton on
    GPU, interpret mode elsewhere) over the dense (or causal lower-triangle) table; the
    portable fused kernel where cuDNN does not apply (float32, head dims cuDNN rejects).
  * ``"splash"``: TPU splash attention (``seqjax.attention.splash``; interpret mode off TPU).
  * ``"ring"``: ring attention over the ``sequence`` mesh axis (context parallelism,
    ``seqjax.attention.ring``: key/value blocks passed around the devices, zigzag causal
    load balancing, a custom VJP that passes dK/dV around the ring).
  * ``"ulysses"``: all-to-all (DeepSpeed-Ulysses) attention over the ``sequence`` axis
    (sequence-sharded -> head-sharded, ``chunked`` per device, and back); needs the heads
    per device to be a multiple of the axis size.
  * ``"tokamax"`` (opt-in): tokamax's maintained kernels (``seqjax.attention.tokamax_attention``:
    Pallas-Triton flash attention on GPU, Mosaic splash on TPU, its XLA path on CPU; needs
    the ``tokamax`` extra; no dropout, and no padding masks or segment ids on TPU).
  * ``"auto"`` (default): under an ambient mesh whose ``sequence`` axis has n > 1 devices
    and self-attention whose length the axis divides, ``ulysses`` when the heads divide n,
    else ``ring`` (``ring.choose``; the choice and its reason are logged once); otherwise
    splash on a TPU (``chunked`` with dropout); cuDNN on a GPU when
    the shapes, dtype and options allow it (the reason is logged once when they do not),
    otherwise ``reference`` for short sequences and ``chunked`` for long ones.

Derivatives: ``reference`` supports every JAX transformation; ``chunked``, ``pallas`` (and
so ``auto`` above ``AUTO_CHUNK_THRESHOLD`` logits on CPU) are first-order reverse mode only
(``grad``, ``vjp``): ``jvp``, ``jacfwd`` and grad-of-grad raise a message naming
``implementation="reference"``. cuDNN and splash follow ``jax.nn.dot_product_attention``'s
and splash's own rules.

Legend: B batch, T query length, S key length, H heads, D head dim.
"""

from __future__ import annotations

import functools
import logging

import jax
import jax.numpy as jnp

from seqjax.attention import (
    blockwise,
    numerics,
    pallas_blocks,
    registry,
    ring,
    splash,
    tokamax_attention,
    ulysses,
)
from seqjax.attention import masks as masks_lib

log = logging.getLogger(__name__)

IMPLEMENTATIONS = (
    "auto",
    "reference",
    "chunked",
    "cudnn",
    "pallas",
    "splash",
    "ring",
    "ulysses",
    "tokamax",
)
# Above this many logits per (batch, head), "auto" on CPU/TPU switches to "chunked".
AUTO_CHUNK_THRESHOLD = 2048 * 2048


# relative.py's name for the shared masked softmax (kept until it imports ``numerics``).


def reference_attention(
    q,
    k,
    v,
    *,
    causal=False,
    mask=None,
    segment_ids=None,
    scale=None,
    dropout_rate=0.0,
    dropout_rng=None,
    score_mod=None,
):
    """Dense attention that materializes the logits (the ground truth).

    Args:
      q: ``[B, T, H, D]``; k: ``[B, S, H, D]``; v: ``[B, S, H, Dv]``.
      causal, mask, segment_ids: see ``seqjax.attention.masks``.
      scale: logit scale, default ``1/sqrt(D)``.
      dropout_rate, dropout_rng: dropout on the attention probabilities.
      score_mod: optional ``seqjax.attention.score_mod.ScoreMod`` (a positional bias),
        materialised as ``[H, T, S]``.

    Returns:
      ``[B, T, H, Dv]`` in the dtype of ``q``.
    """
    b, t, _, _ = q.shape
    s = k.shape[1]
    valid = masks_lib.dense_mask(b, t, s, causal=causal, mask=mask, segment_ids=segment_ids)
    bias = None if score_mod is None else score_mod.dense_bias(t, s)[None]
    return masked_attention(
        q, k, v, valid, scale=scale, dropout_rate=dropout_rate, dropout_rng=dropout_rng, bias=bias
    )


def masked_attention(q, k, v, valid, *, scale=None, dropout_rate=0.0, dropout_rng=None, bias=None):
    """Materialized attention under any boolean mask ``valid`` broadcastable to
    ``[B, H, T, S]`` (True = attend): the ground truth of every mask and pattern
    (``numerics.attend``); ``bias`` an optional additive ``[B|1, H, T, S]`` score bias."""
    return numerics.attend(
        q,
        k,
        v,
        valid,
        scale=scale,
        dropout_rate=dropout_rate,
        dropout_rng=dropout_rng,
        bias=bias,
    )


# The chunked engine lives in ``blockwise`` (ring and ulysses use it without importing dense).
chunked_attention = blockwise.chunked_attention


def pallas_attention(q, k, v, *, causal=False, block_q=128, block_k=128, **kwargs):
    """Dense attention through the Pallas block-table kernels (``pallas_blocks``).

    Tiles are clipped to the next power of two of the sequence lengths (Triton tiles).
    """
    t, s = q.shape[1], k.shape[1]
    bq = min(block_q, max(16, 1 << (t - 1).bit_length()))
    bk = min(block_k, max(16, 1 << (s - 1).bit_length()))
    nq, nk = -(-t // bq), -(-s // bk)
    table, count = blockwise.dense_table(
        nq, nk, bq, bk, causal=causal, offset=masks_lib.causal_offset(t, s)
    )
    return pallas_blocks.block_sparse_attention(
        q, k, v, table=table, count=count, block_q=bq, block_k=bk, causal=causal, **kwargs
    )


def _on_gpu() -> bool:
    return jax.default_backend() == "gpu"


def cudnn_unsupported(q, k, v, dropout_rate=0.0) -> str | None:
    """Why cuDNN cannot run these inputs (None when it can)."""
    if dropout_rate > 0.0:
        return "attention dropout is not available through jax.nn.dot_product_attention"
    if not (q.dtype in (jnp.bfloat16, jnp.float16) and q.dtype == k.dtype == v.dtype):
        return f"dtype {q.dtype} (cuDNN attention takes bfloat16 or float16)"
    d = q.shape[-1]
    if not (d <= 128 and d % 8 == 0 and d == v.shape[-1]):
        return f"head dims {d}/{v.shape[-1]} (cuDNN needs equal dims <= 128, multiples of 8)"
    return None


@functools.lru_cache(maxsize=32)
def _log_auto_choice(choice: str, why: str) -> None:
    log.info("dense attention 'auto' uses %r on GPU: cuDNN does not apply (%s)", choice, why)


def cudnn_attention(
    q, k, v, *, causal=False, mask=None, segment_ids=None, scale=None, dropout_rate=0.0, **unused
):
    """cuDNN fused attention through ``jax.nn.dot_product_attention`` (GPU only).

    Square causal attention without other masks uses the kernel's own causal mask
    (``is_causal``; top-left equals bottom-right when T == S), so no ``T x S`` mask is ever
    formed; otherwise the masks are passed as one boolean ``[B, 1, T, S]`` mask so that the
    bottom-right causal alignment and packed segments match the other implementations.

    Raises:
      ValueError: off GPU, or when attention dropout is asked for (cuDNN through
        ``jax.nn.dot_product_attention`` cannot apply it; use ``chunked`` or ``reference``).
    """
    if not _on_gpu():
        raise ValueError(
            "dense implementation 'cudnn' needs an NVIDIA GPU backend; "
            f"this process runs on {jax.default_backend()!r}. Use 'auto', 'chunked' or "
            "'reference'."
        )
    if dropout_rate > 0.0:
        raise ValueError(
            f"dense implementation 'cudnn' cannot apply attention dropout (dropout_rate="
            f"{dropout_rate}); use implementation 'auto', 'chunked' or 'reference', or set "
            "the attention dropout to 0"
        )
    b, t, _, _ = q.shape
    s = k.shape[1]
    if causal and t == s and mask is None and segment_ids is None:
        return jax.nn.dot_product_attention(
            q, k, v, scale=scale, is_causal=True, implementation="cudnn"
        )
    valid = masks_lib.dense_mask(b, t, s, causal=causal, mask=mask, segment_ids=segment_ids)
    out = jax.nn.dot_product_attention(q, k, v, mask=valid, scale=scale, implementation="cudnn")
    if valid is not None:  # rows with no visible key are defined as zeros
        any_key = valid.any(-1)[:, 0, :, None, None]  # [B, T, 1, 1]
        out = jnp.where(any_key, out, 0)
    return out


def dense_attention(q, k, v, *, implementation="auto", block_q=512, block_k=512, **kwargs):
    """Full attention under the registry name ``"dense"``; see module docstring.

    Args:
      q, k, v: ``[B, T, H, D]``, ``[B, S, H, D]``, ``[B, S, H, Dv]``.
      implementation: one of ``IMPLEMENTATIONS``.
      block_q, block_k: block sizes of ``"chunked"``.
      **kwargs: ``causal``, ``mask``, ``segment_ids``, ``scale``, ``dropout_rate``,
        ``dropout_rng``.
    """
    registry.check_qkv(q, k, v)
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(
            f"unknown dense implementation {implementation!r}; valid: {', '.join(IMPLEMENTATIONS)}"
        )
    if kwargs.get("score_mod") is not None:
        implementation = _score_mod_implementation(implementation, q.shape[1] * k.shape[1])
    if implementation == "auto" and ring.axis_size() > 1:
        implementation = _auto_sequence_parallel(q, k, kwargs.get("causal", False))
    if implementation in ("ring", "ulysses"):
        fn = ring.ring_attention if implementation == "ring" else ulysses.ulysses_attention
        return fn(q, k, v, block_q=block_q, block_k=block_k, **kwargs)
    if implementation == "auto" and jax.default_backend() == "tpu":
        no_drop = kwargs.get("dropout_rate", 0.0) == 0.0
        implementation = "splash" if no_drop else "chunked"
    if implementation == "auto":
        why = cudnn_unsupported(q, k, v, kwargs.get("dropout_rate", 0.0)) if _on_gpu() else ""
        if why is None:
            implementation = "cudnn"
        elif q.shape[1] * k.shape[1] > AUTO_CHUNK_THRESHOLD:
            implementation = "chunked"
        else:
            implementation = "reference"
        if why:
            _log_auto_choice(implementation, why)
    if implementation == "reference":
        return reference_attention(q, k, v, **kwargs)
    if implementation == "chunked":
        return chunked_attention(q, k, v, block_q=block_q, block_k=block_k, **kwargs)
    if implementation == "splash":
        kwargs.pop("dropout_rng", None)
        return splash.splash_attention(q, k, v, **kwargs)
    if implementation == "tokamax":
        return tokamax_attention.tokamax_attention(q, k, v, **kwargs)
    if implementation == "pallas":
        return pallas_attention(q, k, v, block_q=block_q, block_k=block_k, **kwargs)
    return cudnn_attention(q, k, v, **kwargs)


def _score_mod_implementation(implementation: str, logits: int) -> str:
    """The implementation that runs a score modification: ``auto`` becomes ``reference`` or
    ``chunked``; cuDNN and splash take no bias (raises); the Pallas kernels compute it."""
    if implementation == "auto":
        return "chunked" if logits > AUTO_CHUNK_THRESHOLD else "reference"
    if implementation not in ("reference", "chunked", "pallas"):
        raise ValueError(
            f"dense implementation {implementation!r} cannot add a positional score bias "
            "(model.positional 'alibi'/'t5_bias'); use implementation 'auto', 'reference', "
            "'chunked' or 'pallas'"
        )
    return implementation


def _auto_sequence_parallel(q, k, causal: bool) -> str:
    """``auto`` under a ``sequence`` axis: ``ring.choose`` when the lengths allow it, else
    ``auto`` (the sharded arrays are then gathered by XLA; logged once)."""
    n = ring.axis_size()
    choice, why = ring.choose(q.shape[2], n)
    problem = ring.unsupported(q.shape[1], k.shape[1], n, causal=causal and choice == "ring")
    if problem is not None:
        ring.log_choice("auto (unsharded)", problem)
        return "auto"
    ring.log_choice(choice, why)
    return choice


def causal_attention(q, k, v, **kwargs):
    """``dense`` with ``causal=True`` (registered as ``"causal"`` for decoder configs)."""
    kwargs["causal"] = True
    return dense_attention(q, k, v, **kwargs)


_DOCS = {
    "dense": "full softmax attention (Vaswani et al. 2017); reference | chunked | cudnn | "
    "pallas | splash | ring | ulysses | tokamax | auto",
    "causal": "dense attention with the causal mask always on (decoders)",
}
for _name, _fn in (("dense", dense_attention), ("causal", causal_attention)):
    registry.register(
        registry.Mechanism(
            name=_name, fn=_fn, options=("implementation", "block_q", "block_k"), doc=_DOCS[_name]
        )
    )
