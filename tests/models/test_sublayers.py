"""The shared sublayers of ``seqjax.models.layers`` reach every model, and the parameter
layout (what checkpoints store) is the one built here from the config.

The LM, the classifier, Transformer-XL and the reversible stack build their normalization,
attention, feed-forward and embedding only through ``layers.norm``,
``layers.attention_sublayer``, ``layers.feed_forward_sublayer`` (``layers.Mlp``) and
``layers.token_embedding``: replacing one of them (an RMSNorm or gated-MLP ablation) must
change every model.

Legend: B batch, T length, V vocabulary, E width, H heads, D head dim, F feed-forward width,
L max length, C classes.
"""

import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax.models import TransformerClassifier, TransformerLM, attention_cycle, layers
from seqjax.models.transformer import TransformerConfig
from seqjax.models.transformer_xl import TransformerXL

B, T, V, C = 2, 8, 11, 3


def _cfg(**kw):
    base = dict(vocab_size=V, num_layers=2, num_heads=2, d_model=8, max_len=T)
    base.update(kw)
    return TransformerConfig(**base)


def _xl_cfg(**options):
    relative = attention_cycle("relative", {"relative": dict(mem_len=4, **options)})
    return _cfg(attention=relative, positional="none")


# name -> (model, init args); one of each kind that builds blocks.
CASES = {
    "lm": lambda: TransformerLM(_cfg(tie_embeddings=False, positional="learned")),
    "lm_remat_chunked": lambda: TransformerLM(_cfg(remat=True, ff_chunk_size=4)),
    "classifier_cls": lambda: TransformerClassifier(
        _cfg(num_classes=C, causal=False, pooling="cls")
    ),
    "classifier_mean": lambda: TransformerClassifier(_cfg(num_classes=C, causal=False)),
    "xl": lambda: TransformerXL(_xl_cfg(), mem_len=4),
    "xl_untied": lambda: TransformerXL(_xl_cfg(untie_r=True), mem_len=4),
    "reversible": lambda: TransformerLM(_cfg(reversible=True, ff_chunk_size=4)),
}


def _layout(model):
    """``{path: (shape, logical names)}`` of the model's parameters (abstract init)."""
    tokens = jnp.ones((B, T), jnp.int32)
    boxed = jax.eval_shape(model.init, jax.random.key(0), tokens)["params"]
    leaves = jax.tree_util.tree_leaves_with_path(
        boxed, is_leaf=lambda x: isinstance(x, nn.Partitioned)
    )
    out = {}
    for path, leaf in leaves:
        names = tuple(leaf.names) if isinstance(leaf, nn.Partitioned) else None
        value = leaf.value if isinstance(leaf, nn.Partitioned) else leaf
        out["/".join(k.key for k in path)] = (tuple(value.shape), names)
    return out


def _prefixed(prefix, tree):
    return {f"{prefix}/{k}": v for k, v in tree.items()}


def _norm(cfg):
    e = cfg.d_model
    return {"scale": ((e,), ("embed",)), "bias": ((e,), ("embed",))}


def _attention(cfg, xl_untied=None):
    e, h, d = cfg.d_model, cfg.num_heads, cfg.dim_head
    out = {f"{p}/kernel": ((e, h, d), ("embed", "heads", "kv")) for p in ("query", "key", "value")}
    out["out/kernel"] = ((h, d, e), ("heads", "kv", "embed"))
    if xl_untied is not None:  # relative attention's W_R (and u, v when untied), per layer
        out["r_net"] = ((h * d, h, d), ("embed", "heads", "kv"))
        if xl_untied:
            out["r_w_bias"] = out["r_r_bias"] = ((h, d), ("heads", "kv"))
    return out


def _mlp(cfg):
    e, f = cfg.d_model, cfg.dim_ff
    return {
        "core/up/kernel": ((e, f), ("embed", "mlp")),
        "core/up/bias": ((f,), ("mlp",)),
        "core/down/kernel": ((f, e), ("mlp", "embed")),
        "core/down/bias": ((e,), ("embed",)),
    }


def _block(cfg, xl_untied=None):
    return {
        **_prefixed("ln_attn", _norm(cfg)),
        **_prefixed("attn", _attention(cfg, xl_untied)),
        **_prefixed("ln_mlp", _norm(cfg)),
        **_prefixed("mlp", _mlp(cfg)),
    }


