"""The encoder-decoder Transformer (``seqjax.models.EncoderDecoder``; Vaswani et al. 2017).

Legend: B batch, S source length, T target length, V vocabulary, E width, H heads, D head dim.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax.models import (
    EncoderDecoder,
    EncoderDecoderConfig,
    attention_cycle,
    reversible,
    shift_right,
)
from seqjax.train import sharding

B, S, T, V = 2, 8, 6, 13


def _cfg(**kw):
    base = dict(
        vocab_size=V,
        encoder_layers=1,
        decoder_layers=1,
        num_heads=2,
        d_model=16,
        max_source_len=S,
        max_target_len=T,
    )
    base.update(kw)
    return EncoderDecoderConfig(**base)


def _source(seed=0, pad=3):
    """``[B, S]`` tokens in 1..V-1 with the last ``pad`` positions of row 0 padded (0)."""
    src = np.random.default_rng(seed).integers(1, V, (B, S))
    src[0, S - pad :] = 0
    return jnp.asarray(src, jnp.int32)


def _targets(seed=1):
    return jnp.asarray(np.random.default_rng(seed).integers(1, V, (B, T)), jnp.int32)


def _init(cfg, src=None, dec_in=None):
    src = _source() if src is None else src
    dec_in = shift_right(_targets()) if dec_in is None else dec_in
    return jax.jit(EncoderDecoder(cfg).init)(jax.random.key(0), src, dec_in)["params"]


def _layout(cfg):
    """``{path: (shape, logical names or None)}`` of the parameters (abstract init)."""
    boxed = jax.eval_shape(
        EncoderDecoder(cfg).init,
        jax.random.key(0),
        jnp.ones((B, cfg.max_source_len), jnp.int32),
        jnp.ones((B, cfg.max_target_len), jnp.int32),
    )["params"]
    leaves = jax.tree_util.tree_leaves_with_path(
        boxed, is_leaf=lambda x: isinstance(x, nn.Partitioned)
    )
    return {
        "/".join(k.key for k in path): (
            tuple((leaf.value if isinstance(leaf, nn.Partitioned) else leaf).shape),
            tuple(leaf.names) if isinstance(leaf, nn.Partitioned) else None,
        )
        for path, leaf in leaves
    }


def test_shift_right():
    np.testing.assert_array_equal(shift_right(jnp.array([[5, 6, 7]])), [[0, 5, 6]])


@pytest.mark.parametrize("norm_position", ["post", "pre"])
def test_forward_shape_dtype_and_normalized_stacks(norm_position):
    cfg = _cfg(norm_position=norm_position)
    params = _init(cfg)
    model = EncoderDecoder(cfg)
    logits_BTV = model.apply({"params": params}, _source(), shift_right(_targets()))
    assert logits_BTV.shape == (B, T, V) and logits_BTV.dtype == jnp.float32
    assert bool(jnp.isfinite(logits_BTV).all()) and float(jnp.abs(logits_BTV).max()) > 0.1
    # Both stacks end with a LayerNorm (post-LN: each layer's last; pre-LN: ln_final).
    enc_BSE = model.apply({"params": params}, _source(), method="encode")
    np.testing.assert_allclose(enc_BSE.mean(-1), 0.0, atol=1e-5)
    np.testing.assert_allclose(enc_BSE.std(-1), 1.0, atol=1e-2)
    layer = params["encoder"]["layer_0"]
    assert set(layer) == {"ln_attn", "attn", "ln_mlp", "mlp"}
    assert set(params["decoder"]["layer_0"]) == {
        "ln_attn", "attn", "ln_cross", "cross_attn", "ln_mlp", "mlp"
    }  # fmt: skip
    assert ("ln_final" in params["encoder"]) == (norm_position == "pre")


def test_post_and_pre_ln_differ_on_the_same_weights():
    pre = _cfg(norm_position="pre")
    params = _init(pre)
    post_params = {**params}
    post_params["encoder"] = {k: v for k, v in params["encoder"].items() if k != "ln_final"}
    post_params["decoder"] = {k: v for k, v in params["decoder"].items() if k != "ln_final"}
    src, dec_in = _source(), shift_right(_targets())
    out_pre = EncoderDecoder(pre).apply({"params": params}, src, dec_in)
    out_post = EncoderDecoder(_cfg(norm_position="post")).apply(
        {"params": post_params}, src, dec_in
    )
    assert float(jnp.abs(out_pre - out_post).max()) > 1e-2


ENCODERS = {
    "dense": {},
    "sparse_strided": dict(
        encoder_attention=attention_cycle(
            "sparse_strided", {"sparse_strided": dict(stride=4, block_size=4)}
        )
    ),
    "linformer": dict(
        encoder_attention=attention_cycle("linformer", {"linformer": dict(max_len=S, k=4)})
    ),
    "lsh": dict(encoder_attention=attention_cycle("lsh", {"lsh": dict(chunk_len=4)})),
}


@pytest.mark.parametrize("encoder", sorted(ENCODERS))
def test_source_padding_contents_do_not_matter(encoder):
    """The pad token's embedding row is never seen: rewriting it (the source's own table)
    leaves every logit unchanged, while a real token's row does change them."""
    cfg = _cfg(share_embeddings=False, **ENCODERS[encoder])
    params = _init(cfg)
    apply = jax.jit(EncoderDecoder(cfg).apply)
    src, dec_in = _source(), shift_right(_targets())
    ref_BTV = apply({"params": params}, src, dec_in)
    table = params["source_embed"]["embedding"]
    noise = 5.0 * jax.random.normal(jax.random.key(7), table.value.shape[1:])
    moved = jax.tree.map(lambda x: x, params)
    moved["source_embed"]["embedding"] = table.replace_boxed(table.value.at[0].set(noise))
    np.testing.assert_allclose(apply({"params": moved}, src, dec_in), ref_BTV, atol=1e-5)
    moved["source_embed"]["embedding"] = table.replace_boxed(table.value.at[src[1, 0]].set(noise))
    assert float(jnp.abs(apply({"params": moved}, src, dec_in) - ref_BTV).max()) > 1e-3


