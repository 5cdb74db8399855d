"""Linformer attention (Wang et al. 2020, "Self-Attention with Linear Complexity").

Keys and values are projected along the *sequence* axis from n to k positions before
attention (Wang et al. 2020, §4, eq. 7):

    head_i = softmax(Q_i (E_i K_i)^T / sqrt(D)) (F_i V_i),   E_i, F_i in R^{k x n}

so the logits are ``[T, k]`` instead of ``[T, n]``: time and memory O(n k).

Sharing modes (Wang et al. 2020, §4 "Parameter sharing"; option ``sharing``):
  * ``"none"``: one E_i and one F_i per head and layer (2 H matrices per layer).
  * ``"headwise"``: one E and one F per layer, shared by all heads (2 per layer).
  * ``"kv"``: one E per layer used for keys and values, E = F (1 per layer).
  * ``"layerwise"``: one E for every layer, head, key and value (1 per model); the model's
    ``Encoder`` owns it through the ``model_params`` hook and passes it to each layer.
For 12 layers x 12 heads: 288 / 24 / 12 / 1 matrices (the paper counts 24 / 12 / 1 for the
shared modes).

Lengths: E and F are ``[k, max_len]`` with ``max_len`` fixed when the parameters are
created. An input of S <= max_len positions uses the first S columns ``E[:, :S]`` (as the
fairseq reference of Wang et al. 2020 does); a longer input raises ``ValueError``.

Padding: key-padding positions (``mask`` False) have their key and value rows zeroed
*before* the projection, so padding content never reaches the projected keys/values (the
fairseq reference projects the padded rows as they are). Because ``E[:, :S]`` times a
zero row adds nothing, a padded sequence gives its real tokens exactly the output of the
same sequence without padding.

Not supported, with clear errors: ``causal=True`` (E K mixes every position, future
included, into each projected key: the paper defines no causal form) and packed
``segment_ids`` (the projection mixes segments). Queries are not masked: rows of padded
queries hold values that callers ignore.

Initialization: E/F entries are i.i.d. truncated normal with variance 1/max_len
(``variance_scaling(1, fan_in)`` over the sequence axis), so at full length a projected
row has the variance of one input row. The paper's JL argument (Thm. 2) draws entries
N(0, 1/k), which differs by the constant sqrt(max_len / k) and inflates the logits when
n >> k; fairseq's Xavier-uniform with gain 1/sqrt(2) has variance 1/(n + k), about ours.

Legend: B batch, T query length, S key/value length, H heads, D head dim, K projected
length (option ``k``), N ``max_len`` (columns of E/F).
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from seqjax.attention import masks as masks_lib
from seqjax.attention import numerics, registry

SHARING = ("none", "headwise", "kv", "layerwise")
DEFAULT_K = 128
DEFAULT_SHARING = "headwise"
# Logical axis names of E/F: the projected length has no mesh axis ('proj_k' -> None in
# the sharding rules); the sequence axis is 'length', like the learned position table.
LOGICAL_AXES_KN = ("proj_k", "length")
LOGICAL_AXES_HKN = ("heads", "proj_k", "length")


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(
            f"linformer option {name}={value!r} must be a positive integer "
            f"(set config.model.attention_options.linformer.{name})"
        )
    return int(value)


def check_options(options: dict) -> tuple[int, int, str]:
    """Validates Linformer's options and returns ``(k, max_len, sharing)``.

    Raises:
      ValueError: naming the option and the valid values.
    """
    sharing = options.get("sharing", DEFAULT_SHARING)
    if sharing not in SHARING:
        raise ValueError(f"linformer option sharing={sharing!r} is not one of {SHARING}")
    if options.get("max_len") is None:
        raise ValueError(
            "linformer needs option max_len (the longest sequence; E and F are [k, max_len] "
            "and are fixed when the parameters are created); set "
            "config.model.attention_options.linformer.max_len"
        )
    max_len = _positive_int("max_len", options["max_len"])
    k = _positive_int("k", options.get("k", DEFAULT_K))
    if k > max_len:
        raise ValueError(
            f"linformer option k={k} exceeds max_len={max_len}; the projected length k must "
            "be at most the sequence length it compresses"
        )
    return k, max_len, sharing


def validate(options: dict, seq_len: int) -> None:
    """Registry hook: rejects options inconsistent with a sequence length before compiling."""
    _, max_len, _ = check_options(options)
    if seq_len > max_len:
        raise ValueError(
            f"sequence length {seq_len} exceeds linformer max_len={max_len}: E and F have "
            f"max_len columns; raise config.model.attention_options.linformer.max_len to at "
            f"least {seq_len}"
        )


def _check_projection(name: str, proj, *, per_head: bool, h: int, s: int) -> None:
    want = "[H, k, max_len]" if per_head else "[k, max_len]"
    if jnp.ndim(proj) != (3 if per_head else 2) or (per_head and proj.shape[0] != h):
        raise ValueError(f"linformer {name} must have shape {want} with H={h}; got {proj.shape}")
    if s > proj.shape[-1]:
        raise ValueError(
            f"linformer input length {s} exceeds max_len={proj.shape[-1]} (the columns of "
            f"{name}); Linformer's max_len is fixed at construction, so sequences longer "
            "than it cannot be projected: raise max_len or shorten the input"
        )


def _project(proj, x_BSHD):
    """``proj[..., :S] @ x`` along the sequence: ``[B, S, H, D] -> [B, K, H, D]`` (float32)."""
    s = x_BSHD.shape[1]
    proj = proj[..., :s].astype(x_BSHD.dtype)  # inputs shorter than max_len: E[:, :S]
    spec = "hks,bshd->bkhd" if proj.ndim == 3 else "ks,bshd->bkhd"
    return jnp.einsum(spec, proj, x_BSHD, preferred_element_type=jnp.float32)


def linformer_attention(
    q_BTHD,
    k_BSHD,
    v_BSHD,
    /,
    *,
    causal=False,
    mask=None,
    segment_ids=None,
    dropout_rate=0.0,
    dropout_rng=None,
    scale=None,
    k=DEFAULT_K,
    max_len=None,
    sharing=DEFAULT_SHARING,
    proj_e=None,
    proj_f=None,
):
    """Linformer attention, ``softmax(Q (E K)^T / sqrt(D)) (F V)`` (Wang et al. 2020, eq. 7).

    The first three arguments are positional-only so that the option ``k`` (projected
    length) can be passed by keyword next to the keys.

    Args:
      q_BTHD: queries ``[B, T, H, D]``.
      k_BSHD: keys ``[B, S, H, D]``.
      v_BSHD: values ``[B, S, H, Dv]``.
      causal: must be False (see module docstring).
      mask: boolean key-padding mask ``[B, S]``, True = keep; padded key/value rows are
        zeroed before the projection.
      segment_ids: must be None (packed sequences are not supported).
      dropout_rate, dropout_rng: dropout on the ``[B, H, T, K]`` attention probabilities.
      scale: logit scale, default ``1/sqrt(D)``.
      k: projected length K (rows of E/F); checked against ``proj_e``.
      max_len: longest sequence N (columns of E/F); S <= N.
      sharing: one of ``SHARING``; selects the expected shapes of ``proj_e``/``proj_f``.
      proj_e: E, ``[H, K, N]`` for ``sharing="none"``, otherwise ``[K, N]``.
      proj_f: F of the same shape; None for ``"kv"``/``"layerwise"`` (F = E).

    Returns:
      ``[B, T, H, Dv]`` in the dtype of ``q_BTHD``.

    Raises:
      ValueError: for causal attention, segment ids, missing/mis-shaped projections or
        an input longer than ``max_len``.
    """
    registry.check_qkv(q_BTHD, k_BSHD, v_BSHD)
    if causal:
        raise ValueError(
            "linformer does not support causal=True: projecting keys and values along the "
            "sequence (E K, F V) mixes every position, future ones included, into each "
            "projected key, so causal attention would leak the future (Wang et al. 2020 "
            "define Linformer for bidirectional encoders only). Use 'dense'/'causal' or "
            "another causal mechanism for decoders."
        )
    if segment_ids is not None:
        raise ValueError(
            "linformer does not support segment_ids (packed sequences): the sequence "
            "projection mixes segments; pad each example and pass a key-padding mask instead"
        )
    proj_k, proj_len, sharing = check_options(dict(k=k, max_len=max_len, sharing=sharing))
    b, _, h, d = q_BTHD.shape
    s = k_BSHD.shape[1]
    if proj_e is None:
        owner = "the model's Encoder" if sharing == "layerwise" else "MultiHeadAttention"
        raise ValueError(
            f"linformer (sharing={sharing!r}) needs its projection proj_e, created by "
            f"{owner} through the mechanism's parameter hooks; when calling the function "
            "directly pass proj_e=[k, max_len] (or [H, k, max_len] for sharing='none')"
        )
    per_head = sharing == "none"
    if proj_f is None and sharing in ("none", "headwise"):
        raise ValueError(f"linformer sharing={sharing!r} needs a separate proj_f (F != E)")
    proj_f = proj_e if proj_f is None else proj_f
    for nm, proj in (("proj_e", proj_e), ("proj_f", proj_f)):
        _check_projection(nm, proj, per_head=per_head, h=h, s=s)
        if proj.shape[-2:] != (proj_k, proj_len):
            raise ValueError(
                f"linformer {nm} has shape {proj.shape}, inconsistent with options "
                f"k={proj_k}, max_len={proj_len} (expected [..., {proj_k}, {proj_len}])"
            )
    key_mask = masks_lib.check_key_mask(mask, b, s)
    if key_mask is not None:  # zero padded rows BEFORE projecting (fairseq forgets this)
        keep_BS11 = key_mask[:, :, None, None]
        k_BSHD = jnp.where(keep_BS11, k_BSHD, jnp.zeros((), k_BSHD.dtype))
        v_BSHD = jnp.where(keep_BS11, v_BSHD, jnp.zeros((), v_BSHD.dtype))
    kp_BKHD = _project(proj_e, k_BSHD)
    vp_BKHD = _project(proj_f, v_BSHD)
    # Eq. (7): the dense numerics on the projected keys/values (K positions, no mask).
    return numerics.attend(
        q_BTHD,
        kp_BKHD.astype(q_BTHD.dtype),
        vp_BKHD.astype(v_BSHD.dtype),
        scale=scale,
        dropout_rate=dropout_rate,
        dropout_rng=dropout_rng,
    )


def projection_init(key, shape, dtype=jnp.float32):
    """Initializer of E/F: truncated normal, variance 1/max_len (see module docstring).

    ``fan_in`` is the last (sequence) axis for ``[K, N]`` and ``[H, K, N]`` alike (the head
    axis of per-head projections is a batch axis).
    """
    batch_axis = tuple(range(len(shape) - 2))
    init = nn.initializers.variance_scaling(
        1.0, "fan_in", "truncated_normal", in_axis=-1, out_axis=-2, batch_axis=batch_axis
    )
    return init(key, shape, dtype)


def _param(module: nn.Module, name: str, shape: tuple[int, ...], axes: tuple[str, ...]):
    return module.param(name, nn.with_logical_partitioning(projection_init, axes), shape)


def module_params(module: nn.Module, *, q, k, v, options: dict) -> dict:
    """Registry hook: the per-layer E/F of ``MultiHeadAttention`` (sharing none/headwise/kv).

    Returns:
      ``{"proj_e": E, "proj_f": F}`` (F omitted for ``"kv"``; nothing for ``"layerwise"``,
      whose E comes from the model through ``model_params``).
    """
    del q, k, v
    proj_k, max_len, sharing = check_options(options)
    if sharing == "layerwise":
        return {}
    if sharing == "none":
        shape, axes = (module.num_heads, proj_k, max_len), LOGICAL_AXES_HKN
    else:
        shape, axes = (proj_k, max_len), LOGICAL_AXES_KN
    params = {"proj_e": _param(module, "linformer_e", shape, axes)}
    if sharing != "kv":
        params["proj_f"] = _param(module, "linformer_f", shape, axes)
    return params


def model_params(module: nn.Module, *, cfg, options: dict) -> dict:
    """Registry hook: the single E shared by every layer, head, key and value (layerwise).

    Called once in the model's ``Encoder`` scope; the parameter is ``encoder/linformer_e``.
    """
    del cfg
    proj_k, max_len, sharing = check_options(options)
    if sharing != "layerwise":
        return {}
    return {"proj_e": _param(module, "linformer_e", (proj_k, max_len), LOGICAL_AXES_KN)}


registry.register(
    registry.Mechanism(
        name="linformer",
        fn=linformer_attention,
        options=("k", "max_len", "sharing"),
        module_params=module_params,
        model_params=model_params,
        validate=validate,
        doc="low-rank E/F sequence projections n -> k (Wang et al. 2020); encoders only",
        causal_form="it has no causal form (its projected keys mix future positions)",
        packing="its projections E K, F V mix every position of a row, so packed examples "
        "would attend to each other",
        # E K and F V contract the sharded sequence axis (E sharded along it by the logical
        # axis 'length'): per-shard products and an all-reduce, no all-gather (tested).
        context_parallel="sharded",
    )
)
