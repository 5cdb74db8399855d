"""LSH attention (Kitaev et al. 2020, "Reformer: The Efficient Transformer", §2-3).

Registered as ``"lsh"`` (shared QK: the module builds no key projection). For each of
``n_hashes`` rounds r with its own random rotation ``R_r`` ([D, n_buckets/2]):

1. hash (§2, "Locality sensitive hashing"): ``h(x) = argmax([x R_r ; -x R_r])``;
2. sort positions by (bucket, position) — a stable sort of the buckets;
3. cut the sorted order into chunks of ``chunk_len``; each chunk attends to itself and to
   ``n_chunks_before`` / ``n_chunks_after`` neighbouring chunks of the same round (eq. 3-4);
   keys are the L2-normalized queries, ``k_j = q_j / ||q_j||`` (§2, "Shared-QK");
4. mask with the *original* positions: causal (j > i), key padding, packed segments, and
   the self mask: ``q_i . k_i`` is replaced by -1e5, so a position attends to itself only
   when nothing else is visible (§2, "Causal masking for shared-QK attention");
5. un-sort each round's output and log-sum-exp with a gather whose gradient is also a
   gather (never a scatter-add), and combine the rounds with weights
   ``softmax_r(lse_r)`` (§2, "Multi-round LSH attention"; as trax does).

Choices (documented, tested):
  * Rounds are hashed and chunked separately, and the first/last chunks do not wrap around
    to the other end (trax rolls the flattened rounds; wrapping only adds keys that the
    causal mask mostly removes). So within a round a key is seen at most once.
  * A key visible in several rounds is counted in each round; rounds are combined with
    ``softmax_r(lse_r)`` as in trax's ``LSHSelfAttention``, without the paper's duplicate
    count ``N_{i,j}`` (eq. 7-8 of the arXiv v1). With one chunk covering the sequence every
    round equals full attention, so the combination is exact there.
  * Rotations are drawn per round and per head from the explicit ``rng`` (the ``"lsh"`` Flax
    stream in a model; see ``module_params``). ``rng=None`` uses ``PRNGKey(seed)``. The
    rotations are a function of the key only, so the backward pass (and the reversible
    layers' recomputation) hash identically.
  * Padded keys (``mask`` False) get bucket K, past every real bucket, so they sort last:
    they never receive weight and never move the chunk boundaries of the real positions,
    which makes the real positions' outputs exactly invariant to the padding's contents.
    Sequences whose length is not a multiple of ``chunk_len`` are padded the same way
    internally. ``chunk_len`` longer than T is clipped to T.
  * Padding *length*: the default ``n_buckets`` (2 per chunk, trax's choice) is derived from
    ``max_len`` when given (models pass their ``max_len``), else from T. With ``max_len``
    or an explicit ``n_buckets`` the real positions' outputs are also exactly invariant to
    how many padded positions follow them; with neither, T (padding included) sets K.
  * Causality, precisely: causal LSH never gives weight to a future key, so output i is
    unchanged by future *values* and its gradient with respect to any input at j > i is
    exactly zero. It is NOT unchanged by future *queries*: with shared QK a later position's
    bucket moves the sorted order and the chunk boundaries, so the set of past keys that
    position i sees (and so its output) can change when later tokens change (the paper's
    and trax's definition). A model trained this way is conditioned on sequences as a
    whole; to condition exactly on a prefix, mask the positions after it as padding (they
    sort last): the prefix's outputs then equal those of the prefix alone, which is how
    ``seqjax.sample`` samples LSH models.
  * Derivatives: reverse mode of any order (the un-sort's custom VJP is a gather, itself
    differentiable); forward mode (``jvp``, ``jacfwd``, ``jax.hessian``) raises
    ``NotImplementedError(FORWARD_MODE_MESSAGE)``.
  * Memory: the chunk attention is rematerialized (``jax.checkpoint``) and runs one round
    at a time, so the backward pass keeps only the sorted queries/values, O(n_hashes T D),
    and the transient logits are one round's, O(T chunk_len (1 + n_chunks_before +
    n_chunks_after)); never T x T.
  * Hashing runs one round at a time without building ``[xR ; -xR]`` (``hash_buckets``);
    with the default K = 2T/C its work is still O(T K D). ``n_buckets=(f_1, f_2)``
    (factorized, as trax allows) hashes with ``(f_1 + f_2)/2`` columns instead of K/2.

Legend: B batch, T length (Tp padded to a multiple of C), H heads, D head dim (Dv of the
values), R hash rounds, N number of chunks, C chunk length, W window = C (1 + before +
after), K n_buckets.
"""

