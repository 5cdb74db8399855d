"""Chunked softmax cross-entropy of an output layer: the loss of ``softmax(h W + b)``
without the float32 ``[N, V]`` logits.

The plain form (``optax.softmax_cross_entropy_with_integer_labels`` of the model's
logits) writes ``[B, T, V]`` float32 logits, reads them for the log-sum-exp, writes their
gradient ``softmax - onehot`` and reads it twice more for ``dh = dlogits W^T`` and
``dW = h^T dlogits``: for a GPT-2-small-class step (B 16, T 1024, V 50,304) that is 3.3 GB
per pass. Here the N = B T tokens are cut into chunks of C tokens; a ``lax.scan`` computes
each chunk's logits ``[C, V]`` from the final hidden states and the output embedding,
its log-sum-exp, loss and argmax, and at once the chunk's share of the gradients, so the
largest float32 intermediate is ``[C, V]``.

Gradients in the forward pass: the loss sum is linear in its cotangent, so the gradients
for a unit cotangent (``dlogits = w_i (softmax_i - onehot_i)``; Goodfellow et al. 2016,
§6.2.2.3) are computed chunk by chunk during the forward scan and the backward pass only
scales them by the cotangent. The logits matmul therefore runs once, as in the plain form
(a recompute-in-backward form would run it twice: +2 N E V FLOPs). The same idea as the
"fused linear cross-entropy" of Liger-Kernel (Hsu et al. 2024), written here in plain JAX.

Numerics: logits, log-sum-exp and gradients in float32 (the plain form's
``embed.attend(x.astype(float32))``); values and gradients w.r.t. the hidden states, the
output embedding, the bias and the token weights equal the plain form to float32 round-off
(``tests/tasks/test_chunked_xent.py``). First-order reverse mode only (``custom_vjp``):
``jvp`` raises; use ``chunk=0`` in callers for the plain form.

Legend: N tokens (B T flattened), E model width, V vocabulary, C tokens per chunk,
K chunks (N / C, the tail padded with weight-0 tokens).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

LAYOUTS = ("ve", "ev")  # output embedding [V, E] (a tied token table) or [E, V] (a Dense kernel)


def check_chunk(chunk, field: str = "chunk") -> int:
    """Validates a chunk size (one sentence naming ``field`` and the valid values)."""
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"{field}={chunk!r} must be a positive integer (tokens per chunk)")
    return chunk


def _logits(h_CE, w, bias_V, layout):
    spec = "ce,ve->cv" if layout == "ve" else "ce,ev->cv"
    logits_CV = jnp.einsum(spec, h_CE, w, preferred_element_type=jnp.float32)
    return logits_CV.astype(jnp.float32) + bias_V.astype(jnp.float32)[None, :]


def _chunk_pass(h_KCE, w, bias_V, targets_KC, weights_KC, layout, with_grads: bool):
    """One scan over the chunks: the sums, per-token CE and (``with_grads``) the gradients
    of ``loss_sum`` for a unit cotangent."""
    v = bias_V.shape[0]
    zero = jnp.zeros((), jnp.float32)
    dw0 = jnp.zeros(w.shape, jnp.float32) if with_grads else zero
    db0 = jnp.zeros((v,), jnp.float32) if with_grads else zero

    def body(carry, xs):
        loss, correct, dw, db = carry
        h_CE, t_C, wt_C = xs
        logits_CV = _logits(h_CE, w, bias_V, layout)
        lse_C = jax.nn.logsumexp(logits_CV, axis=-1)
        target_C = jnp.take_along_axis(logits_CV, t_C[:, None], axis=-1)[:, 0]
        ce_C = lse_C - target_C
        hit_C = (jnp.argmax(logits_CV, axis=-1) == t_C).astype(jnp.float32)
        loss, correct = loss + (ce_C * wt_C).sum(), correct + (hit_C * wt_C).sum()
        if not with_grads:
            return (loss, correct, dw, db), (ce_C, None)
        onehot_CV = jnp.arange(v)[None, :] == t_C[:, None]
        p_CV = jnp.exp(logits_CV - lse_C[:, None])
        dlogits_CV = (p_CV - onehot_CV.astype(jnp.float32)) * wt_C[:, None]
        if layout == "ve":
            dh_CE = jnp.einsum("cv,ve->ce", dlogits_CV, w, preferred_element_type=jnp.float32)
            dw = dw + jnp.einsum("cv,ce->ve", dlogits_CV, h_CE, preferred_element_type=jnp.float32)
        else:
            dh_CE = jnp.einsum("cv,ev->ce", dlogits_CV, w, preferred_element_type=jnp.float32)
            dw = dw + jnp.einsum("ce,cv->ev", h_CE, dlogits_CV, preferred_element_type=jnp.float32)
        db = db + dlogits_CV.sum(axis=0)
        return (loss, correct, dw, db), (ce_C, dh_CE.astype(h_CE.dtype))

    (loss, correct, dw, db), (ce_KC, dh_KCE) = jax.lax.scan(
        body, (zero, zero, dw0, db0), (h_KCE, targets_KC, weights_KC)
    )
    return loss, correct, ce_KC, dh_KCE, dw, db


@functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
def _xent_sums(h_KCE, w, bias_V, targets_KC, weights_KC, layout):
    loss, correct, *_ = _chunk_pass(h_KCE, w, bias_V, targets_KC, weights_KC, layout, False)
    return loss, correct


def _xent_fwd(h_KCE, w, bias_V, targets_KC, weights_KC, layout):
    loss, correct, ce_KC, dh_KCE, dw, db = _chunk_pass(
        h_KCE, w, bias_V, targets_KC, weights_KC, layout, True
    )
    residuals = (dh_KCE, dw.astype(w.dtype), db.astype(bias_V.dtype), ce_KC)
    return (loss, correct), residuals


def _xent_bwd(layout, residuals, cotangents):
    del layout
    dh_KCE, dw, db, ce_KC = residuals
    g = cotangents[0]  # correct_sum is piecewise constant: its cotangent adds nothing
    return (
        (g * dh_KCE).astype(dh_KCE.dtype),
        (g * dw).astype(dw.dtype),
        (g * db).astype(db.dtype),
        None,
        g * ce_KC,  # weights are float32 (cast by the wrapper)
    )


_xent_sums.defvjp(_xent_fwd, _xent_bwd)


def chunked_cross_entropy_sums(
    h_NE, w, targets_N, weights_N, *, chunk: int, layout: str = "ve", bias_V=None
) -> dict:
    """``loss_sum`` = sum_i w_i CE_i and ``correct_sum`` = sum_i w_i [argmax = target] of
    ``logits = h W (+ b)``, chunk by chunk (module docstring), and ``weight_sum``.

    Args:
      h_NE: final hidden states ``[..., E]`` (any leading shape, flattened to N).
      w: the output embedding, ``[V, E]`` (``layout='ve'``: a tied token table) or
        ``[E, V]`` (``layout='ev'``: a Dense kernel).
      targets_N: int targets, the leading shape of ``h_NE``.
      weights_N: weights of the same shape (0 = does not count).
      chunk: tokens per chunk C (the last chunk is padded with weight-0 tokens).
      layout: ``'ve'`` or ``'ev'``.
      bias_V: optional output bias ``[V]``.

    Returns:
      float32 scalars ``{"loss_sum", "correct_sum", "weight_sum"}``, as
      ``seqjax.tasks.losses.cross_entropy_sums`` of the materialized logits.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r} must be one of {LAYOUTS}")
    chunk = check_chunk(chunk)
    e = h_NE.shape[-1]
    v = w.shape[0] if layout == "ve" else w.shape[1]
    if w.shape != ((v, e) if layout == "ve" else (e, v)):
        raise ValueError(f"w of shape {w.shape} does not match h's width {e} (layout={layout!r})")
    if targets_N.shape != h_NE.shape[:-1] or weights_N.shape != targets_N.shape:
        raise ValueError(
            f"targets {targets_N.shape} and weights {weights_N.shape} must both have the "
            f"leading shape of h {h_NE.shape[:-1]}"
        )
    h_NE = h_NE.reshape(-1, e)
    t_N = targets_N.reshape(-1).astype(jnp.int32)
    wt_N = weights_N.reshape(-1).astype(jnp.float32)
    n = h_NE.shape[0]
    c = min(chunk, max(n, 1))
    pad = -n % c
    if pad:  # weight-0 tail tokens: they add nothing to the sums or the gradients
        h_NE = jnp.pad(h_NE, ((0, pad), (0, 0)))
        t_N, wt_N = jnp.pad(t_N, (0, pad)), jnp.pad(wt_N, (0, pad))
    k = (n + pad) // c
    bias_V = jnp.zeros((v,), jnp.float32) if bias_V is None else bias_V
    loss, correct = _xent_sums(
        h_NE.reshape(k, c, e), w, bias_V, t_N.reshape(k, c), wt_N.reshape(k, c), layout
    )
    return {"loss_sum": loss, "correct_sum": correct, "weight_sum": wt_N.sum()}