def test_longer_source_padding_leaves_logits_unchanged():
    cfg = _cfg(max_source_len=2 * S)
    params = _init(cfg)
    apply = jax.jit(EncoderDecoder(cfg).apply)
    src, dec_in = _source(), shift_right(_targets())
    longer = jnp.pad(src, ((0, 0), (0, S)))
    np.testing.assert_allclose(
        apply({"params": params}, longer, dec_in), apply({"params": params}, src, dec_in), atol=1e-5
    )


def test_decoder_is_causal_in_values_and_gradients():
    cfg = _cfg(positional="learned", share_embeddings=False, tie_embeddings=False)
    params = _init(cfg)
    model = EncoderDecoder(cfg)
    src, dec_in = _source(), shift_right(_targets())
    t = 2
    ref = model.apply({"params": params}, src, dec_in)
    changed = dec_in.at[:, t + 1 :].set((dec_in[:, t + 1 :] + 3) % V)
    out = model.apply({"params": params}, src, changed)
    np.testing.assert_allclose(out[:, : t + 1], ref[:, : t + 1], atol=1e-6)
    assert float(jnp.abs(out[:, t + 1 :] - ref[:, t + 1 :]).max()) > 1e-3

    def head(pos_table):
        p = {**params, "target_pos_embed": params["target_pos_embed"].replace_boxed(pos_table)}
        return model.apply({"params": p}, src, dec_in)[:, : t + 1].sum()

    g_TE = jax.grad(head)(params["target_pos_embed"].value)
    assert float(jnp.abs(g_TE[: t + 1]).min(axis=-1).max()) > 0.0
    np.testing.assert_array_equal(g_TE[t + 1 :], 0.0)