from __future__ import annotations

import zlib

import jax
import jax.numpy as jnp
import numpy as np

from seqjax.attention import blockwise, numerics, registry
from seqjax.attention import masks as masks_lib
from seqjax.attention.lsh_hashing import (  # noqa: F401 (part of lsh's API)
    default_n_buckets,
    factor_buckets,
    hash_buckets,
    rotations,
    total_buckets,
)

SELF_LOGIT = -1e5  # logit of q_i . k_i (Kitaev et al. 2020, §2; trax uses the same value)
OPTIONS = ("n_hashes", "n_buckets", "chunk_len", "n_chunks_before", "n_chunks_after", "seed")
FORWARD_MODE_MESSAGE = (
    "lsh attention supports reverse mode of any order (jax.grad, grad of grad, "
    "jax.jacrev(jax.jacrev(f)) for Hessians) but not forward mode (jvp, jacfwd, "
    "jax.hessian): its un-sort is a custom VJP whose gradient is a gather"
)
DEFAULTS = dict(n_hashes=1, n_buckets=None, chunk_len=128, n_chunks_before=1, n_chunks_after=0)


def validate_options(options: dict, seq_len: int | None = None) -> None:
    """Raises ``ValueError`` naming the option for values LSH attention cannot use.

    Args:
      options: the mechanism's options (``config.model.attention_options.lsh``).
      seq_len: T, when known.
    """
    opts = {**DEFAULTS, **dict(options)}

    def bad(name, want):
        raise ValueError(f"attention_options.lsh.{name}={opts[name]!r} is invalid; expected {want}")

    for name in ("n_hashes", "chunk_len"):
        if not isinstance(opts[name], (int, np.integer)) or opts[name] < 1:
            bad(name, "an integer >= 1")
    for name in ("n_chunks_before", "n_chunks_after"):
        if not isinstance(opts[name], (int, np.integer)) or opts[name] < 0:
            bad(name, "an integer >= 0")
    nb = opts["n_buckets"]
    want = (
        "None (about 2 max_len/chunk_len), 1 (no hashing), an even integer >= 2, or a tuple "
        "of even integers >= 2 (factorized hashing, K = their product)"
    )
    if isinstance(nb, (list, tuple)):
        if not nb or any(not isinstance(f, (int, np.integer)) or f < 2 or f % 2 for f in nb):
            bad("n_buckets", want)
    elif nb is not None and (
        not isinstance(nb, (int, np.integer)) or nb < 1 or (nb > 1 and nb % 2)
    ):
        bad("n_buckets", want)
    if seq_len is not None and seq_len < 1:
        raise ValueError(f"LSH attention needs a sequence length >= 1; got {seq_len}")


# ----------------------------------------------------------------------------------------
# Permutations whose gradient is a gather (Kitaev et al. 2020, §2: "un-sort").


@jax.custom_vjp
def permute(x_MNF, idx_MN, inv_MN):
    """``y[..., n, :] = x[..., idx[n], :]`` for a permutation ``idx`` with inverse ``inv``.

    The gradient is the gather ``x_bar = y_bar[..., inv, :]``, not a scatter-add.
    """
    return jnp.take_along_axis(x_MNF, idx_MN[..., None], axis=-2)


def _permute_fwd(x_MNF, idx_MN, inv_MN):
    return permute(x_MNF, idx_MN, inv_MN), (idx_MN, inv_MN)


def _permute_bwd(res, g_MNF):
    idx_MN, inv_MN = res
    return jnp.take_along_axis(g_MNF, inv_MN[..., None], axis=-2), None, None


permute.defvjp(_permute_fwd, _permute_bwd)


# ----------------------------------------------------------------------------------------
# Hashing.


def _look_around(x_MNC, before: int, after: int, fill):
    """Each chunk with its neighbours: ``[B, H, R, N, C, *F] -> [B, H, R, N, W, *F]``.

    Chunks outside ``[0, N)`` are filled with ``fill`` (no wrap-around).
    """
    parts = []
    axis = 3  # chunked arrays are [B, H, R, N, C] or [B, H, R, N, C, D]
    num = x_MNC.shape[axis]
    for o in range(-before, after + 1):
        if o == 0:
            parts.append(x_MNC)
            continue
        shifted = jnp.roll(x_MNC, -o, axis=axis)  # chunk i holds chunk i + o
        idx = jnp.arange(num) + o
        ok = (idx >= 0) & (idx < num)
        shape = [1] * x_MNC.ndim
        shape[axis] = num
        parts.append(jnp.where(ok.reshape(shape), shifted, fill))
    return jnp.concatenate(parts, axis=axis + 1)


