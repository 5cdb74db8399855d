"""The extension recipes of ``docs/extending.md``, run: a new attention mechanism is its
scores + its mask + one ``numerics`` call and one ``register``; it then works in every model
(here the LM, trained one step) and equals the flex ``sliding_window`` pattern it restates.

Legend: B batch, T length, H heads, D head dim.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from seqjax.attention import flex, masks, numerics, registry
from seqjax.models import TransformerConfig, TransformerLM

NAME = "window_example"


# --- the whole new mechanism (docs/extending.md, "A new attention mechanism") ---------------
def window_attention(q, k, v, *, causal=False, mask=None, segment_ids=None, dropout_rate=0.0,
                     dropout_rng=None, scale=None, window=4):  # fmt: skip
    """Local attention: query i sees keys j with |i - j| <= window (Child et al. 2019, §4.2
    "local" / Beltagy et al. 2020 sliding window), on top of the common masks."""
    b, t, _, d = q.shape
    s = k.shape[1]
    dist_TS = (s - t) + jnp.arange(t)[:, None] - jnp.arange(s)[None, :]
    valid = jnp.abs(dist_TS)[None, None] <= window
    common = masks.dense_mask(b, t, s, causal=causal, mask=mask, segment_ids=segment_ids)
    valid = valid if common is None else valid & common
    return numerics.attend(q, k, v, valid, scale=scale, dropout_rate=dropout_rate,
                           dropout_rng=dropout_rng)  # fmt: skip


# ---------------------------------------------------------------------------------------------


@pytest.fixture
def registered():
    registry.register(registry.Mechanism(NAME, window_attention, options=("window",)))
    yield NAME
    registry._REGISTRY.pop(NAME)


def _qkv(b=2, t=24, h=2, d=8, seed=0):
    ks = jax.random.split(jax.random.PRNGKey(seed), 3)
    return [jax.random.normal(k_, (b, t, h, d), jnp.float32) for k_ in ks]


@pytest.mark.parametrize("causal", [False, True])
def test_new_mechanism_equals_the_flex_pattern_it_restates(registered, causal):
    q, k, v = _qkv()
    ours = registry.get(registered)(q, k, v, causal=causal, window=3)
    theirs = flex.flex_attention(
        q, k, v, causal=causal, pattern="sliding_window", window=3, implementation="masked"
    )
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    g1 = jax.grad(lambda q_: registry.get(registered)(q_, k, v, causal=causal, window=3).sum())(q)
    g2 = jax.grad(
        lambda q_: flex.flex_attention(
            q_, k, v, causal=causal, pattern="sliding_window", window=3, implementation="masked"
        ).sum()
    )(q)
    np.testing.assert_allclose(g1, g2, rtol=1e-4, atol=1e-5)


def test_new_mechanism_trains_in_the_lm(registered):
    cfg = TransformerConfig(
        vocab_size=40, num_layers=2, d_model=32, num_heads=4, max_len=16,
        attention=((registered, (("window", 2),)),),
    )  # fmt: skip
    model = TransformerLM(cfg)
    tok = jax.random.randint(jax.random.PRNGKey(1), (2, 16), 0, 40)
    params = model.init(jax.random.PRNGKey(0), tok)["params"]

    def loss(p):
        logits = model.apply({"params": p}, tok[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, tok[:, 1:]).mean()

    tx = optax.adam(1e-2)
    opt = tx.init(params)
    loss_and_grad = jax.jit(jax.value_and_grad(loss))
    l0, g = loss_and_grad(params)
    for _ in range(5):
        updates, opt = tx.update(g, opt, params)
        params = optax.apply_updates(params, updates)
        l1, g = loss_and_grad(params)
    assert np.isfinite(l0) and l1 < l0
    # Causal with a window: position 10's logits ignore tokens more than 2 back (per layer,
    # so at most 2 layers x 2 = 4 positions back).
    changed = tok.at[:, 3].set((tok[:, 3] + 1) % 40)
    apply = jax.jit(lambda t: model.apply({"params": params}, t))
    a, b = apply(tok), apply(changed)
    np.testing.assert_allclose(a[:, 8:], b[:, 8:], rtol=1e-5, atol=1e-5)
    assert not np.allclose(a[:, 3:8], b[:, 3:8])
