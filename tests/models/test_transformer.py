"""TransformerLM / TransformerClassifier: causality, decoding, padding, sharded execution."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest
from flax import linen as nn

from seqjax.models import (
    MultiHeadAttention,
    TransformerClassifier,
    TransformerConfig,
    TransformerLM,
    attention_cycle,
)
from seqjax.train import sharding
from tests.conftest import require_devices


def _tokens(b, t, vocab, seed=0):
    return jnp.asarray(np.random.default_rng(seed).integers(1, vocab, (b, t)), jnp.int32)


def _lm_cfg(**kw):
    base = dict(vocab_size=40, num_layers=2, d_model=32, num_heads=4, max_len=32)
    base.update(kw)
    return TransformerConfig(**base)


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"positional": "learned", "tie_embeddings": False},
        {"attention": (("dense", (("implementation", "chunked"), ("block_q", 8))),)},
        {"ff_chunk_size": 8, "remat": True},
    ],
)
def test_lm_is_causal(kw):
    cfg = _lm_cfg(**kw)
    model = TransformerLM(cfg)
    tok = _tokens(2, 32, cfg.vocab_size)
    params = jax.jit(model.init)(jax.random.key(0), tok)["params"]
    apply = jax.jit(lambda x: model.apply({"params": params}, x))
    logits = apply(tok)
    assert logits.shape == (2, 32, cfg.vocab_size) and logits.dtype == jnp.float32
    t = 13
    tok2 = tok.at[:, t + 1 :].set((tok[:, t + 1 :] + 5) % cfg.vocab_size)
    logits2 = apply(tok2)
    np.testing.assert_allclose(logits[:, : t + 1], logits2[:, : t + 1], atol=1e-5)
    assert not np.allclose(logits[:, t + 1 :], logits2[:, t + 1 :])


def test_kv_cache_decoding_matches_full_forward():
    cfg = _lm_cfg(max_len=12)
    tok = _tokens(2, 12, cfg.vocab_size)
    params = TransformerLM(cfg).init(jax.random.key(0), tok)["params"]
    full = TransformerLM(cfg).apply({"params": params}, tok)
    dec = TransformerLM(cfg, decode=True)
    cache = dec.init(jax.random.key(0), jnp.zeros_like(tok))["cache"]
    step = jax.jit(lambda c, x: dec.apply({"params": params, "cache": c}, x, mutable=["cache"]))
    outs = []
    for i in range(tok.shape[1]):
        out, mut = step(cache, tok[:, i : i + 1])
        cache = mut["cache"]
        outs.append(out)
    np.testing.assert_allclose(jnp.concatenate(outs, 1), full, atol=1e-4)


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_classifier_ignores_padding_content(pooling):
    cfg = TransformerConfig(
        vocab_size=30,
        num_layers=2,
        d_model=32,
        num_heads=4,
        max_len=24,
        num_classes=10,
        pooling=pooling,
        causal=False,
        pad_id=0,
    )
    model = TransformerClassifier(cfg)
    tok = _tokens(3, 20, cfg.vocab_size).at[:, 14:].set(0)
    params = jax.jit(model.init)(jax.random.key(0), tok)["params"]
    apply = jax.jit(lambda x: model.apply({"params": params}, x))
    logits = apply(tok)
    assert logits.shape == (3, 10)
    # Same real tokens, more padding: padding never changes the prediction.
    longer = jnp.concatenate([tok, jnp.zeros((3, 4), jnp.int32)], axis=1)
    np.testing.assert_allclose(apply(longer), logits, atol=1e-5)
    # A real token change does change it.
    other = tok.at[:, 3].set((tok[:, 3] % 29) + 1)
    assert not np.allclose(apply(other), logits)


def test_per_layer_attention_cycle_and_options():
    cyc = attention_cycle("dense,causal", {"dense": {"implementation": "reference"}})
    assert cyc == (("dense", (("implementation", "reference"),)), ("causal", ()))
    cfg = _lm_cfg(num_layers=3, attention=cyc)
    assert [cfg.layer_attention(i)[0] for i in range(3)] == ["dense", "causal", "dense"]
    with pytest.raises(ValueError, match="unknown attention mechanism 'nope'"):
        attention_cycle("dense,nope")
    with pytest.raises(ValueError, match="unknown option"):
        _lm_cfg(attention=(("dense", (("stride", 4),)),))
    with pytest.raises(ValueError, match="model.positional"):
        _lm_cfg(positional="rotary")


def test_parameters_carry_logical_axis_names():
    model = TransformerLM(_lm_cfg())
    boxed = model.init(jax.random.key(0), _tokens(1, 8, 40))["params"]
    specs = nn.get_partition_spec(boxed)
    q = specs["encoder"]["block_0"]["attn"]["query"]["kernel"]
    assert tuple(q) == ("embed", "heads", "kv")
    assert tuple(specs["encoder"]["embed"]["embedding"]) == ("vocab", "embed")


def test_forward_and_gradient_step_on_8_fake_devices():
    """The production mesh and rules (``seqjax.train.sharding``): data x fsdp x tensor."""
    require_devices(8)
    assert len(jax.devices()) == 8, "tests/conftest.py sets 8 fake CPU devices"
    mesh = sharding.make_mesh(ml_collections.ConfigDict({"data": 2, "fsdp": 2, "tensor": 2}))
    cfg = _lm_cfg(d_model=32, num_heads=4)
    model = TransformerLM(cfg)
    tok = _tokens(8, 16, cfg.vocab_size)
    tx = optax.adam(1e-2)

    def init(rng):
        return model.init(rng, tok)["params"]

    abstract = jax.eval_shape(init, jax.random.key(0))
    shardings = sharding.state_shardings({"params": abstract}, mesh)["params"]
    params = jax.jit(init, out_shardings=shardings)(jax.random.key(0))
    params_host = jax.device_get(nn.meta.unbox(params))

    def loss_fn(p, x):
        logits = model.apply({"params": p}, x[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, x[:, 1:]).mean()

    def step(p, opt, x):
        loss, g = jax.value_and_grad(loss_fn)(p, x)
        upd, opt = tx.update(g, opt, p)
        return optax.apply_updates(p, upd), opt, loss

    p_sharded = nn.meta.unbox(params)
    p_shard = jax.tree.map(lambda x: x.sharding, p_sharded)
    opt = tx.init(p_sharded)
    x = jax.device_put(tok, sharding.batch_sharding(mesh))
    with sharding.rules_and_mesh(mesh):
        new_p, _, loss = jax.jit(step)(p_sharded, opt, x)
    q_kernel = new_p["encoder"]["block_0"]["attn"]["query"]["kernel"]
    # [embed, heads, kv]: embed over fsdp, heads over tensor (trailing None may be dropped).
    for spec in (
        q_kernel.sharding.spec,
        p_shard["encoder"]["block_0"]["attn"]["query"]["kernel"].spec,
    ):
        assert tuple(spec)[:2] == ("fsdp", "tensor")
    embedding = p_shard["encoder"]["embed"]["embedding"].spec  # [vocab, embed]
    assert tuple(embedding)[:2] == ("tensor", "fsdp")  # vocab 40 = 2 x 20
    assert len(q_kernel.sharding.device_set) == 8
    # Same step on one device gives the same loss and parameters.
    new_p1, _, loss1 = jax.jit(step)(params_host, tx.init(params_host), tok)
    np.testing.assert_allclose(loss, loss1, rtol=1e-5)
    np.testing.assert_allclose(
        jax.device_get(q_kernel),
        new_p1["encoder"]["block_0"]["attn"]["query"]["kernel"],
        atol=1e-5,
    )


def test_multi_head_attention_module_rejects_unknown_mechanism():
    mha = MultiHeadAttention(num_heads=2, head_dim=4, mechanism="nope")
    with pytest.raises(ValueError, match="valid names"):
        mha.init(jax.random.key(0), jnp.ones((1, 4, 8)))
