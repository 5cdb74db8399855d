"""One token at a time == the full forward pass, for every model family that decodes.

The dense-family LM (standard and reversible layers) decodes with KV caches
(``decode=True``); Transformer-XL decodes through its memory; the classifier is
bidirectional, so it has no decoding, and asking a stack for a decode it cannot honour
raises.

Legend: B batch, T length, V vocabulary.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax.models import TransformerConfig, TransformerLM, attention_cycle, layers
from seqjax.models import transformer as tr
from seqjax.models.transformer_xl import TransformerXL

B, T, V = 2, 8, 23


def _cfg(**kw):
    base = dict(vocab_size=V, num_layers=2, d_model=16, num_heads=2, max_len=T)
    base.update(kw)
    return TransformerConfig(**base)


def _tokens(seed=0, t=T):
    return jnp.asarray(np.random.default_rng(seed).integers(0, V, (B, t)), jnp.int32)


def _decode_one_at_a_time(cfg, params, tok_BT):
    dec = TransformerLM(cfg, decode=True)
    cache = dec.init(jax.random.key(0), jnp.zeros_like(tok_BT))["cache"]
    step = jax.jit(lambda c, x: dec.apply({"params": params, "cache": c}, x, mutable=["cache"]))
    outs = []
    for i in range(tok_BT.shape[1]):
        out_B1V, mut = step(cache, tok_BT[:, i : i + 1])
        cache = mut["cache"]
        outs.append(out_B1V)
    return jnp.concatenate(outs, 1)


LM_FAMILIES = {
    "dense": {},
    "causal_learned_untied": dict(
        attention=attention_cycle("causal"), positional="learned", tie_embeddings=False
    ),
    "dense_chunked_remat": dict(
        attention=attention_cycle("dense", {"dense": dict(implementation="chunked", block_q=4)}),
        remat=True,
    ),
    "reversible_dense": dict(reversible=True),
    "reversible_causal_ff_chunks": dict(
        reversible=True, attention=attention_cycle("causal,dense"), ff_chunk_size=4, num_layers=3
    ),
}


# The families beyond plain dense and reversible dense take 15-30 s each on 2 cores: slow.
SLOW_FAMILIES = ("causal_learned_untied", "dense_chunked_remat", "reversible_causal_ff_chunks")


@pytest.mark.parametrize(
    "family",
    [
        pytest.param(f, marks=pytest.mark.slow) if f in SLOW_FAMILIES else f
        for f in sorted(LM_FAMILIES)
    ],
)
def test_kv_cache_decoding_equals_full_forward(family):
    cfg = _cfg(**LM_FAMILIES[family])
    tok = _tokens()
    params = jax.jit(TransformerLM(cfg).init)(jax.random.key(1), tok)["params"]
    full_BTV = jax.jit(TransformerLM(cfg).apply)({"params": params}, tok)
    dec_BTV = _decode_one_at_a_time(cfg, params, tok)
    np.testing.assert_allclose(dec_BTV, full_BTV, atol=1e-4, rtol=1e-4)
    assert float(jnp.abs(full_BTV).max()) > 0.1  # not a degenerate (all-zero) model


def test_xl_token_by_token_through_memory_equals_one_pass():
    """Transformer-XL decodes through its memory: with ``mem_len`` covering everything, a
    token per call (memory carried) equals one pass over the whole sequence."""
    cfg = _cfg(positional="none", attention=(("relative", (("mem_len", T),)),), max_len=T)
    model = TransformerXL(cfg, mem_len=T)
    tok = _tokens(2)
    params = jax.jit(model.init)(jax.random.key(0), tok)["params"]
    full_BTV, _ = jax.jit(model.apply)({"params": params}, tok, model.init_memory(B))
    step = jax.jit(lambda m, x: model.apply({"params": params}, x, m))
    memory, outs = model.init_memory(B), []
    for i in range(T):
        out_B1V, memory = step(memory, tok[:, i : i + 1])
        outs.append(out_B1V)
    np.testing.assert_allclose(jnp.concatenate(outs, 1), full_BTV, atol=1e-4, rtol=1e-4)


# No decoding cache: BigBird's random blocks (flex); every other causal mechanism has one.
BIGBIRD = dict(pattern="bigbird", block_size=4, window=1, num_global=1, num_random=1)


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(attention=attention_cycle("flex", {"flex": BIGBIRD})), "'flex'"),
        (dict(attention=attention_cycle("dense,flex", {"flex": BIGBIRD})), "'flex'"),
        (dict(attention=attention_cycle("flex", {"flex": BIGBIRD}), reversible=True), "'flex'"),
        (dict(causal=False), "causal"),
    ],
)
def test_decode_raises_for_stacks_that_cannot_honour_it(kw, match):
    cfg = _cfg(**kw)
    with pytest.raises(ValueError, match=f"decode=True.*{match}"):
        TransformerLM(cfg, decode=True).init(jax.random.key(0), _tokens())
    with pytest.raises(ValueError, match="decode=True"):
        # The bidirectional encoder (the classifier's) cannot decode either.
        tr.Encoder(_cfg(), causal=False, decode=True).init(jax.random.key(0), _tokens())
    mha = layers.MultiHeadAttention(num_heads=2, head_dim=4, mechanism="linformer", decode=True)
    with pytest.raises(ValueError, match="decode=True.*'linformer'"):
        mha.init(jax.random.key(0), jnp.zeros((1, 4, 8)))


# Mechanisms with an O(1) recurrent state (``decode_state``): the "cache" holds
# ``recurrent_state`` (sum phi(k) v^T and sum phi(k)) instead of keys and values.
RECURRENT_FAMILIES = {
    "linear": dict(attention=attention_cycle("linear")),
    "performer": dict(attention=attention_cycle("performer", {"performer": dict(num_features=16)})),
    "performer_dense_mix": dict(
        attention=attention_cycle("performer,dense", {"performer": dict(num_features=16)})
    ),
}


@pytest.mark.parametrize(
    "family",
    [
        pytest.param(f, marks=pytest.mark.slow) if f == "performer_dense_mix" else f
        for f in sorted(RECURRENT_FAMILIES)
    ],
)
def test_recurrent_state_decoding_equals_full_forward(family):
    from seqjax.tasks import sampling

    cfg = _cfg(**RECURRENT_FAMILIES[family])
    assert sampling.uses_kv_cache(cfg)
    tok = _tokens()
    params = jax.jit(TransformerLM(cfg).init)(jax.random.key(1), tok)["params"]
    full_BTV = jax.jit(TransformerLM(cfg).apply)({"params": params}, tok)
    dec_BTV = _decode_one_at_a_time(cfg, params, tok)
    np.testing.assert_allclose(dec_BTV, full_BTV, atol=1e-4, rtol=1e-4)
    assert float(jnp.abs(full_BTV).max()) > 0.1
    cache = TransformerLM(cfg, decode=True).init(jax.random.key(0), tok)["cache"]
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(cache)]
    assert any("recurrent_state" in p for p in paths)
    if family != "performer_dense_mix":  # no growing KV cache: the state is O(1) in T
        assert not any("cached_key" in p for p in paths)


def test_generate_with_recurrent_state_equals_recomputing_the_prefix():
    from seqjax.tasks import sampling

    cfg = _cfg(attention=attention_cycle("linear"))
    params = jax.jit(TransformerLM(cfg).init)(jax.random.key(1), _tokens())["params"]
    prompt = np.array([3, 5, 7], np.int32)
    cached = sampling.generate(cfg, params, prompt, 4, temperature=0.0)
    buf = jnp.zeros((T,), jnp.int32).at[:3].set(prompt)
    windowed = sampling._generate_windowed(cfg, params, buf, 3, 4, 0.0, jax.random.key(0))
    np.testing.assert_array_equal(cached, np.asarray(windowed))