def test_fully_padded_rows_are_finite():
    cfg = _cfg()
    params = _init(cfg)
    src = _source().at[1].set(0)  # an empty source
    dec_in = jnp.zeros((B, T), jnp.int32)  # an empty target (start tokens and padding)
    out = EncoderDecoder(cfg).apply({"params": params}, src, dec_in)
    assert bool(jnp.isfinite(out).all())


def _decode_scan(cfg, params, src, dec_in_BT, encoded_BSE=None):
    """Teacher-forced cached decoding: ``step`` over the decoder inputs in a ``lax.scan``."""
    model = EncoderDecoder(cfg)

    @jax.jit
    def run(params, src, dec_in_BT):
        enc = model.apply({"params": params}, src, method="encode")
        enc = enc if encoded_BSE is None else encoded_BSE
        cache = model.init_cache(src.shape[0], src.shape[1])

        def body(cache, tok_B):
            logits_BV, cache = model.step(params, cache, enc, src, tok_B[:, None])
            return cache, logits_BV

        cache, logits_TBV = jax.lax.scan(body, cache, dec_in_BT.T)
        return jnp.swapaxes(logits_TBV, 0, 1), cache

    return run(params, src, dec_in_BT)


DECODING = {
    "post_dense_shared_tied": {},
    "pre_causal_learned_untied": dict(
        decoder_layers=2,
        norm_position="pre",
        decoder_attention=attention_cycle("causal,dense"),
        positional="learned",
        share_embeddings=False,
        tie_embeddings=False,
    ),
    "reversible_lsh_encoder": dict(
        encoder_layers=2,
        decoder_layers=2,
        norm_position="pre",
        reversible=True,
        ff_chunk_size=2,
        encoder_attention=attention_cycle("lsh,dense", {"lsh": dict(chunk_len=4)}),
    ),
    "linformer_encoder": ENCODERS["linformer"],
    "sparse_strided_encoder": ENCODERS["sparse_strided"],
}


@pytest.mark.parametrize("family", sorted(DECODING))
def test_cached_decoding_equals_full_forward(family):
    cfg = _cfg(**DECODING[family])
    params = _init(cfg)
    src, dec_in = _source(), shift_right(_targets())
    full_BTV = jax.jit(EncoderDecoder(cfg).apply)({"params": params}, src, dec_in)
    dec_BTV, cache = _decode_scan(cfg, params, src, dec_in)
    np.testing.assert_allclose(dec_BTV, full_BTV, atol=1e-4, rtol=1e-4)
    for leaf in jax.tree.leaves(cache):  # beams reorder along axis 0
        assert leaf.ndim == 0 or leaf.shape[0] == B


def test_cross_attention_keys_values_are_computed_once():
    """After the first step the cache holds the projected encoder output, and later steps
    never read ``encoded_BSE`` again (garbage there changes nothing)."""
    cfg = _cfg()
    params = _init(cfg)
    model = EncoderDecoder(cfg)
    src, dec_in = _source(), shift_right(_targets())
    enc_BSE = model.apply({"params": params}, src, method="encode")
    step = jax.jit(model.step)
    cache = model.init_cache(B, S)
    assert not bool(cache["decoder"]["layer_0"]["cross_attn"]["cross_ready"])
    logits_BV, cache = step(params, cache, enc_BSE, src, dec_in[:, :1])
    cross = cache["decoder"]["layer_0"]["cross_attn"]
    kernel_EHD = params["decoder"]["layer_0"]["cross_attn"]["key"]["kernel"].value
    np.testing.assert_allclose(
        cross["cross_key"], jnp.einsum("bse,ehd->bshd", enc_BSE, kernel_EHD), atol=1e-5
    )
    assert bool(cross["cross_ready"])
    out_good, _ = step(params, cache, enc_BSE, src, dec_in[:, 1:2])
    out_garbage, _ = step(params, cache, jnp.full_like(enc_BSE, 1e3), src, dec_in[:, 1:2])
    np.testing.assert_array_equal(out_good, out_garbage)


