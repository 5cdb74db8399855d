"""Decoding caches of the windowed, sparse and LSH mechanisms (``seqjax.decoding.pattern_cache``,
``seqjax.decoding.lsh_cache``): cached logits equal the prefix's full-forward logits at
every step, the caches have the documented sizes, and ``generate`` uses them by default.

Legend: B batch, T = L length (max_len), V vocabulary, H heads, D head dim.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax.attention import lsh as lsh_lib
from seqjax.attention import numerics, score_mod
from seqjax.decoding import lsh_cache, pattern_cache
from seqjax.models import TransformerConfig, TransformerLM, attention_cycle, attention_layer, layers
from seqjax.tasks import sampling

B, T, V = 2, 16, 23


def _cfg(name, opts=None, **kw):
    """A 2-layer LM with attention cycle ``name``; ``opts`` go to its last mechanism."""
    base = dict(vocab_size=V, num_layers=2, d_model=16, num_heads=2, max_len=T)
    base.update(kw)
    options = {name.split(",")[-1]: opts}
    return TransformerConfig(attention=attention_cycle(name, options), **base)


def _tokens(seed=0):
    return jnp.asarray(np.random.default_rng(seed).integers(0, V, (B, T)), jnp.int32)


def _cached_and_prefix_logits(cfg, tok_BT, *, prefix_masked=False):
    """(cached logits [B, T, V] fed one token per step in a scan, the prefix's full-forward
    logits [B, T, V]): position i of the second is the last logit of the (i+1)-token
    prefix (the full forward of the whole sequence for causal-exact mechanisms, the masked
    ``prefix_logits`` per step with ``prefix_masked``)."""
    model, dec = TransformerLM(cfg), TransformerLM(cfg, decode=True)
    params = model.init(jax.random.key(1), tok_BT)["params"]
    cache0 = dec.init(jax.random.key(0), tok_BT)["cache"]

    @jax.jit
    def run(params, tok_BT):
        def body(cache, tok_B):
            out, mut = dec.apply(
                {"params": params, "cache": cache}, tok_B[:, None], mutable=["cache"]
            )
            return mut["cache"], out[:, 0]

        _, cached_TBV = jax.lax.scan(body, cache0, tok_BT.T)
        if prefix_masked:
            per_row = lambda buf: jax.vmap(  # noqa: E731
                lambda i: sampling.prefix_logits(model, params, buf, i)
            )(jnp.arange(1, T + 1))
            full_BTV = jax.vmap(per_row)(tok_BT)
        else:
            full_BTV = model.apply({"params": params}, tok_BT)
        return cached_TBV.transpose(1, 0, 2), full_BTV

    cached, full = run(params, tok_BT)
    assert float(jnp.abs(full).max()) > 0.1  # not a degenerate model
    return np.asarray(cached), np.asarray(full), cache0


FAMILIES = {
    "sliding_window_rope": ("flex", dict(pattern="sliding_window", window=3, block_size=8),
                            dict(positional="rope")),
    "local": ("local", dict(block_len=4), {}),
    "sparse_strided_split": ("sparse_strided", dict(stride=4, head_mode="split"), {}),
    "sparse_fixed_distinct": ("sparse_fixed", dict(stride=4, c=1, distinct_summaries=True), {}),
    "lsh_one_chunk_two_layers": ("lsh", dict(chunk_len=T, n_hashes=2), {}),
    "lsh_last_layer_chunks": ("dense,lsh", dict(chunk_len=4, n_hashes=2), {}),
    # Slow (15-30 s each on 2 cores): the other flex patterns and option sets.
    "sliding_window_reversible": ("flex", dict(pattern="sliding_window", window=2, block_size=8),
                                  dict(reversible=True)),
    "dilated": ("flex", dict(pattern="dilated", window=2, dilation=2, block_size=8), {}),
    "global_tokens": ("flex", dict(pattern="global_tokens", window=2, num_global=3,
                                   block_size=8), {}),
    "flex_fixed": ("flex", dict(pattern="fixed", stride=4, c=2, block_size=8), {}),
    "flex_strided": ("flex", dict(pattern="strided", stride=4, block_size=8), {}),
    "sparse_strided_default": ("sparse_strided", None, {}),
    "sparse_fixed_merged": ("sparse_fixed", dict(stride=4, c=2), {}),
    "lsh_chunks_after": ("dense,lsh", dict(chunk_len=4, n_chunks_after=1, n_buckets=4), {}),
}  # fmt: skip
# 10-20 s each on 2 cores: the fast suite keeps one window and one LSH family (a sparse one
# runs in test_generate_uses_the_cache_by_default_and_equals_recomputation).
FAST = ("sliding_window_rope", "lsh_last_layer_chunks")


@pytest.mark.parametrize(
    "family",
    [f if f in FAST else pytest.param(f, marks=pytest.mark.slow) for f in sorted(FAMILIES)],
)
def test_cached_logits_equal_the_prefix_full_forward_at_every_step(family):
    name, opts, kw = FAMILIES[family]
    cfg = _cfg(name, opts, **kw)
    assert sampling.decoding_mode(cfg)[0] == "cache"
    cached, full, cache = _cached_and_prefix_logits(cfg, _tokens(), prefix_masked="lsh" in name)
    np.testing.assert_allclose(cached, full, atol=1e-5, rtol=1e-5)
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(cache)]
    if "lsh" not in name:  # no full-length KV cache: the pattern's buffers
        assert not any("cached_key" in p for p in paths) and any("buffers" in p for p in paths)


def test_sliding_window_cache_is_a_ring_of_window_slots():
    """Memory O(window): one ``[B, window, H, D]`` ring of keys and one of values per layer,
    whatever the model's max_len; the fixed pattern keeps its block ring plus the summary
    cells only."""
    for max_len in (16, 64):
        cfg = _cfg("flex", dict(pattern="sliding_window", window=3), max_len=max_len)
        cache = jax.eval_shape(
            TransformerLM(cfg, decode=True).init, jax.random.key(0), jnp.zeros((B, max_len), int)
        )["cache"]
        buffers = cache["encoder"]["block_0"]["attn"]["buffers"]
        assert {k: (kk.shape, vv.shape) for k, (kk, vv) in buffers.items()} == {
            "window": ((B, 3, 2, 8), (B, 3, 2, 8))
        }
    plan = pattern_cache.make_plan("sparse_fixed", dict(stride=8, c=2), 2, 64)
    assert dict(plan.sizes) == {"block": 7, "summary": 8 * 2}  # l - 1 + (L / l) c, not L
    plan = pattern_cache.make_plan("sparse_strided", dict(stride=8), 2, 64)
    assert dict(plan.sizes) == {"store": 64}  # the column needs every position: O(L)
    slots, _ = plan.read(jnp.int32(40))[0]
    assert slots.shape == (8 + 64 // 8 - 2,)  # but reads l + L/l - 2 of them per step


@pytest.mark.parametrize("scheme", ["alibi", "t5_bias"])
def test_sliding_window_cache_with_a_score_bias_equals_the_materialised_reference(scheme):
    """ALiBi / T5 bias at absolute positions: the ring's one-token outputs equal dense
    attention under the window mask plus the bias (``numerics.attend``) at every step."""
    h, d, w, t = 2, 8, 3, 12
    mha = layers.MultiHeadAttention(
        num_heads=h, head_dim=d, mechanism="flex", causal=True, positional=scheme, max_len=t,
        options=layers.freeze_options(dict(pattern="sliding_window", window=w, block_size=4)),
    )  # fmt: skip
    x_BTE = jax.random.normal(jax.random.key(0), (B, t, 16))
    dec = mha.clone(decode=True)
    variables = dec.init(jax.random.key(1), x_BTE)
    params = nn.meta.unbox(variables["params"])
    if scheme == "t5_bias":  # a non-trivial learned table
        params = dict(params, t5_bias=jax.random.normal(jax.random.key(2), (32, h)))

    @jax.jit
    def cached(params, x_BTE):
        def body(cache, x_BE):
            out, mut = dec.apply(
                {"params": params, "cache": cache}, x_BE[:, None], mutable=["cache"]
            )
            return mut["cache"], out[:, 0]

        return jax.lax.scan(body, variables["cache"], x_BTE.transpose(1, 0, 2))[1]

    def reference(params, x_BTE):
        proj = lambda n: jnp.einsum("bte,ehd->bthd", x_BTE, params[n]["kernel"])  # noqa: E731
        q, k, v = proj("query"), proj("key"), proj("value")
        pos = jnp.arange(t)
        valid = (pos[None, :] <= pos[:, None]) & (pos[:, None] - pos[None, :] <= w)
        sm = (score_mod.alibi(h) if scheme == "alibi" else
              score_mod.t5_bias(params["t5_bias"], causal=True))  # fmt: skip
        out = numerics.attend(q, k, v, valid[None, None], bias=sm.dense_bias(t, t)[None])
        return jnp.einsum("bthd,hde->bte", out, params["out"]["kernel"])

    got = np.asarray(jax.jit(cached)(params, x_BTE)).transpose(1, 0, 2)
    np.testing.assert_allclose(got, np.asarray(reference(params, x_BTE)), atol=1e-5, rtol=1e-5)


def test_sliding_window_alibi_model_cached_equals_full_forward():
    cfg = _cfg("flex", dict(pattern="sliding_window", window=3, block_size=8), positional="alibi")
    cached, full, _ = _cached_and_prefix_logits(cfg, _tokens(3))
    np.testing.assert_allclose(cached, full, atol=1e-5, rtol=1e-5)


LSH_LAYER_OPTIONS = [
    dict(chunk_len=4, n_hashes=2),
    dict(chunk_len=2, n_chunks_after=1, n_buckets=(2, 2)),
]


@pytest.mark.parametrize("opts", LSH_LAYER_OPTIONS)
def test_lsh_layer_step_equals_the_chunked_forward_of_every_prefix(opts):
    """One layer: the cached step's output at position i equals ``lsh_attention`` on the
    (i+1)-token prefix (later positions masked, as ``seqjax.sample`` conditions) at its last
    position, with several chunks, rounds and factorized buckets."""
    b, t, h, d = 2, 12, 2, 8
    kq, kv = jax.random.split(jax.random.key(4))
    q_BTHD, v_BTHD = jax.random.normal(kq, (b, t, h, d)), jax.random.normal(kv, (b, t, h, d))
    rng = jax.random.key(7)

    @jax.jit
    def both(q_BTHD, v_BTHD):
        def body(state, x):
            i, q_B1HD, v_B1HD = x
            out, state = lsh_cache.step(state, q_B1HD[:, None], v_B1HD[:, None], i, rng=rng,
                                        options=opts)  # fmt: skip
            return state, out[:, 0]

        state0 = lsh_cache.init_state(b, t, h, d, d, opts, jnp.float32)
        xs = (jnp.arange(t), q_BTHD.transpose(1, 0, 2, 3), v_BTHD.transpose(1, 0, 2, 3))
        cached_TBHD = jax.lax.scan(body, state0, xs)[1]

        def prefix(i):
            mask = jnp.broadcast_to(jnp.arange(t) <= i, (b, t))
            out = lsh_lib.lsh_attention(q_BTHD, None, v_BTHD, causal=True, mask=mask, rng=rng,
                                        max_len=t, **opts)  # fmt: skip
            return out[:, i]

        return cached_TBHD, jax.vmap(prefix)(jnp.arange(t))

    cached, full = both(q_BTHD, v_BTHD)
    np.testing.assert_allclose(np.asarray(cached), np.asarray(full), atol=1e-5, rtol=1e-5)


@pytest.mark.slow  # ~25 s on 2 cores
def test_lsh_cache_is_not_the_prefix_forward_with_chunked_lsh_below_the_top():
    """An LSH layer below the top with several chunks: later tokens move its chunks, so the
    full forward's earlier states change and a cache cannot follow; ``auto`` recomputes
    there (with the reason) and ``cache`` forces the cache, whose logits then differ."""
    cfg = _cfg("lsh", dict(chunk_len=2, n_hashes=1, n_buckets=4))
    mode, why = sampling.decoding_mode(cfg)
    assert mode == "recompute" and "LSH layer 0" in why
    assert sampling.decoding_mode(cfg, "cache")[0] == "cache"
    assert not sampling.uses_kv_cache(cfg)
    cached, full, _ = _cached_and_prefix_logits(cfg, _tokens(1), prefix_masked=True)
    np.testing.assert_allclose(cached[:, :2], full[:, :2], atol=1e-5, rtol=1e-5)  # one chunk
    assert np.abs(cached - full).max() > 1e-3


def test_generate_uses_the_cache_by_default_and_equals_recomputation(caplog):
    cfg = _cfg("sparse_strided", dict(stride=4))
    params = TransformerLM(cfg).init(jax.random.key(1), _tokens())["params"]
    params = jax.tree.map(lambda p: p * 3.0, params)  # sharper logits: varied greedy tokens
    prompt = np.array([3, 5, 7], np.int32)
    assert sampling.decoding_mode(cfg) == ("cache", "sparse_strided: pattern")
    cached = sampling.generate(cfg, params, prompt, 10, temperature=0.0)
    with sampling.forced_decoding("recompute"):
        recomputed = sampling.generate(cfg, params, prompt, 10, temperature=0.0)
        assert not sampling.uses_kv_cache(cfg)  # the image sampler follows the block too
    np.testing.assert_array_equal(cached, recomputed)
    assert len(set(cached.tolist())) > 1
    with pytest.raises(ValueError, match="decoding='fast' is not one of"):
        sampling.generate(cfg, params, prompt, 2, decoding="fast")


def test_patterns_without_a_cache_are_named():
    assert pattern_cache.supports("flex", dict(pattern="sliding_window", window=2))
    assert not pattern_cache.supports("flex", dict(pattern="bigbird"))
    assert (
        attention_layer.cache_kind("flex") == "pattern"
        and attention_layer.cache_kind("lsh") == "lsh"
    )
    assert attention_layer.cache_kind("linformer") is None
    cfg = _cfg("flex", dict(pattern="bigbird", block_size=4, num_random=1))
    assert sampling.decoding_mode(cfg) == (
        "recompute", "layer 0's attention 'flex' has no decoding cache"
    )  # fmt: skip
    with pytest.raises(ValueError, match="no decoding cache"):
        pattern_cache.make_plan("flex", dict(pattern="bigbird"), 2, 16)


@pytest.mark.slow  # compiles two beam searches (~30 s on 2 cores)
def test_seq2seq_beam_search_with_a_sliding_window_decoder_uses_its_cache():
    from seqjax.models.encoder_decoder import EncoderDecoder, EncoderDecoderConfig
    from seqjax.tasks import seq2seq_decode

    window = dict(pattern="sliding_window", window=2, block_size=4)
    cfg = EncoderDecoderConfig(
        vocab_size=13, encoder_layers=1, decoder_layers=2, num_heads=2, d_model=16, d_ff=32,
        max_source_len=7, max_target_len=8,
        decoder_attention=attention_cycle("flex", {"flex": window}),
    )  # fmt: skip
    assert seq2seq_decode.uses_cache(cfg)
    source = jnp.asarray(np.random.default_rng(0).integers(4, 13, (3, 7)), jnp.int32)
    params = EncoderDecoder(cfg).init(jax.random.key(1), source, jnp.zeros((3, 8), jnp.int32))
    params = jax.tree.map(lambda p: p * 3.0, params["params"])
    kw = dict(beam_size=3, alpha=0.6, max_len=8, eos_id=3)
    t1, s1 = seq2seq_decode.make_translate_fn(cfg, **kw)(params, source)
    t2, s2 = seq2seq_decode.make_translate_fn(cfg, **kw, force_recompute=True)(params, source)
    np.testing.assert_array_equal(np.asarray(t1), np.asarray(t2))
    np.testing.assert_allclose(np.asarray(s1), np.asarray(s2), rtol=1e-5, atol=1e-5)


def test_sample_cli_says_which_decoding_mode_runs():
    """``python -m seqjax.sample`` prints ``decoding: MODE (why)`` on stderr."""
    import types

    from seqjax import sample

    run = types.SimpleNamespace(recurrence=None, model_cfg=_cfg("local", dict(block_len=4)))
    assert sample._mode_line(run, "auto") == "cache (local: pattern)"
    assert sample._mode_line(run, "recompute").startswith("recompute (decoding='recompute'")
    run = types.SimpleNamespace(recurrence=object(), model_cfg=None)
    assert sample._mode_line(run, "auto").startswith("memory")