# ----------------------------------------------------------------------------------------
# Attention inside the chunks (rematerialized in the backward pass).


def _attend_chunks(
    q_s, v_s, pos_s, kmask_s, seg_s, drop_rng, *, n, c, before, after, causal, scale, rate
):
    """Exact attention of each sorted chunk over its window.

    Args:
      q_s: sorted queries ``[B, H, R, Tp, D]``; v_s: sorted values ``[B, H, R, Tp, Dv]``.
      pos_s: original positions ``[B, H, R, Tp]`` (``>= T`` for internal padding).
      kmask_s: bool ``[B, H, R, Tp]`` key may receive weight (padding, length).
      seg_s: int ``[B, H, R, Tp]`` segment ids or None.
      drop_rng: dropout key or None.

    Returns:
      ``(out [B, H, R, Tp, Dv] float32, lse [B, H, R, Tp] float32)``.
    """
    b, h, r, tp, d = q_s.shape
    dv = v_s.shape[-1]
    q_c = q_s.reshape(b, h, r, n, c, d)
    # Shared QK (§2): keys are the unit-normalized queries.
    qf = q_s.astype(jnp.float32)
    k_s = (qf * jax.lax.rsqrt(jnp.sum(qf * qf, -1, keepdims=True) + 1e-12)).astype(q_s.dtype)
    k_w = _look_around(k_s.reshape(b, h, r, n, c, d), before, after, 0)
    v_w = _look_around(v_s.reshape(b, h, r, n, c, dv), before, after, 0)
    qpos_c = pos_s.reshape(b, h, r, n, c)
    kpos_w = _look_around(qpos_c, before, after, -1)  # -1: outside the sequence
    ok_w = _look_around(kmask_s.reshape(b, h, r, n, c), before, after, False)

    logits = jnp.einsum("bhrnqd,bhrnkd->bhrnqk", q_c, k_w, preferred_element_type=jnp.float32)
    logits = logits * scale
    qp, kp = qpos_c[..., :, None], kpos_w[..., None, :]
    valid = ok_w[..., None, :]
    if causal:
        valid = valid & (kp <= qp)
    if seg_s is not None:
        seg_w = _look_around(seg_s.reshape(b, h, r, n, c), before, after, -1)
        valid = valid & (seg_s.reshape(b, h, r, n, c)[..., :, None] == seg_w[..., None, :])
    logits = jnp.where(kp == qp, SELF_LOGIT, logits)
    out, lse = numerics.attend_logits(
        logits,
        v_w,
        valid,
        dropout_rate=rate,
        dropout_rng=drop_rng,
        spec="bhrnqk,bhrnkd->bhrnqd",
        return_lse=True,
    )
    return out.reshape(b, h, r, tp, dv), lse.reshape(b, h, r, tp)


# ----------------------------------------------------------------------------------------
# The mechanism.


