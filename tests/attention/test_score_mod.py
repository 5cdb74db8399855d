"""Positions as score modifications (``seqjax.attention.score_mod``): RoPE, ALiBi, T5 bias.

Every engine equals a direct materialised implementation written here from the papers'
formulas, in values and in gradients (of q, k, v and of the T5 table); the models' KV-cache
decoding equals their full forward with each scheme.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax.attention import dense, score_mod

B, T, H, D = 2, 12, 4, 8
_SLOW = pytest.mark.slow


def _qkv(t=T, s=T, seed=0):
    ks = jax.random.split(jax.random.PRNGKey(seed), 3)
    return (
        jax.random.normal(ks[0], (B, t, H, D)),
        jax.random.normal(ks[1], (B, s, H, D)),
        jax.random.normal(ks[2], (B, s, H, D)),
    )


def _direct(q, k, v, bias_HTS, *, causal):
    """softmax(q k^T / sqrt(D) + bias) v with an explicit causal mask (bottom-right)."""
    t, s = q.shape[1], k.shape[1]
    logits = jnp.einsum("bthd,bshd->bhts", q, k) / np.sqrt(D) + bias_HTS[None]
    if causal:
        ok = np.arange(s)[None, :] <= np.arange(t)[:, None] + (s - t)
        logits = jnp.where(ok[None, None], logits, -jnp.inf)
    return jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(logits, -1), v)


def _alibi_direct(t, s, causal):
    m = score_mod.alibi_slopes(H)
    i = np.arange(t)[:, None] + (s - t)
    j = np.arange(s)[None, :]
    dist = (i - j) if causal else np.abs(i - j)
    return jnp.asarray(-m[:, None, None] * dist[None], jnp.float32)


def _t5_bucket_direct(rel, causal, nb, maxd):
    """T5's bucketing, elementwise in Python (Mesh TensorFlow's formula)."""
    ret, n = 0, -rel
    if not causal:
        nb //= 2
        ret += nb if n < 0 else 0
        n = abs(n)
    else:
        n = max(n, 0)
    exact = nb // 2
    if n < exact:
        return ret + n
    large = exact + int(np.log(n / exact) / np.log(maxd / exact) * (nb - exact))
    return ret + min(large, nb - 1)


def test_alibi_slopes_match_paper():
    np.testing.assert_allclose(score_mod.alibi_slopes(8), 2.0 ** -np.arange(1, 9), rtol=1e-6)
    s12 = score_mod.alibi_slopes(12)  # 8 slopes of H=8, then every other slope of H=16
    np.testing.assert_allclose(s12[:8], 2.0 ** -np.arange(1, 9), rtol=1e-6)
    np.testing.assert_allclose(s12[8:], 2.0 ** -(np.arange(1, 16, 2)[:4] / 2), rtol=1e-6)


@pytest.mark.parametrize("causal", [True, False])
def test_t5_buckets_match_formula(causal):
    rel = np.arange(-300, 300)
    got = np.asarray(score_mod.t5_bucket(jnp.asarray(rel), causal=causal))
    want = [_t5_bucket_direct(int(r), causal, 32, 128) for r in rel]
    np.testing.assert_array_equal(got, want)


def test_rope_relative_property():
    """<R_p q, R_s k> depends on p - s only (Su et al. 2021, eq. 16)."""
    q, k, _ = _qkv()
    pos = jnp.arange(T)[None]
    qr, kr = score_mod.apply_rope(q, pos), score_mod.apply_rope(k, pos)
    qs, ks_ = score_mod.apply_rope(q, pos + 37), score_mod.apply_rope(k, pos + 37)
    a = jnp.einsum("bthd,bshd->bhts", qr, kr)
    b = jnp.einsum("bthd,bshd->bhts", qs, ks_)
    np.testing.assert_allclose(a, b, atol=1e-4)
    np.testing.assert_allclose(jnp.linalg.norm(qr, axis=-1), jnp.linalg.norm(q, axis=-1), rtol=1e-5)


def _t5_direct_bias(table, t, s, causal):
    rel = np.arange(s)[None, :] - (np.arange(t)[:, None] + (s - t))
    idx = np.vectorize(lambda r: _t5_bucket_direct(int(r), causal, 32, 128))(rel)
    return jnp.moveaxis(table[idx], -1, 0)


@pytest.mark.parametrize("scheme", ["alibi", "t5_bias"])
@pytest.mark.parametrize("causal,t,s", [(True, 12, 12), (True, 5, 12), (False, 12, 9)])
@pytest.mark.parametrize("implementation", [pytest.param("reference", marks=_SLOW), "chunked"])
def test_engines_equal_direct_values_and_grads(scheme, causal, t, s, implementation):
    q, k, v = _qkv(t, s)
    table = jax.random.normal(jax.random.PRNGKey(3), (32, H))
    w = jax.random.normal(jax.random.PRNGKey(4), (B, t, H, D))

    def mod_of(tab):
        if scheme == "alibi":
            return score_mod.alibi(H, causal=causal, q_offset=s - t)
        return score_mod.t5_bias(tab, causal=causal, q_offset=s - t)

    def bias_of(tab):
        if scheme == "alibi":
            return _alibi_direct(t, s, causal)
        return _t5_direct_bias(tab, t, s, causal)

    def engine(q, k, v, tab):
        out = dense.dense_attention(
            q,
            k,
            v,
            causal=causal,
            implementation=implementation,
            block_q=4,
            block_k=4,
            score_mod=mod_of(tab),
        )
        return (out * w).sum()

    def direct(q, k, v, tab):
        return (_direct(q, k, v, bias_of(tab), causal=causal) * w).sum()

    got, g_got = jax.value_and_grad(engine, argnums=(0, 1, 2, 3))(q, k, v, table)
    want, g_want = jax.value_and_grad(direct, argnums=(0, 1, 2, 3))(q, k, v, table)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    for a, b in zip(g_got, g_want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_unsupported_implementation_raises():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="cannot add a positional score bias"):
        dense.dense_attention(
            q, k, v, causal=True, implementation="splash", score_mod=score_mod.alibi(H)
        )


def test_check_supported_names_mechanism():
    with pytest.raises(ValueError, match="model.positional='alibi'.*'lsh'"):
        score_mod.check_supported("alibi", (("lsh", ()),))
    with pytest.raises(ValueError, match="implementation='cudnn'"):
        score_mod.check_supported("t5_bias", (("dense", (("implementation", "cudnn"),)),))
    score_mod.check_supported("rope", (("lsh", ()),))  # RoPE: every mechanism


# --- In the models -------------------------------------------------------------------------


def _lm(positional, implementation="reference", num_layers=2, **kw):
    from seqjax.models.transformer import TransformerConfig

    return TransformerConfig(
        vocab_size=17,
        num_layers=num_layers,
        num_heads=H,
        d_model=32,
        max_len=16,
        positional=positional,
        attention=(("dense", (("implementation", implementation),)),),
        **kw,
    )


@pytest.mark.parametrize("positional", ["rope", "alibi", "t5_bias"])
def test_kv_cache_decoding_equals_full_forward(positional):
    from seqjax.models.transformer import TransformerLM

    cfg = _lm(positional)
    tok = jax.random.randint(jax.random.PRNGKey(1), (2, 7), 0, cfg.vocab_size)
    model = TransformerLM(cfg)
    params = model.init(jax.random.PRNGKey(0), tok)["params"]
    full = model.apply({"params": params}, tok)
    chunked = TransformerLM(_lm(positional, "chunked")).apply({"params": params}, tok)
    np.testing.assert_allclose(chunked, full, atol=1e-4)
    dec = TransformerLM(cfg, decode=True)
    cache = dec.init(jax.random.PRNGKey(0), jnp.zeros((2, cfg.max_len), jnp.int32))["cache"]
    step = jax.jit(lambda c, x: dec.apply({"params": params, "cache": c}, x, mutable=["cache"]))
    outs = []
    for i in range(tok.shape[1]):
        out, mut = step(cache, tok[:, i : i + 1])
        cache = mut["cache"]
        outs.append(out)
    np.testing.assert_allclose(jnp.concatenate(outs, 1), full, atol=1e-4)


def test_t5_table_is_a_sharded_parameter_and_positions_matter():
    from seqjax.models.transformer import TransformerLM

    cfg = _lm("t5_bias")
    tok = jnp.arange(8)[None] % 5
    variables = TransformerLM(cfg).init(jax.random.PRNGKey(0), tok)
    box = variables["params"]["encoder"]["block_0"]["attn"]["t5_bias"]
    assert box.names == (None, "heads") and box.value.shape == (32, H)
    # ALiBi/T5/RoPE models are not permutation-equivariant: shifting a token changes logits.
    for positional in SCHEMES_ALL:
        m = TransformerLM(_lm(positional, num_layers=1))
        p = m.init(jax.random.PRNGKey(0), tok)["params"]
        a = m.apply({"params": p}, jnp.array([[1, 2, 3, 4]]))[0, -1]
        b = m.apply({"params": p}, jnp.array([[2, 1, 3, 4]]))[0, -1]
        assert not np.allclose(a, b, atol=1e-6), positional


SCHEMES_ALL = ("rope", "alibi", "t5_bias")


def test_model_config_rejects_unhonoured_mechanism():
    from seqjax.models.transformer import TransformerConfig

    with pytest.raises(ValueError, match="model.positional='alibi'.*'lsh'"):
        TransformerConfig(vocab_size=8, positional="alibi", attention=(("lsh", ()),))


# --- The block-sparse engine (Sparse Transformer patterns) ---------------------------------


@pytest.mark.parametrize(
    "name,opts,causal,scheme",
    [
        ("sparse_strided", {"stride": 4, "block_size": 2}, True, "alibi"),
        ("sparse_fixed", {"stride": 4, "c": 2, "head_mode": "split"}, False, "t5_bias"),
        pytest.param(
            "sparse_strided", {"stride": 4, "block_size": 2}, True, "t5_bias", marks=_SLOW
        ),
        pytest.param(
            "sparse_strided", {"stride": 4, "head_mode": "split"}, False, "alibi", marks=_SLOW
        ),
        pytest.param(
            "sparse_strided", {"stride": 4, "head_mode": "split"}, False, "t5_bias", marks=_SLOW
        ),
        pytest.param(
            "sparse_fixed",
            {"stride": 4, "c": 1, "distinct_summaries": True},
            True,
            "t5_bias",
            marks=_SLOW,
        ),
        pytest.param(
            "sparse_fixed",
            {"stride": 4, "c": 1, "distinct_summaries": True},
            True,
            "alibi",
            marks=_SLOW,
        ),
    ],
)
def test_blocksparse_equals_masked_with_bias(name, opts, causal, scheme):
    from seqjax.attention import registry

    t = 16
    q, k, v = _qkv(t, t, seed=5)
    table = jax.random.normal(jax.random.PRNGKey(3), (32, H))
    w = jax.random.normal(jax.random.PRNGKey(4), (B, t, H, D))
    fn = registry.get(name)

    def loss(q, k, v, tab, implementation):
        mod = (
            score_mod.alibi(H, causal=causal)
            if scheme == "alibi"
            else score_mod.t5_bias(tab, causal=causal)
        )
        out = fn(q, k, v, causal=causal, score_mod=mod, implementation=implementation, **opts)
        return (out * w).sum()

    grad = jax.value_and_grad(loss, argnums=(0, 1, 2, 3))
    got, g_got = grad(q, k, v, table, "blocksparse")
    want, g_want = grad(q, k, v, table, "masked")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    for a, b in zip(g_got, g_want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_config_validation_names_positional_and_mechanism():
    from seqjax.configs import common
    from seqjax.train import config_validation
    from tests.conftest import REPO

    config = common.load_file(REPO / "configs" / "char_lm.py", name="cfg_char_lm").get_config(
        "smoke"
    )
    config.mesh.data = 1
    config.model.positional = "alibi"
    config.model.attention = "lsh"
    with pytest.raises(Exception, match=r"config\.model\.positional='alibi'.*'lsh'"):
        config_validation.validate(config)