def _stack(cfg, xl_untied=None):
    """Embedding, the N layers and the final norm, as laid out in a model's scope."""
    out = {"embed/embedding": ((cfg.vocab_size, cfg.d_model), ("vocab", "embed"))}
    for i in range(cfg.num_layers):
        if cfg.reversible:
            out.update(_prefixed(f"reversible/attn_{i}/ln", _norm(cfg)))
            out.update(_prefixed(f"reversible/attn_{i}/attn", _attention(cfg)))
            out.update(_prefixed(f"reversible/ff_{i}/ln", _norm(cfg)))
            out.update(_prefixed(f"reversible/ff_{i}/mlp", _mlp(cfg)))
        else:
            out.update(_prefixed(f"block_{i}", _block(cfg, xl_untied)))
    out.update(_prefixed("ln_final", _norm(cfg)))
    return out


def _expected_layout(model):
    """The layout every checkpoint of this model has, built from its config alone."""
    cfg = model.cfg
    e = cfg.d_model
    if isinstance(model, TransformerXL):
        untied = dict(cfg.attention[0][1]).get("untie_r", False)
        out = _stack(cfg, xl_untied=untied)
        if not untied:  # u, v shared by the layers (Dai et al. 2019, §3.3)
            out["r_w_bias"] = out["r_r_bias"] = ((cfg.num_heads, cfg.dim_head), ("heads", "kv"))
        return out
    out = _prefixed("encoder", _stack(cfg))
    if cfg.positional == "learned":
        out["encoder/pos_embed"] = ((cfg.max_len, e), ("length", "embed"))
    if isinstance(model, TransformerClassifier):
        if cfg.pooling == "cls":
            out["cls"] = ((e,), ("embed",))
        out.update({"pre_head/kernel": ((e, e), None), "pre_head/bias": ((e,), None)})
        out.update({"head/kernel": ((e, C), None), "head/bias": ((C,), None)})
    elif not cfg.tie_embeddings:
        out["head/kernel"] = ((e, cfg.vocab_size), ("embed", "vocab"))
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_parameter_layout_is_the_one_checkpoints_store(case):
    model = CASES[case]()
    assert _layout(model) == _expected_layout(model)


class _RMSNormAblation(nn.RMSNorm):
    """Stands for an ablation edit of ``layers.norm``: scale only, no bias."""


class _GatedMlpAblation(layers.Mlp):
    """Stands for an ablation edit of ``layers.Mlp``: an extra gate projection."""

    @nn.compact
    def __call__(self, x_BTE, *, deterministic: bool = True):
        gate_BTE = nn.sigmoid(nn.Dense(x_BTE.shape[-1], name="gate")(x_BTE))
        return super().__call__(x_BTE * gate_BTE, deterministic=deterministic)


@pytest.mark.parametrize("case", list(CASES))
def test_one_edit_in_layers_reaches_every_model(case, monkeypatch):
    """Replacing ``layers.norm`` and ``layers.Mlp`` changes every norm and every MLP of the
    model (a model that built its own LayerNorm or MLP would keep a bias / lack the gate)."""
    model = CASES[case]()
    before = _layout(model)
    monkeypatch.setattr(layers, "norm", lambda name=None, cfg=None: _RMSNormAblation(name=name))
    monkeypatch.setattr(layers, "Mlp", _GatedMlpAblation)
    after = _layout(model)
    n = model.cfg.num_layers
    norm_biases = [p for p in before if re.search(r"(^|/)ln[^/]*/bias$", p)]
    assert len(norm_biases) == 2 * n + 1, "2 sublayer norms per layer and the final norm"
    assert not set(norm_biases) & set(after), "a norm was built outside layers.norm"
    gates = [p for p in after if "/gate/" in p or p.startswith("gate/")]
    assert len(gates) == 2 * n, "a gate kernel and bias in each layer's MLP"
    # Apart from the removed biases and the added gates, the layout is unchanged.
    assert set(before) - set(norm_biases) == set(after) - set(gates)


def test_token_embedding_scales_lookups_but_not_tied_logits():
    """Vaswani et al. 2017, §3.4: the lookup is multiplied by sqrt(E); ``attend`` is not."""
    cfg = _cfg(d_model=16)
    emb = layers.token_embedding(cfg)
    tokens_BT = jax.random.randint(jax.random.key(1), (B, T), 0, V)
    params = nn.meta.unbox(emb.init(jax.random.key(0), tokens_BT))
    table_VE = params["params"]["embedding"]
    np.testing.assert_allclose(table_VE.std(), cfg.d_model**-0.5, rtol=0.3)
    x_BTE = emb.apply(params, tokens_BT)
    np.testing.assert_allclose(x_BTE, table_VE[tokens_BT] * 4.0, rtol=1e-6)
    logits_BTV = emb.apply(params, x_BTE, method=emb.attend)
    np.testing.assert_allclose(logits_BTV, x_BTE @ table_VE.T, rtol=1e-5, atol=1e-6)
