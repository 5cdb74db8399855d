"""Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs").

Attention with a feature map phi in place of the softmax kernel (Katharopoulos et al. 2020,
§3.2, eq. 5-6):

    V'_i = phi(Q_i)^T sum_j phi(K_j) V_j^T / (phi(Q_i)^T sum_j phi(K_j))

with phi(x) = elu(x) + 1 (eq. 7) applied to the queries and keys as given: no 1/sqrt(D)
scaling (the feature map replaces the softmax, so there is no temperature; the common
option ``scale`` is refused). Non-causal: ``S = sum_j phi(K_j) V_j^T`` ``[m, Dv]`` and
``z = sum_j phi(K_j)`` ``[m]`` once, then each query costs O(m Dv): time O(N m Dv).
Causal (§3.3, eq. 8-10): the sums run over j <= i, computed by default in chunks (option
``chunk``, default 128: quadratic inside a chunk, a running ``[m, Dv]`` state between
chunks; ``seqjax.attention.linear_chunked``) or, with ``chunk=0``, as prefix sums
(``cumsum``) along the sequence (a ``[m, Dv]`` state stored per position); equivalently the
recurrence ``S_i = S_{i-1} + phi(K_i) V_i^T``,
``z_i = z_{i-1} + phi(K_i)`` of §3.4, which is the O(1)-state decoding path
(``recurrent_attention``, registered as the mechanism's ``decode_state``).

Both forms equal, to float precision, the quadratic form
``((phi(Q) phi(K)^T) ⊙ M) V`` normalised by its row sums, with M the causal/padding mask
(``quadratic_attention``, the ground truth of the tests). ``EPS`` is added to the
normaliser (as the authors' code does) so a query with no visible key returns 0.

Options and refusals: ``mask`` (key padding) zeroes phi(K_j) of padded keys, so they add
nothing to S and z. ``causal`` uses the bottom-right alignment of the other mechanisms
(query i sees keys j <= i + S - T). ``dropout_rate > 0`` is refused: there is no
attention matrix to drop entries from. ``segment_ids`` are refused: the sums would have to
be restarted per segment, which this implementation does not do.

The shared machinery (``feature_attention``, ``recurrent_attention``) takes any positive
feature maps, so Performer (``seqjax.attention.performer``) reuses it with FAVOR+ features.

Legend: B batch, T query length, S key/value length, H heads, D head dim, Dv value dim,
M feature count (m; D for elu+1).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from seqjax.attention import linear_chunked, registry
from seqjax.attention import masks as masks_lib

EPS = 1e-6


def refuse_unsupported(name: str, *, segment_ids, dropout_rate) -> None:
    """One clear error each for the common options a kernelized attention cannot honour."""
    if segment_ids is not None:
        raise ValueError(
            f"attention {name!r} does not support segment_ids (packed sequences): its "
            "running sums would mix segments; set data packing off"
        )
    if dropout_rate:
        raise ValueError(
            f"attention {name!r} has no attention matrix to apply dropout to; set the "
            "attention dropout (config.model.attention_dropout_rate) to 0"
        )


def elu_plus_one(x):
    """phi(x) = elu(x) + 1 > 0 (Katharopoulos et al. 2020, eq. 7), in float32."""
    return jax.nn.elu(x.astype(jnp.float32)) + 1.0


def _normalise(num_BTHD, den_BTH, eps):
    """``num / (den + eps)``; ``eps=0``: ``num / den`` with 0 where no key is visible."""
    if eps:
        return num_BTHD / (den_BTH[..., None] + eps)
    return num_BTHD / jnp.where(den_BTH > 0, den_BTH, 1.0)[..., None]


def _mask_keys(phi_k_BSHM, mask, b, s):
    mask = masks_lib.check_key_mask(mask, b, s)
    if mask is None:
        return phi_k_BSHM
    return phi_k_BSHM * mask[:, :, None, None].astype(phi_k_BSHM.dtype)


def feature_attention(
    phi_q_BTHM, phi_k_BSHM, v_BSHD, *, causal=False, mask=None, eps=EPS,
    chunk=linear_chunked.DEFAULT_CHUNK,
):  # fmt: skip
    """``phi(Q) S / (phi(Q) z)`` with the sums over visible keys (eq. 6; eq. 9 when causal).

    Args:
      phi_q_BTHM, phi_k_BSHM: non-negative features of queries and keys (float32).
      v_BSHD: values.
      causal: bottom-right aligned (query i sees keys j <= i + S - T).
      mask: ``[B, S]`` key padding (True = keep).
      eps: added to the normaliser (0: exact division, 0 output where no key is visible).
      chunk: causal only: chunk length of the chunk form (``linear_chunked``); 0 = prefix
        sums.

    Returns:
      float32 ``[B, T, H, Dv]``.
    """
    b, t = phi_q_BTHM.shape[:2]
    s = phi_k_BSHM.shape[1]
    phi_k_BSHM = _mask_keys(phi_k_BSHM, mask, b, s)
    v_BSHD = v_BSHD.astype(jnp.float32)
    if not causal:
        kv_BHMD = jnp.einsum("bshm,bshd->bhmd", phi_k_BSHM, v_BSHD)
        z_BHM = phi_k_BSHM.sum(axis=1)
        num_BTHD = jnp.einsum("bthm,bhmd->bthd", phi_q_BTHM, kv_BHMD)
        den_BTH = jnp.einsum("bthm,bhm->bth", phi_q_BTHM, z_BHM)
        return _normalise(num_BTHD, den_BTH, eps)
    offset = masks_lib.causal_offset(t, s)
    if offset < 0:
        raise ValueError(
            f"causal linear attention needs at least as many keys as queries; got T={t} > S={s}"
        )
    if chunk:
        num_BTHD, den_BTH = linear_chunked.causal_sums(phi_q_BTHM, phi_k_BSHM, v_BSHD, chunk=chunk)
        return _normalise(num_BTHD, den_BTH, eps)
    # Prefix sums over keys (eq. 9-10): S_j = sum_{l<=j} phi(K_l) V_l^T, z_j likewise.
    kv_BSHMD = jnp.cumsum(jnp.einsum("bshm,bshd->bshmd", phi_k_BSHM, v_BSHD), axis=1)
    z_BSHM = jnp.cumsum(phi_k_BSHM, axis=1)
    kv_BTHMD, z_BTHM = kv_BSHMD[:, offset:], z_BSHM[:, offset:]  # query i: keys <= i+offset
    num_BTHD = jnp.einsum("bthm,bthmd->bthd", phi_q_BTHM, kv_BTHMD)
    den_BTH = jnp.einsum("bthm,bthm->bth", phi_q_BTHM, z_BTHM)
    return _normalise(num_BTHD, den_BTH, eps)


def recurrent_attention(
    phi_q_BTHM, phi_k_BTHM, v_BTHD, state=None, *, mask=None, eps=EPS,
    chunk=linear_chunked.DEFAULT_CHUNK,
):  # fmt: skip
    """Causal attention of T new tokens continuing ``state`` (the RNN of §3.4, eq. 16-20).

    Args:
      phi_q_BTHM, phi_k_BTHM: features of the new queries and keys (same T).
      v_BTHD: their values.
      state: ``{"kv": [B, H, M, Dv], "z": [B, H, M]}`` (float32) after the earlier tokens,
        or None for an empty prefix.
      mask: ``[B, T]`` padding of the new keys (True = keep).
      chunk: T > 1 new tokens (a prompt) in chunks of this length (``linear_chunked``,
        no ``[T, M, Dv]`` states); 0 or one token: the cumsum of eq. 18-19.

    Returns:
      ``(out float32 [B, T, H, Dv], new_state)``; feeding a sequence in pieces gives the
      causal ``feature_attention`` of the whole sequence.
    """
    b, t, h, m = phi_k_BTHM.shape
    dv = v_BTHD.shape[-1]
    if state is None:
        state = {
            "kv": jnp.zeros((b, h, m, dv), jnp.float32),
            "z": jnp.zeros((b, h, m), jnp.float32),
        }
    phi_k_BTHM = _mask_keys(phi_k_BTHM, mask, b, t)
    v_BTHD = v_BTHD.astype(jnp.float32)
    if chunk and t > 1:
        num_BTHD, den_BTH = linear_chunked.causal_sums(
            phi_q_BTHM, phi_k_BTHM, v_BTHD, chunk=chunk, state=state
        )
        new_state = {
            "kv": state["kv"] + jnp.einsum("bthm,bthd->bhmd", phi_k_BTHM, v_BTHD),
            "z": state["z"] + phi_k_BTHM.sum(axis=1),
        }
        return _normalise(num_BTHD, den_BTH, eps), new_state
    kv_BTHMD = state["kv"][:, None] + jnp.cumsum(
        jnp.einsum("bthm,bthd->bthmd", phi_k_BTHM, v_BTHD), axis=1
    )
    z_BTHM = state["z"][:, None] + jnp.cumsum(phi_k_BTHM, axis=1)
    num_BTHD = jnp.einsum("bthm,bthmd->bthd", phi_q_BTHM, kv_BTHMD)
    den_BTH = jnp.einsum("bthm,bthm->bth", phi_q_BTHM, z_BTHM)
    out_BTHD = _normalise(num_BTHD, den_BTH, eps)
    return out_BTHD, {"kv": kv_BTHMD[:, -1], "z": z_BTHM[:, -1]}


def quadratic_attention(phi_q_BTHM, phi_k_BSHM, v_BSHD, *, causal=False, mask=None, eps=EPS):
    """The O(T S) form ``((phi(Q) phi(K)^T) ⊙ M) V / rowsum`` (eq. 4 with sim = phi phi^T):
    the ground truth that ``feature_attention`` equals."""
    b, t = phi_q_BTHM.shape[:2]
    s = phi_k_BSHM.shape[1]
    sim_BHTS = jnp.einsum("bthm,bshm->bhts", phi_q_BTHM, phi_k_BSHM)
    valid = masks_lib.dense_mask(b, t, s, causal=causal, mask=mask)
    if valid is not None:
        sim_BHTS = sim_BHTS * jnp.broadcast_to(valid, sim_BHTS.shape).astype(sim_BHTS.dtype)
    num_BHTD = jnp.einsum("bhts,bshd->bhtd", sim_BHTS, v_BSHD.astype(jnp.float32))
    den_BHT = sim_BHTS.sum(-1)
    return _normalise(num_BHTD, den_BHT, eps).transpose(0, 2, 1, 3)


def _check_scale(scale) -> None:
    if scale is not None:
        raise ValueError(
            "attention 'linear' takes no scale: phi(x) = elu(x) + 1 is applied to q and k as "
            "given (Katharopoulos et al. 2020, eq. 7); remove the scale option"
        )


def linear_attention(
    q_BTHD,
    k_BSHD,
    v_BSHD,
    *,
    causal=False,
    mask=None,
    segment_ids=None,
    dropout_rate=0.0,
    dropout_rng=None,
    scale=None,
    chunk=linear_chunked.DEFAULT_CHUNK,
):
    """Linear attention with phi = elu + 1 (module docstring), registered as ``"linear"``.

    ``chunk``: causal chunk length (0 = prefix sums); equal results either way.

    Returns:
      ``[B, T, H, Dv]`` in the dtype of ``q``.
    """
    del dropout_rng
    registry.check_qkv(q_BTHD, k_BSHD, v_BSHD)
    refuse_unsupported("linear", segment_ids=segment_ids, dropout_rate=dropout_rate)
    _check_scale(scale)
    chunk = linear_chunked.check_chunk(chunk, "linear")
    out = feature_attention(
        elu_plus_one(q_BTHD), elu_plus_one(k_BSHD), v_BSHD, causal=causal, mask=mask,
        chunk=chunk,
    )  # fmt: skip
    return out.astype(q_BTHD.dtype)


def linear_decode(
    q_BTHD, k_BTHD, v_BTHD, state=None, *, mask=None, scale=None,
    chunk=linear_chunked.DEFAULT_CHUNK, **unused,
):  # fmt: skip
    """The ``decode_state`` hook: causal linear attention of new tokens after ``state``."""
    del unused
    _check_scale(scale)
    out, state = recurrent_attention(
        elu_plus_one(q_BTHD), elu_plus_one(k_BTHD), v_BTHD, state, mask=mask,
        chunk=linear_chunked.check_chunk(chunk, "linear"),
    )  # fmt: skip
    return out.astype(q_BTHD.dtype), state


def _validate(options: dict, seq_len: int) -> None:
    """Config-time check of the options (called before anything compiles)."""
    del seq_len
    linear_chunked.check_chunk(options.get("chunk", linear_chunked.DEFAULT_CHUNK), "linear")


registry.register(
    registry.Mechanism(
        name="linear",
        fn=linear_attention,
        decode_state=linear_decode,
        options=("chunk",),
        validate=_validate,
        doc="linear attention (Katharopoulos et al. 2020): phi = elu + 1, causal in chunks "
        "(or prefix sums, chunk=0), O(1)-state decoding",
        attention_dropout=False,
        packing="its running sums over the row would mix the examples",
    )
)
