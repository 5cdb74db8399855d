"""Reversible layers (``seqjax.models.reversible``; Kitaev et al. 2020, §3).

Legend: B batch, T length, V vocabulary.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax.models import reversible
from seqjax.models import transformer as tr

B, T, V = 2, 16, 13


class _PlainStack(reversible.ReversibleStack):
    """The same reversible function differentiated by plain autodiff."""

    recompute: bool = False


def _cfg(**kw):
    base = dict(vocab_size=V, num_layers=2, num_heads=2, d_model=16, max_len=T, reversible=True)
    base.update(kw)
    return tr.TransformerConfig(**base)


def _loss_and_grads(cfg, params, tokens, rngs):
    model = tr.TransformerLM(cfg)

    def loss(p):
        logits_BTV = model.apply({"params": p}, tokens, deterministic=False, rngs=rngs)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits_BTV), tokens[..., None], -1))

    return jax.jit(jax.value_and_grad(loss))(params)


def test_custom_vjp_gradients_equal_autodiff(monkeypatch):
    """Recomputing inputs from outputs gives the same gradients as storing activations, with
    LSH and dense layers, residual and feed-forward dropout, and a chunked feed-forward (so
    dropout masks and LSH rotations are recomputed identically)."""
    cfg = _cfg(
        attention=tr.attention_cycle("lsh,dense", {"lsh": dict(n_hashes=2, chunk_len=4)}),
        dropout_rate=0.1,
        ff_chunk_size=8,
    )
    tokens = jax.random.randint(jax.random.PRNGKey(0), (B, T), 0, V)
    params = jax.jit(tr.TransformerLM(cfg).init)(jax.random.PRNGKey(1), tokens)["params"]
    assert set(params["encoder"]["reversible"]) == {"attn_0", "attn_1", "ff_0", "ff_1"}
    assert "key" not in params["encoder"]["reversible"]["attn_0"]["attn"]  # shared QK
    rngs = {"dropout": jax.random.PRNGKey(2), "lsh": jax.random.PRNGKey(3)}
    loss, grads = _loss_and_grads(cfg, params, tokens, rngs)
    monkeypatch.setattr(reversible, "ReversibleStack", _PlainStack)
    loss_ref, grads_ref = _loss_and_grads(cfg, params, tokens, rngs)
    np.testing.assert_allclose(loss, loss_ref, rtol=1e-6)
    flat, flat_ref = jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(grads_ref)
    assert len(flat) == len(flat_ref)
    for g, g_ref in zip(flat, flat_ref):
        np.testing.assert_allclose(g, g_ref, rtol=1e-4, atol=1e-6)
    assert any(float(jnp.abs(g).max()) > 0 for g in flat)


def _peak_temp_bytes(cfg, tokens) -> int:
    """Compiled temporary memory of one loss+gradient step (activations live here)."""
    model = tr.TransformerLM(cfg)
    shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), tokens)["params"]

    def loss(p):
        return model.apply({"params": p}, tokens).mean()

    compiled = jax.jit(jax.grad(loss)).lower(shapes).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)


def _memory_by_depth(depths, t):
    tokens = jnp.zeros((2, t), jnp.int32)
    dense = tr.attention_cycle("dense", {"dense": dict(implementation="reference")})
    mem = {}
    for rev in (False, True):
        for n in depths:
            cfg = _cfg(num_layers=n, d_model=32, max_len=t, attention=dense, reversible=rev)
            mem[rev, n] = _peak_temp_bytes(cfg, tokens)
    return mem


def test_activation_memory_per_layer_is_small():
    """CI version (2 and 4 layers, T = 128): each extra reversible layer costs under a tenth
    of a standard layer's activation memory (compiled ``memory_analysis``)."""
    mem = _memory_by_depth((2, 4), 128)
    assert mem[False, 4] > 1.5 * mem[False, 2], mem  # the standard model grows with depth
    assert mem[True, 4] < mem[False, 4], mem
    per_layer_rev = (mem[True, 4] - mem[True, 2]) / 2
    per_layer_std = (mem[False, 4] - mem[False, 2]) / 2
    assert per_layer_rev < 0.1 * per_layer_std, mem


@pytest.mark.slow
def test_activation_memory_is_flat_with_depth():
    """Peak memory of a 12-layer reversible model is well below the standard model's and
    nearly the same at 2, 6 and 12 layers (compiled ``memory_analysis``)."""
    mem = _memory_by_depth((2, 6, 12), 256)
    assert mem[True, 12] < 0.25 * mem[False, 12], mem  # well below the standard model
    assert mem[False, 12] > 3.0 * mem[False, 2], mem  # the standard model grows with depth
    # Roughly flat: under 1.5x from 2 to 12 layers, and each extra layer costs under a tenth
    # of what it costs the standard model (what remains is per-layer parameter gradients).
    assert mem[True, 12] < 1.5 * mem[True, 2], mem
    assert mem[True, 6] <= mem[True, 12], mem
    per_layer_rev = (mem[True, 12] - mem[True, 2]) / 10
    per_layer_std = (mem[False, 12] - mem[False, 2]) / 10
    assert per_layer_rev < 0.1 * per_layer_std, mem


@pytest.mark.slow  # ~30 s of compilation
def test_lsh_fallback_hashing_uses_the_configured_seed():
    """Without RNG streams (evaluation) the rotations come from ``attention_options.lsh.seed``
    as in the non-reversible model: the same seed gives the same logits, another seed
    other logits."""
    tokens = jax.random.randint(jax.random.PRNGKey(0), (B, T), 0, V)

    def logits(seed):
        cfg = _cfg(attention=tr.attention_cycle("lsh", {"lsh": dict(chunk_len=4, seed=seed)}))
        model = tr.TransformerLM(cfg)
        params = model.init(jax.random.PRNGKey(1), tokens)["params"]  # seed-independent
        return np.asarray(jax.jit(model.apply)({"params": params}, tokens))

    a, b, c = logits(1), logits(1), logits(2)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c, atol=1e-4)
