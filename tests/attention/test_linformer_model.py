"""Linformer inside the models: parameter sharing counts (Wang et al. 2020, §4), the
layerwise E owned by the Encoder, padding invariance end to end, and the causal error.

Legend: B batch, T sequence length, K projected length, N max_len.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax.models import layers
from seqjax.models.transformer import (
    Encoder,
    TransformerClassifier,
    TransformerConfig,
    TransformerLM,
)

K, N = 4, 16


def _cfg(sharing, *, num_layers=2, num_heads=2, d_model=16, **kw):
    opts = layers.freeze_options(dict(k=K, max_len=N, sharing=sharing))
    return TransformerConfig(
        vocab_size=11,
        num_layers=num_layers,
        num_heads=num_heads,
        d_model=d_model,
        max_len=N,
        attention=(("linformer", opts),),
        causal=False,
        num_classes=3,
        **kw,
    )


def _linformer_leaves(params):
    """``{path: shape}`` of every Linformer projection in a parameter tree."""
    flat = jax.tree_util.tree_flatten_with_path(nn.unbox(params))[0]
    out = {}
    for path, leaf in flat:
        name = "/".join(str(getattr(p, "key", p)) for p in path)
        if "linformer" in name:
            out[name] = leaf.shape
    return out


@pytest.mark.parametrize(
    "sharing, matrices, arrays",
    [("none", 288, 24), ("headwise", 24, 24), ("kv", 12, 12), ("layerwise", 1, 1)],
)
def test_projection_counts_per_sharing_mode(sharing, matrices, arrays):
    """12 layers x 12 heads: 24 / 12 / 1 k x n matrices for headwise / kv / layerwise
    (Wang et al. 2020, §4); the unshared form has 2 per head and layer (288)."""
    cfg = _cfg(sharing, num_layers=12, num_heads=12, d_model=24)
    model = TransformerClassifier(cfg)
    tokens = jnp.ones((1, N), jnp.int32)
    shapes = jax.eval_shape(model.init, jax.random.key(0), tokens)["params"]
    leaves = _linformer_leaves(shapes)
    assert len(leaves) == arrays
    assert sum(np.prod(s) for s in leaves.values()) == matrices * K * N
    assert all(s[-2:] == (K, N) for s in leaves.values())
    if sharing == "layerwise":  # owned by the Encoder, not by any layer
        assert list(leaves) == ["encoder/linformer_e"]
    # Everything else is exactly the dense model's parameters.
    dense_cfg = TransformerConfig(**{**cfg.__dict__, "attention": (("dense", ()),)})
    dense_shapes = jax.eval_shape(TransformerClassifier(dense_cfg).init, jax.random.key(0), tokens)
    n_all = sum(np.prod(x.shape) for x in jax.tree.leaves(nn.unbox(shapes)))
    n_dense = sum(np.prod(x.shape) for x in jax.tree.leaves(nn.unbox(dense_shapes["params"])))
    assert n_all - n_dense == matrices * K * N


def test_projections_carry_logical_axes():
    cfg = _cfg("none")
    params = jax.eval_shape(
        TransformerClassifier(cfg).init, jax.random.key(0), jnp.ones((1, N), jnp.int32)
    )
    e = params["params"]["encoder"]["block_0"]["attn"]["linformer_e"]
    assert isinstance(e, nn.Partitioned) and e.names == ("heads", "proj_k", "length")
    cfg = _cfg("kv")
    params = jax.eval_shape(
        TransformerClassifier(cfg).init, jax.random.key(0), jnp.ones((1, N), jnp.int32)
    )
    attn = params["params"]["encoder"]["block_0"]["attn"]
    assert attn["linformer_e"].names == ("proj_k", "length") and "linformer_f" not in attn


def test_encoder_padding_content_is_invisible():
    """Changing the tokens at masked positions leaves every real position's output as is."""
    cfg = _cfg("headwise")
    model = Encoder(cfg, causal=False)
    rng = np.random.default_rng(0)
    tokens = jnp.asarray(rng.integers(1, 11, (2, 12)))
    keep = np.ones((2, 12), bool)
    keep[0, 8:] = False
    keep[1, [1, 4]] = False
    other = jnp.where(keep, tokens, jnp.asarray(rng.integers(1, 11, (2, 12))))
    assert (other != tokens).any()
    params = jax.jit(lambda r, t: model.init(r, t, mask_BS=jnp.asarray(keep)))(
        jax.random.key(1), tokens
    )

    @jax.jit
    def run(p, toks):
        return model.apply(p, toks, mask_BS=jnp.asarray(keep))[0]

    out, out_other = np.asarray(run(params, tokens)), np.asarray(run(params, other))
    np.testing.assert_allclose(out[keep], out_other[keep], atol=1e-5)
    assert not np.allclose(out[~keep], out_other[~keep], atol=1e-3)


def test_classifier_logits_do_not_depend_on_padding_length():
    """A padded example gives the logits of the same example without padding."""
    cfg = _cfg("kv")
    model = TransformerClassifier(cfg)
    real = jnp.asarray([[3, 5, 7, 2, 9, 4]])
    padded = jnp.pad(real, ((0, 0), (0, N - real.shape[1])))  # pad_id = 0
    params = jax.jit(model.init)(jax.random.key(2), padded)
    apply = jax.jit(model.apply)
    np.testing.assert_allclose(apply(params, real), apply(params, padded), atol=1e-5, rtol=1e-5)


def test_layerwise_projection_is_shared_and_trained_by_every_layer():
    cfg = _cfg("layerwise")
    model = TransformerClassifier(cfg)
    tokens = jnp.asarray([[3, 5, 7, 2, 9, 4, 1, 1]])
    params = jax.jit(model.init)(jax.random.key(3), tokens)

    def loss(p):
        return model.apply(p, tokens).sum()

    grads = nn.unbox(jax.jit(jax.grad(loss))(params))["params"]["encoder"]
    assert np.abs(np.asarray(grads["linformer_e"])).sum() > 0
    assert all("linformer_e" not in grads[f"block_{i}"]["attn"] for i in range(2))


def test_causal_lm_raises_clear_error():
    cfg = _cfg("headwise")
    cfg = TransformerConfig(**{**cfg.__dict__, "causal": True, "num_classes": 0})
    with pytest.raises(ValueError, match="causal=True.*leak the future"):
        jax.eval_shape(TransformerLM(cfg).init, jax.random.key(0), jnp.ones((1, N), jnp.int32))


def test_input_longer_than_max_len_raises():
    cfg = _cfg("headwise")
    model = TransformerClassifier(TransformerConfig(**{**cfg.__dict__, "max_len": 2 * N}))
    with pytest.raises(ValueError, match="exceeds max_len=16"):
        jax.eval_shape(model.init, jax.random.key(0), jnp.ones((1, N + 1), jnp.int32))