def test_beam_reordering_by_gathering_the_batch_axis():
    """Gathering every per-example cache leaf along axis 0 reorders the sequences."""
    cfg = _cfg()
    params = _init(cfg)
    model = EncoderDecoder(cfg)
    src, dec_in = _source(), shift_right(_targets())
    enc_BSE = model.apply({"params": params}, src, method="encode")
    step = jax.jit(model.step)
    cache = model.init_cache(B, S)
    for t in range(2):
        _, cache = step(params, cache, enc_BSE, src, dec_in[:, t : t + 1])
    flip = jnp.array([1, 0])
    flipped = jax.tree.map(lambda c: c[flip] if c.ndim else c, cache)
    out_BV, _ = step(params, cache, enc_BSE, src, dec_in[:, 2:3])
    out_flip_BV, _ = step(params, flipped, enc_BSE[flip], src[flip], dec_in[flip, 2:3])
    np.testing.assert_allclose(out_flip_BV, out_BV[flip], atol=1e-6)


def test_shared_and_tied_embeddings_are_one_parameter():
    shared = _layout(_cfg())
    assert "embed/embedding" in shared
    assert not any(k.startswith(("source_embed", "target_embed", "head")) for k in shared)
    separate = _layout(_cfg(share_embeddings=False))
    assert {"source_embed/embedding", "target_embed/embedding"} <= set(separate)
    assert "head/kernel" not in separate
    untied = _layout(_cfg(tie_embeddings=False))
    assert untied["head/kernel"] == ((16, V), ("embed", "vocab"))
    # The one shared table feeds the encoder and the decoder and is the output projection.
    cfg = _cfg()
    params = _init(cfg)
    src, dec_in = _source(), shift_right(_targets())

    def loss(table):
        p = {**params, "embed": {"embedding": params["embed"]["embedding"].replace_boxed(table)}}
        return EncoderDecoder(cfg).apply({"params": p}, src, dec_in).sum()

    g_VE = jax.grad(loss)(params["embed"]["embedding"].value)
    assert float(jnp.abs(g_VE[src[1]]).min()) > 0.0  # source tokens only through encoder


@pytest.mark.parametrize(
    "kw",
    [
        {},
        dict(positional="learned", share_embeddings=False, tie_embeddings=False),
        dict(norm_position="pre", reversible=True),
        ENCODERS["linformer"],
    ],
)
def test_every_parameter_has_logical_axis_names(kw):
    known = {name for name, _ in sharding.RULES}
    for path, (shape, names) in _layout(_cfg(**kw)).items():
        assert names is not None and len(names) == len(shape), path
        assert set(names) <= known, (path, names)


def test_base_model_parameter_count():
    """Vaswani et al. 2017's base model (N=6, E=512, H=8, F=2048, shared 37000-token
    vocabulary, tied), counted abstractly and analytically (projections without biases)."""
    n, e, f, v = 6, 512, 2048, 37000
    cfg = EncoderDecoderConfig(
        vocab_size=v,
        encoder_layers=n,
        decoder_layers=n,
        num_heads=8,
        d_model=e,
        d_ff=2048,
        max_source_len=16,
        max_target_len=16,
    )
    shapes = jax.eval_shape(
        EncoderDecoder(cfg).init,
        jax.random.key(0),
        jnp.ones((1, 16), jnp.int32),
        jnp.ones((1, 16), jnp.int32),
    )["params"]
    count = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes))
    attention, mlp, ln = 4 * e * e, 2 * e * f + f + e, 2 * e
    encoder_layer = attention + mlp + 2 * ln
    decoder_layer = 2 * attention + mlp + 3 * ln
    assert count == v * e + n * encoder_layer + n * decoder_layer
    assert 60e6 < count < 65e6  # the paper's 65M counts attention biases too


