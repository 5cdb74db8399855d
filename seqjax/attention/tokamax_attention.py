"""Dense attention through tokamax's maintained kernels (opt-in: ``implementation="tokamax"``).

tokamax (``pip install "seqjax[tokamax]"``) is a library of Pallas kernels maintained by
Google DeepMind; ``tokamax.dot_product_attention`` computes Vaswani et al. 2017, eq. (1),
``softmax(Q K^T / sqrt(D) + mask) V``, with FlashAttention's online softmax (Dao et al.
2022, Alg. 1) in its kernels. ``tokamax_attention`` maps seqjax's dense-attention
arguments onto it and picks the kernel by backend (``KERNELS``):

  * GPU: the Pallas -> Triton flash kernel (``"triton"``; forward and a Pallas backward).
    tokamax's Mosaic-GPU kernel (Hopper/Blackwell only) is not chosen: which GPU runs is
    only known on the device, and no device was available to compare them.
  * TPU: the Mosaic splash-attention kernel (``"mosaic_tpu"``). tokamax 0.0.12 gives it no
    batched boolean masks, no sequence lengths and no segment ids, so seqjax refuses key
    padding masks and segment ids there (one ``ValueError`` naming ``splash``, which has
    them) instead of letting tokamax fail inside the trace.
  * CPU: tokamax's XLA reference (``"xla"``): the path on which this module is tested
    against ``dense.reference_attention``.

On a multi-device (Auto) mesh the kernel runs under ``shard_map``, batch and heads split as
the logical-axis rules split them (``splash.mesh_split``): XLA cannot partition a Pallas
kernel, and tokamax's own ``q_sharding`` is not used so that seqjax's rules decide.

Conventions kept from ``seqjax.attention.dense``: causal attention is bottom-right aligned
when T != S (tokamax's own ``is_causal`` is top-left, so it is used only when T == S and
the bottom-right mask is passed as a boolean ``[1, 1, T, S]`` mask otherwise); a query row
that sees no key is zeros; the logit scale defaults to ``1/sqrt(D)``. Attention dropout is
not in tokamax's public API: asking for it raises.

Why this is an opt-in and not what ``auto`` picks: see the accelerator section of the README
and ``experiments/accelerator/README.md`` (without a GPU or TPU the kernels were only
lowered, never timed or run; seqjax's cuDNN and splash paths already cover these cases).

Legend: B batch, T query length, S key length, H heads, D head dim.
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from seqjax.attention import masks as masks_lib
from seqjax.attention import splash

# The tokamax kernel used on each backend (``tokamax.dot_product_attention(implementation=)``).
KERNELS = {"gpu": "triton", "tpu": "mosaic_tpu", "cpu": "xla"}
REQUIREMENT = "tokamax>=0.0.12,<0.1"  # the range seqjax was checked with (pyproject extra)


def _tokamax():
    """The tokamax module, with absl's flags parsed.

    tokamax reads its options (``tokamax.config``) as absl flags and, when no program has
    parsed the flags, parses ``sys.argv`` itself on the first kernel call, which fails for any
    command line that is not absl's (pytest's, a notebook's). Unparsed flags are parsed here
    from the program name alone (every flag at its default); a later ``absl.app.run`` parses
    the real command line again.
    """
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS(sys.argv[:1], known_only=True)
    try:
        import tokamax
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ValueError(
            "dense implementation 'tokamax' needs the tokamax package "
            f"({REQUIREMENT}; pip install 'seqjax[tokamax]'); use 'auto', 'chunked', 'cudnn', "
            "'pallas' or 'splash' otherwise"
        ) from e
    return tokamax


def unsupported(backend: str, *, mask=None, segment_ids=None, dropout_rate=0.0) -> str | None:
    """Why ``tokamax_attention`` cannot run these options on ``backend`` (None when it can)."""
    if backend not in KERNELS:
        return f"backend {backend!r} has no tokamax kernel (known: {', '.join(KERNELS)})"
    if dropout_rate > 0.0:
        return (
            f"attention dropout (dropout_rate={dropout_rate}) is not in tokamax's "
            "dot_product_attention API"
        )
    if backend == "tpu" and (mask is not None or segment_ids is not None):
        return (
            "tokamax's TPU kernel takes no per-example key padding mask or segment ids "
            "(only causal/full masks); use implementation 'splash'"
        )
    return None


def tokamax_attention(
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
    kernel=None,
):
    """Dense attention with ``tokamax.dot_product_attention``.

    Args:
      q: ``[B, T, H, D]``; k: ``[B, S, H, D]``; v: ``[B, S, H, Dv]``.
      causal, mask, segment_ids: as in ``seqjax.attention.masks`` (bottom-right causal).
      scale: logit scale, default ``1/sqrt(D)``.
      dropout_rate, dropout_rng: must be 0 / unused (tokamax has no attention dropout).
      kernel: a tokamax implementation name; default ``KERNELS[jax.default_backend()]``.

    Returns:
      ``[B, T, H, Dv]`` in the dtype of ``q``.

    Raises:
      ValueError: for options the backend's tokamax kernel does not take (``unsupported``).
    """
    del dropout_rng
    backend = jax.default_backend()
    why = unsupported(backend, mask=mask, segment_ids=segment_ids, dropout_rate=dropout_rate)
    if why is not None:
        raise ValueError(f"dense implementation 'tokamax' cannot run here: {why}")
    tokamax = _tokamax()
    b, t, _, _ = q.shape
    s = k.shape[1]
    kernel_causal = causal and t == s  # tokamax's is_causal is top-left aligned
    valid = masks_lib.dense_mask(
        b, t, s, causal=causal and not kernel_causal, mask=mask, segment_ids=segment_ids
    )
    if valid is not None and mask is None and segment_ids is None:
        valid = valid[:1]  # the causal-only mask is the same for every example: [1, 1, T, S]
    masks = () if valid is None else (valid,)
    impl = kernel or KERNELS[backend]

    def call(q, k, v, *masks):  # [B, T, H, D] (or this device's share under shard_map)
        # tokamax combines its masks with implicit rank promotion (its [T, S] causal mask
        # with our [B, 1, T, S] mask), which seqjax's tests forbid globally; allowed for its
        # call only (its Triton backward, traced later by ``jax.grad``, needs it too).
        with jax.numpy_rank_promotion("allow"):
            return tokamax.dot_product_attention(
                q,
                k,
                v,
                mask=masks[0] if masks else None,
                scale=scale,
                is_causal=kernel_causal,
                implementation=impl,
            )

    split = splash.mesh_split(b, q.shape[2], same_heads=True)
    if split:  # Pallas kernels are not partitioned by XLA: one call per device's share
        x_spec = P(split.batch, None, split.heads, None)
        m_spec = P(split.batch if valid is not None and valid.shape[0] == b else None)
        call = jax.shard_map(
            call,
            mesh=split.mesh,
            in_specs=(x_spec,) * 3 + (m_spec,) * len(masks),
            out_specs=x_spec,
            check_vma=False,
        )
    out_BTHD = call(q, k, v, *masks)
    if valid is not None:  # rows with no visible key (under every mask) are zeros
        full = valid
        if kernel_causal:
            full = masks_lib.dense_mask(b, t, s, causal=True, mask=mask, segment_ids=segment_ids)
        any_key_BT11 = jnp.broadcast_to(full, (b, 1, t, s)).any(-1)[:, 0, :, None, None]
        out_BTHD = jnp.where(any_key_BT11, out_BTHD, 0)
    return out_BTHD.astype(q.dtype)
