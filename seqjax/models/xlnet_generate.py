"""Generation with XLNet (Yang et al. 2019) used as a left-to-right LM: each new token is
the last of the factorization order, predicted by the query stream at its position.

The next position ``i`` holds a dummy token (0) that no query may see (``perm_mask[:, j]``
for ``j >= i``); ``target_mapping`` is one-hot at ``i``, so the query stream there reads
exactly the prefix ``x_<i`` and returns ``p(x_i | x_<i)``, as ``transformers``'
``XLNetLMHeadModel.prepare_inputs_for_generation`` builds its inputs. ``order`` says how the
prefix tokens see each other:

* ``"prefix"`` (``transformers``' choice): all prefix tokens are earlier than the new one
  and see each other both ways (they are XLNet's non-targets, visible to all, as in
  pre-training);
* ``"causal"``: the identity order, ``x_j`` sees ``x_<=j`` only (a strict left-to-right LM;
  oracle 5 of issue 45: with every token a target it equals a causal LM's factorization).

Greedy tokens equal ``XLNetLMHeadModel.generate(..., use_mems=False)``; its default
(``use_mems``) reloads the hidden states of the previous pass (computed when the later
tokens did not exist yet, the last two recomputed) and is not the same distribution.
The prefix is recomputed for each token (no cache) in a fixed buffer of ``P + N`` positions
(one compile); positions after ``i`` are blocked keys, so their content does not matter and
the relative distances equal those of the truncated sequence.

Legend: P prompt length, N generated tokens, L = P + N buffer, V vocabulary.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from seqjax.decoding.samplers import check_sampling, sample_logits

ORDERS = ("prefix", "causal")


def next_logits(model, params, buf_L, i, order: str = "prefix"):
    """``[V]`` logits of ``p(x_i | x_<i)`` from the token buffer ``buf_L`` (module docstring);
    ``model`` an ``XLNet`` LM."""
    if order not in ORDERS:
        raise ValueError(f"order={order!r} is not one of {ORDERS}")
    pos_L = jnp.arange(buf_L.shape[0])
    blocked_LL = jnp.broadcast_to(pos_L[None, :] >= i, (buf_L.shape[0],) * 2)
    if order == "causal":
        blocked_LL = blocked_LL | (pos_L[None, :] > pos_L[:, None])
    target_1L = (pos_L == i).astype(jnp.float32)[None]
    tokens_L = jnp.where(pos_L >= i, 0, buf_L)  # the dummy (and nothing after it)
    logits = model.apply(
        {"params": params}, tokens_L[None], perm_mask_BTT=blocked_LL[None],
        target_mapping_BPT=target_1L[None], mask_BT=jnp.ones((1, buf_L.shape[0]), bool),
    )  # fmt: skip
    return logits[0, 0]


def generate(
    model, params, prompt_P, length: int, *, order: str = "prefix", temperature: float = 1.0,
    top_k: int = 0, top_p: float = 1.0, seed: int = 0,
) -> np.ndarray:  # fmt: skip
    """``length`` tokens after ``prompt_P`` (int ids, at least one): int32 ``[N]``.
    ``temperature`` 0 is greedy; ``top_k``/``top_p`` as ``seqjax.decoding.samplers``."""
    check_sampling(temperature, top_k, top_p)
    if order not in ORDERS:
        raise ValueError(f"order={order!r} is not one of {ORDERS}")
    prompt_P = np.asarray(prompt_P, np.int32).reshape(-1)
    p, n = len(prompt_P), int(length)
    if p < 1:
        raise ValueError("prompt must encode to at least one token")
    if n <= 0:
        return np.zeros((0,), np.int32)
    buf_L = jnp.zeros((p + n,), jnp.int32).at[:p].set(prompt_P)

    @jax.jit
    def run(params, buf_L, rng):
        def body(i, carry):
            buf_L, rng = carry
            rng, sub = jax.random.split(rng)
            logits_V = next_logits(model, params, buf_L, i, order)
            tok = sample_logits(logits_V[None], sub, temperature=temperature, top_k=top_k,
                                top_p=top_p)[0]  # fmt: skip
            return buf_L.at[i].set(tok.astype(jnp.int32)), rng

        buf_L, _ = jax.lax.fori_loop(p, p + n, body, (buf_L, rng))
        return buf_L[p:]

    return np.asarray(run(params, buf_L, jax.random.PRNGKey(seed)))