def lsh_attention(
    q,
    k=None,
    v=None,
    *,
    causal=False,
    mask=None,
    segment_ids=None,
    dropout_rate=0.0,
    dropout_rng=None,
    scale=None,
    n_hashes=1,
    n_buckets=None,
    chunk_len=128,
    n_chunks_before=1,
    n_chunks_after=0,
    seed=0,
    rng=None,
    max_len=None,
):
    """Shared-QK multi-round LSH self-attention (Kitaev et al. 2020, §2; see module doc).

    Args:
      q: queries ``[B, T, H, D]``; keys are ``q / ||q||``.
      k: must be None (or ``q`` itself): LSH attention is shared-QK.
      v: values ``[B, T, H, Dv]``.
      causal, mask, segment_ids: see ``seqjax.attention.masks`` (self-attention, T == S).
      dropout_rate, dropout_rng: dropout on the attention probabilities.
      scale: logit scale, default ``1/sqrt(D)``.
      n_hashes: hash rounds R.
      n_buckets: buckets per round K (None: about 2 max_len/chunk_len, or 2T/chunk_len
        without ``max_len``; 1: no hashing, all in one bucket; a tuple of even factors:
        factorized hashing with K = their product).
      chunk_len: C, positions per chunk of the sorted order.
      n_chunks_before, n_chunks_after: neighbouring chunks each chunk also attends to.
      seed: ``rng = PRNGKey(seed)`` when ``rng`` is None.
      rng: PRNG key of the random rotations (tests and models pass it explicitly).
      max_len: the longest sequence of the caller (a model's ``max_len``); the default
        ``n_buckets`` derives from it, so the padded length T never changes the hashing.

    Returns:
      ``[B, T, H, Dv]`` in the dtype of ``q``.
    """
    if k is not None and k is not q:
        raise ValueError(
            "lsh attention is shared-QK (keys are the normalized queries): pass k=None; "
            f"got k of shape {tuple(jnp.shape(k))}"
        )
    if v is None:
        raise ValueError("lsh attention needs values v of shape [batch, seq, heads, head_dim]")
    registry.check_qkv(q, None, v, shared_qk=True)
    if blockwise.forward_mode_active(q, v):
        raise NotImplementedError(FORWARD_MODE_MESSAGE)
    b, t, h, d = q.shape
    if v.shape[1] != t:
        raise ValueError(
            f"lsh attention is self-attention: q has length {t} but v has {v.shape[1]}"
        )
    opts = dict(
        n_hashes=n_hashes,
        n_buckets=n_buckets,
        chunk_len=chunk_len,
        n_chunks_before=n_chunks_before,
        n_chunks_after=n_chunks_after,
    )
    validate_options(opts, t)
    c = min(chunk_len, t)
    n = -(-t // c)
    tp = n * c
    if max_len is not None and (not isinstance(max_len, (int, np.integer)) or max_len < 1):
        raise ValueError(f"lsh attention max_len={max_len!r} is invalid; expected an int >= 1")
    nb = n_buckets if n_buckets is not None else default_n_buckets(max_len or t, chunk_len)
    nb = tuple(nb) if isinstance(nb, (list, tuple)) else nb
    scale = float(numerics.default_scale(scale, d))
    key_mask = masks_lib.check_key_mask(mask, b, t)
    q_seg, kv_seg = masks_lib.split_segment_ids(segment_ids, t, t)
    numerics.check_dropout(dropout_rate, dropout_rng)
    rng = jax.random.PRNGKey(seed) if rng is None else rng

    q_BHTD = numerics.pad_to(q, tp).transpose(0, 2, 1, 3)
    v_BHTD = numerics.pad_to(v, tp).transpose(0, 2, 1, 3)

    rot = rotations(rng, num_heads=h, n_hashes=n_hashes, head_dim=d, n_buckets=nb)
    buckets_BHRT = hash_buckets(q_BHTD, rot, nb)
    # Keys that may receive weight: inside the sequence and not padding. The others sort
    # last (bucket K), so they never move the chunk boundaries of the real keys.
    key_ok_BT = jnp.broadcast_to(jnp.arange(tp) < t, (b, tp))
    if key_mask is not None:
        key_ok_BT = key_ok_BT & numerics.pad_to(jnp.broadcast_to(key_mask, (b, t)), tp)
    buckets_BHRT = jnp.where(key_ok_BT[:, None, None, :], buckets_BHRT, total_buckets(nb))
    perm_BHRT = jnp.argsort(buckets_BHRT, axis=-1, stable=True).astype(jnp.int32)
    inv_BHRT = jnp.argsort(perm_BHRT, axis=-1).astype(jnp.int32)

    shape_r = (b, h, n_hashes, tp)
    q_s = permute(jnp.broadcast_to(q_BHTD[:, :, None], (*shape_r, d)), perm_BHRT, inv_BHRT)
    v_s = permute(
        jnp.broadcast_to(v_BHTD[:, :, None], (*shape_r, v.shape[-1])), perm_BHRT, inv_BHRT
    )

    def sort_aux(x_BT, fill):
        x_BT = numerics.pad_to(x_BT, tp, value=fill)
        x = jnp.broadcast_to(x_BT[:, None, None, :], shape_r)
        return jnp.take_along_axis(x, perm_BHRT, axis=-1)

    kmask_s = jnp.take_along_axis(
        jnp.broadcast_to(key_ok_BT[:, None, None, :], shape_r), perm_BHRT, axis=-1
    )
    seg_s = None
    if q_seg is not None:
        if q_seg is not kv_seg:
            raise ValueError("lsh attention takes segment_ids as one array [B, T] (self-attention)")
        seg_s = sort_aux(q_seg.astype(jnp.int32), -1)

    def one_round(q_r, v_r, pos_r, ok_r, seg_r, r):
        """One hash round ([B, H, Tp, ...] slices), rematerialized in the backward pass."""
        drop = jax.random.fold_in(dropout_rng, r) if dropout_rate > 0.0 else None
        add = lambda x: None if x is None else x[:, :, None]  # noqa: E731
        out, lse = _attend_chunks(
            add(q_r),
            add(v_r),
            add(pos_r),
            add(ok_r),
            add(seg_r),
            drop,
            n=n,
            c=c,
            before=n_chunks_before,
            after=n_chunks_after,
            causal=causal,
            scale=scale,
            rate=dropout_rate,
        )
        return out[:, :, 0], lse[:, :, 0]

    # Rounds run one after another (lax.map), so the transient logits are one round's.
    attend = jax.checkpoint(one_round)
    rounds_first = lambda x: None if x is None else jnp.moveaxis(x, 2, 0)  # noqa: E731
    out_R, lse_R = jax.lax.map(
        lambda a: attend(*a),
        (
            rounds_first(q_s),
            rounds_first(v_s),
            rounds_first(perm_BHRT),
            rounds_first(kmask_s),
            rounds_first(seg_s),
            jnp.arange(n_hashes),
        ),
    )
    out_s, lse_s = jnp.moveaxis(out_R, 0, 2), jnp.moveaxis(lse_R, 0, 2)

    # Un-sort (gradient: a gather by the sort permutation).
    out_BHRTD = permute(out_s, inv_BHRT, perm_BHRT)[:, :, :, :t]
    lse_BHRT = permute(lse_s[..., None], inv_BHRT, perm_BHRT)[..., 0][:, :, :, :t]

    # Combine rounds: weights softmax_r(lse_r); rows with nothing visible give zeros.
    out_BHTD = numerics.merge_lse(
        [out_BHRTD[:, :, i] for i in range(n_hashes)], [lse_BHRT[:, :, i] for i in range(n_hashes)]
    )
    return out_BHTD.transpose(0, 2, 1, 3).astype(q.dtype)


def shared_qk_reference(q, v, *, causal=False, mask=None, segment_ids=None, scale=None):
    """Full shared-QK attention with the self mask, materializing ``[B, H, T, T]``.

    The ground truth for ``lsh_attention`` with a single chunk covering the sequence.
    """
    b, t, h, d = q.shape
    qf = q.astype(jnp.float32)
    k = qf * jax.lax.rsqrt(jnp.sum(qf * qf, -1, keepdims=True) + 1e-12)
    logits = numerics.scores(qf, k, numerics.default_scale(scale, d))
    logits = jnp.where(jnp.eye(t, dtype=bool), SELF_LOGIT, logits)
    valid = masks_lib.dense_mask(b, t, t, causal=causal, mask=mask, segment_ids=segment_ids)
    return numerics.attend_logits(logits, v.astype(jnp.float32), valid, out_dtype=q.dtype)


# ----------------------------------------------------------------------------------------
# Registry hooks.


def fallback_key(seed: int, path) -> jax.Array:
    """Deterministic rotation key of a layer without an RNG stream: seed + layer path."""
    return jax.random.fold_in(
        jax.random.PRNGKey(seed), zlib.crc32("/".join(map(str, path)).encode()) & 0x7FFFFFFF
    )


def _module_params(module, *, q, k, v, options) -> dict:
    """Draws this layer's rotation key in the Flax ``MultiHeadAttention`` scope.

    Also passes the module's ``max_len`` (the model's), from which the default
    ``n_buckets`` is derived. Key order: the ``"lsh"`` RNG stream; else the ``"dropout"``
    stream (training without an explicit ``"lsh"`` stream still re-hashes every step);
    else ``fallback_key(seed, path)`` (evaluation and decoding: deterministic, different
    per layer). The key is drawn once
    per call, so the backward pass uses the same rotations.
    """
    del q, k, v
    # The model's max_len (not the padded input length) sets the default n_buckets.
    out = {"max_len": module.max_len} if getattr(module, "max_len", None) else {}
    if module.has_rng("lsh"):
        return {**out, "rng": module.make_rng("lsh")}
    if module.has_rng("dropout"):
        return {**out, "rng": module.make_rng("dropout")}
    return {**out, "rng": fallback_key(int(options.get("seed", 0)), module.path)}


def _validate(options: dict, seq_len: int) -> None:
    validate_options(options, seq_len)


registry.register(
    registry.Mechanism(
        name="lsh",
        fn=lsh_attention,
        shared_qk=True,
        module_params=_module_params,
        options=OPTIONS,
        validate=_validate,
        doc="Reformer LSH attention (Kitaev et al. 2020): shared QK, multi-round hashing",
        packing="its hash buckets are sorted and chunked over the whole row, so the other "
        "examples change which keys a query sees",
        decode_cache="lsh",
        context_parallel_refusal="LSH attention sorts every position of the sequence into "
        "hash buckets, so each device would need the whole sequence's keys",
    )
)