def test_bfloat16_compute_is_finite_and_close():
    cfg32, cfg16 = _cfg(), _cfg(dtype="bfloat16")
    params = _init(cfg32)
    src, dec_in = _source(), shift_right(_targets())
    out32 = EncoderDecoder(cfg32).apply({"params": params}, src, dec_in)
    out16 = EncoderDecoder(cfg16).apply({"params": params}, src, dec_in)
    assert out16.dtype == jnp.float32 and bool(jnp.isfinite(out16).all())
    np.testing.assert_allclose(out16, out32, atol=0.15)
    dec16, _ = _decode_scan(cfg16, params, src, dec_in)
    assert bool(jnp.isfinite(dec16).all())


class _PlainStack(reversible.ReversibleStack):
    recompute: bool = False


@pytest.mark.slow  # two compilations of a reversible model's gradient (~20 s of CPU)
def test_reversible_gradients_equal_autodiff(monkeypatch):
    """The custom VJP's gradients (encoder parameters reached only through the decoder's
    cross-attention context) equal plain autodiff, with dropout recomputed identically."""
    cfg = _cfg(
        encoder_layers=2,
        decoder_layers=2,
        norm_position="pre",
        reversible=True,
        dropout_rate=0.1,
        attention_dropout_rate=0.1,
        encoder_attention=attention_cycle("lsh,dense", {"lsh": dict(chunk_len=4)}),
    )
    params = _init(cfg)
    src, targets = _source(), _targets()
    rngs = {"dropout": jax.random.key(2), "lsh": jax.random.key(3)}

    def loss_and_grads():
        def loss(p):
            logits = EncoderDecoder(cfg).apply(
                {"params": p}, src, shift_right(targets), deterministic=False, rngs=rngs
            )
            return -jnp.take_along_axis(jax.nn.log_softmax(logits), targets[..., None], -1).mean()

        return jax.jit(jax.value_and_grad(loss))(params)

    loss, grads = loss_and_grads()
    monkeypatch.setattr(reversible, "ReversibleStack", _PlainStack)
    loss_ref, grads_ref = loss_and_grads()
    np.testing.assert_allclose(loss, loss_ref, rtol=1e-6)
    flat, flat_ref = jax.tree.leaves(grads), jax.tree.leaves(grads_ref)
    assert len(flat) == len(flat_ref)
    for g, g_ref in zip(flat, flat_ref):
        np.testing.assert_allclose(g, g_ref, rtol=1e-4, atol=1e-6)
    enc_grad = grads["encoder"]["reversible"]["attn_0"]["attn"]["value"]["kernel"]
    assert float(jnp.abs(nn.unbox(enc_grad)).max()) > 0.0


@pytest.mark.parametrize(
    "kw,match",
    [
        (
            dict(decoder_attention=attention_cycle("linformer")),
            "model.decoder_attention.*linformer",
        ),
        (dict(encoder_attention="causal"), "model.encoder_attention.*'causal'"),
        (dict(reversible=True), "model.norm_position='post'.*reversible"),
        (dict(positional="none"), "model.positional='none'"),
        (dict(norm_position="middle"), "model.norm_position='middle'.*'pre', 'post'"),
        (dict(cross_attention_implementation="fast"), "model.cross_attention_implementation"),
        (dict(decoder_layers=0), "model.decoder_layers=0"),
        (
            dict(encoder_attention=attention_cycle("linformer", {"linformer": dict(max_len=4)})),
            "model.encoder_attention: linformer option k=128 exceeds max_len=4",
        ),
    ],
)
def test_bad_configs_raise_naming_the_field(kw, match):
    with pytest.raises(ValueError, match=match):
        _cfg(**kw)


def test_decode_refuses_a_decoder_that_cannot_use_a_kv_cache():
    # flex BigBird: random blocks at absolute positions, so no decoding cache
    bigbird = dict(pattern="bigbird", block_size=2, window=1, num_global=1, num_random=1)
    cfg = _cfg(decoder_attention=attention_cycle("flex", {"flex": bigbird}))
    with pytest.raises(ValueError, match="decode=True.*'flex'"):
        EncoderDecoder(cfg).init_cache(B, S)
