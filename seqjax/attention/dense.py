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
    splash on a TPU (``chunked`` with dropout); on a GPU cuDNN when the shapes, dtype and
    options allow it, else the Pallas kernels (float32, odd head dims, ALiBi/T5 biases,
    dropout), the plain-JAX engines only for inputs no kernel takes (logged once;
    ``auto_implementation``); on CPU ``reference`` for short sequences and ``chunked``
    for long ones.

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
    pallas_plan,
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


def pallas_attention(q, k, v, *, causal=False, block_q=None, block_k=None, **kwargs):
    """Dense attention through the Pallas block-table kernels (``pallas_blocks``).

    Tiles come from the planner (``pallas_blocks.plan``: the largest that fit the device's
    shared memory); ``block_q`` / ``block_k``, when given, bound them (rounded down to
    powers of two >= 16).
    """
    t, s = q.shape[1], k.shape[1]
    learned = pallas_blocks.learned_bias(kwargs.get("score_mod"))
    tiles = pallas_blocks.plan(t, s, q.shape[-1], v.shape[-1], dtype=q.dtype, learned_bias=learned)
    bq, bk = tiles.block_q, tiles.block_k
    if block_q is not None:
        bq = min(bq, max(16, pallas_plan.pow2_at_most(block_q)))
    if block_k is not None:
        bk = min(bk, max(16, pallas_plan.pow2_at_most(block_k)))
    nq, nk = -(-t // bq), -(-s // bk)
    table, count = blockwise.dense_table(
        nq, nk, bq, bk, causal=causal, offset=masks_lib.causal_offset(t, s)
    )
    return pallas_blocks.block_sparse_attention(
        q, k, v, table=table, count=count, block_q=bq, block_k=bk, causal=causal, **kwargs
    )


CUDNN_DTYPES = (jnp.bfloat16, jnp.float16)


def _on_gpu() -> bool:
    return jax.default_backend() == "gpu"


def cudnn_unsupported(q, k, v, dropout_rate=0.0) -> str | None:
    """Why cuDNN cannot run these inputs (None when it can)."""
    if dropout_rate > 0.0:
        return "attention dropout is not available through jax.nn.dot_product_attention"
    if not (q.dtype in CUDNN_DTYPES and q.dtype == k.dtype == v.dtype):
        return f"dtype {q.dtype} (cuDNN attention takes bfloat16 or float16)"
    d = q.shape[-1]
    if not (d <= 128 and d % 8 == 0 and d == v.shape[-1]):
        return f"head dims {d}/{v.shape[-1]} (cuDNN needs equal dims <= 128, multiples of 8)"
    return None


@functools.lru_cache(maxsize=32)
def _log_auto_choice(choice: str, why: str) -> None:
    log.info("dense attention 'auto' uses %r on GPU: cuDNN does not apply (%s)", choice, why)
    if choice != "pallas":
        log.warning("dense attention 'auto' on GPU runs the plain-JAX %r engine (%s)", choice, why)


def cudnn_attention(
    q, k, v, *, causal=False, mask=None, segment_ids=None, scale=None, dropout_rate=0.0, **unused
):
    """cuDNN fused attention through ``jax.nn.dot_product_attention`` (GPU only).

    Square causal attention without other masks uses the kernel's own causal mask
    (``is_causal``; top-left equals bottom-right when T == S), so no ``T x S`` mask is ever
    formed; otherwise the masks are passed as one boolean ``[B, 1, T, S]`` mask so that the
    bottom-right causal alignment and packed segments match the other implementations.

    Raises:
      ValueError: off GPU; for a dtype other than bfloat16/float16 or head dims cuDNN
        rejects (one sentence naming the implementations that take them); or when attention
        dropout is asked for (cuDNN through
        ``jax.nn.dot_product_attention`` cannot apply it; use ``chunked`` or ``reference``).
    """
    if not _on_gpu():
        raise ValueError(
            "dense implementation 'cudnn' needs an NVIDIA GPU backend; "
            f"this process runs on {jax.default_backend()!r}. Use 'auto', 'chunked' or "
            "'reference'."
        )
    if q.dtype not in CUDNN_DTYPES or not q.dtype == k.dtype == v.dtype:
        raise ValueError(
            f"dense implementation 'cudnn' takes bfloat16 or float16 inputs, not "
            f"{q.dtype}/{k.dtype}/{v.dtype}; for {q.dtype} use implementation 'auto', "
            "'pallas', 'chunked' or 'reference' (or set model.dtype to bfloat16)"
        )
    d, dv = q.shape[-1], v.shape[-1]
    if not (d <= 128 and d % 8 == 0 and d == dv):
        raise ValueError(
            f"dense implementation 'cudnn' takes equal head dims <= 128 that are multiples "
            f"of 8, not {d}/{dv}; use implementation 'auto' or 'pallas'"
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


def dense_attention(q, k, v, *, implementation="auto", block_q=None, block_k=None, **kwargs):
    """Full attention under the registry name ``"dense"``; see module docstring.

    Args:
      q, k, v: ``[B, T, H, D]``, ``[B, S, H, D]``, ``[B, S, H, Dv]``.
      implementation: one of ``IMPLEMENTATIONS``.
      block_q, block_k: block sizes of ``"chunked"`` (default 512) and bounds on the
        planned tiles of ``"pallas"`` (default: the planner's, ``pallas_blocks.plan``).
      **kwargs: ``causal``, ``mask``, ``segment_ids``, ``scale``, ``dropout_rate``,
        ``dropout_rng``, ``score_mod``.
    """
    registry.check_qkv(q, k, v)
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(
            f"unknown dense implementation {implementation!r}; valid: {', '.join(IMPLEMENTATIONS)}"
        )
    chunk_q = CHUNK_BLOCK if block_q is None else block_q
    chunk_k = CHUNK_BLOCK if block_k is None else block_k
    if kwargs.get("score_mod") is not None and implementation != "auto":
        _check_score_mod_implementation(implementation)
    if implementation == "auto" and ring.axis_size() > 1 and kwargs.get("score_mod") is None:
        implementation = _auto_sequence_parallel(q, k, kwargs.get("causal", False))
    if implementation in ("ring", "ulysses"):
        fn = ring.ring_attention if implementation == "ring" else ulysses.ulysses_attention
        return fn(q, k, v, block_q=chunk_q, block_k=chunk_k, **kwargs)
    if implementation == "auto":
        implementation = auto_implementation(q, k, v, **kwargs)
        registry.note_auto(implementation)
    if implementation == "reference":
        return reference_attention(q, k, v, **kwargs)
    if implementation == "chunked":
        return chunked_attention(q, k, v, block_q=chunk_q, block_k=chunk_k, **kwargs)
    if implementation == "splash":
        kwargs.pop("dropout_rng", None)
        return splash.splash_attention(q, k, v, **kwargs)
    if implementation == "tokamax":
        return tokamax_attention.tokamax_attention(q, k, v, **kwargs)
    if implementation == "pallas":
        return pallas_attention(q, k, v, block_q=block_q, block_k=block_k, **kwargs)
    return cudnn_attention(q, k, v, **kwargs)


def auto_implementation(q, k, v, *, dropout_rate=0.0, score_mod=None, **unused) -> str:
    """What ``auto`` runs without a sequence axis (module docstring), its reason logged once
    when it is not the backend's first choice.

    GPU: cuDNN when it applies; otherwise the Pallas kernels (float32, head dims cuDNN
    rejects, ALiBi/T5 biases, attention dropout); the plain-JAX engines only for inputs no
    kernel takes (a head dim above ``pallas_plan.MAX_HEAD_DIM``, a bias with no kernel form).
    TPU: splash (no bias, no dropout), else the plain-JAX engines. CPU: ``reference`` for
    short sequences, ``chunked`` above ``AUTO_CHUNK_THRESHOLD`` logits.
    """
    plain = "chunked" if q.shape[1] * k.shape[1] > AUTO_CHUNK_THRESHOLD else "reference"
    backend = jax.default_backend()
    if backend == "tpu":
        if score_mod is not None:
            return plain
        return "splash" if dropout_rate == 0.0 else "chunked"
    if backend != "gpu":
        return plain
    why = "a score bias" if score_mod is not None else cudnn_unsupported(q, k, v, dropout_rate)
    if why is None:
        return "cudnn"
    table = blockwise.dense_table(1, 1, 1, 1, causal=False, offset=0)[0]
    no_kernel = pallas_blocks.supported(
        q, k, v, block_q=16, block_k=16, table=table, dropout_rate=dropout_rate,
        score_mod=score_mod,
    )  # fmt: skip
    choice = "pallas" if no_kernel is None else plain
    _log_auto_choice(choice, why if no_kernel is None else f"{why}; Pallas: {no_kernel}")
    return choice


CHUNK_BLOCK = 512  # default block of ``chunked`` (and of the ring / Ulysses steps)


def _check_score_mod_implementation(implementation: str) -> None:
    """cuDNN and splash take no bias: a score modification with them raises."""
    if implementation not in ("reference", "chunked", "pallas"):
        raise ValueError(
            f"dense implementation {implementation!r} cannot add a positional score bias "
            "(model.positional 'alibi'/'t5_bias'); use implementation 'auto', 'reference', "
            "'chunked' or 'pallas'"
        )


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
            name=_name,
            fn=_fn,
            options=("implementation", "block_q", "block_k"),
            doc=_DOCS[_name],
            always_causal=_name == "causal",
            decode_cache="kv",
            context_parallel="ring",
            kernels=(("gpu", ("cudnn", "pallas", "tokamax")), ("tpu", ("splash",))),
        )
    )
