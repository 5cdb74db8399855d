"""Adaptive softmax and adaptive input (``seqjax.models.adaptive``)."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax.models import adaptive
from tests.conftest import require_devices

V, E = 40, 16


def _module(**kw):
    return adaptive.AdaptiveSoftmax(vocab_size=V, d_model=E, **kw)


@pytest.mark.parametrize(
    "kw",
    [
        dict(cutoffs=(10, 25), div_val=2),
        dict(cutoffs=(10, 25), div_val=1, tie_projs=False, tie_weights=False),
        dict(cutoffs=(5,), div_val=4, tie_projs=False),
    ],
)
def test_log_probs_are_normalised_and_match_the_factorisation(kw):
    m = _module(**kw)
    h = jax.random.normal(jax.random.PRNGKey(0), (2, 3, E))
    params = nn.meta.unbox(m.init(jax.random.PRNGKey(1), h))
    # Non-zero cluster logits, so the head's cluster entries matter.
    params = jax.tree.map(lambda p: p + 0.1 * jnp.cos(jnp.arange(p.size).reshape(p.shape)), params)
    lp = m.apply(params, h)
    assert lp.shape == (2, 3, V)
    np.testing.assert_allclose(jax.nn.logsumexp(lp, -1), 0.0, atol=1e-5)
    # The factorisation p(w) = p_head(cluster) p_cluster(w), by hand for one tail word.
    p = params["params"]
    c0 = kw["cutoffs"][0]
    h0 = h if "proj_0" not in p else h @ p["proj_0"]
    head = jnp.concatenate(
        [
            h0 @ p["embed_0"].T + p["bias_0"][None, None]
            if kw.get("tie_weights", True)
            else h0 @ p["out_embed_0"].T + p["bias_0"][None, None],
            h0 @ p["cluster_weight"].T + p["cluster_bias"][None, None],
        ],
        -1,
    )
    head_lp = jax.nn.log_softmax(head, -1)
    table1 = p["embed_1"] if kw.get("tie_weights", True) else p["out_embed_1"]
    proj1 = p.get("proj_1") if kw.get("tie_projs", True) else p.get("out_proj_1", p.get("proj_1"))
    h1 = h if proj1 is None else h @ proj1
    tail_lp = jax.nn.log_softmax(h1 @ table1.T + p["bias_1"][None, None], -1)
    np.testing.assert_allclose(lp[..., c0 + 2], head_lp[..., c0] + tail_lp[..., 2], atol=1e-5)
    np.testing.assert_allclose(lp[..., :c0], head_lp[..., :c0], atol=1e-5)


def test_no_cutoffs_equals_full_softmax_and_tied_embedding():
    m = _module()
    h = jax.random.normal(jax.random.PRNGKey(0), (2, 3, E))
    params = nn.meta.unbox(m.init(jax.random.PRNGKey(1), h))
    p = params["params"]
    assert set(p) == {"embed_0", "bias_0"}  # no projection, no clusters
    lp = m.apply(params, h)
    np.testing.assert_allclose(
        lp, jax.nn.log_softmax(h @ p["embed_0"].T + p["bias_0"][None, None], -1), atol=1e-5
    )
    tok = jnp.array([[0, 5, V - 1]])
    emb = m.apply(params, tok, method=m.embed)
    np.testing.assert_allclose(emb, p["embed_0"][tok] * np.sqrt(E), atol=1e-6)


def test_adaptive_input_uses_each_cluster_table():
    m = _module(cutoffs=(10, 25), div_val=2)
    params = nn.meta.unbox(m.init(jax.random.PRNGKey(1), jnp.zeros((1, 1, E))))
    p = params["params"]
    tok = jnp.array([[3, 12, 30]])
    emb = m.apply(params, tok, method=m.embed)
    want = [
        p["embed_0"][3] @ p["proj_0"].T if "proj_0" in p else p["embed_0"][3],
        p["embed_1"][2] @ p["proj_1"].T,
        p["embed_2"][5] @ p["proj_2"].T,
    ]
    np.testing.assert_allclose(emb[0], np.stack(want) * np.sqrt(E), atol=1e-5)
    assert p["embed_1"].shape == (15, E // 2) and p["embed_2"].shape == (15, E // 4)


def test_parameters_carry_logical_axis_names():
    m = _module(cutoffs=(10, 25), div_val=2)
    boxed = m.init(jax.random.PRNGKey(1), jnp.zeros((1, 1, E)))["params"]
    assert boxed["embed_1"].names == ("vocab", "embed")
    assert boxed["proj_1"].names == ("embed", None)
    assert boxed["bias_2"].names == ("vocab",)


@pytest.mark.parametrize("cutoffs", [(10, 5), (10, 10), (0, 5), (10, V), (10, 50)])
def test_bad_cutoffs_raise_one_clear_error(cutoffs):
    with pytest.raises(ValueError, match="model.adaptive.cutoffs"):
        adaptive.check_cutoffs(cutoffs, V)


def test_output_layer_memory_is_smaller():
    full = adaptive.output_parameter_count(267735, 512)
    adapt = adaptive.output_parameter_count(267735, 512, (20000, 40000, 200000), 4)
    assert adapt < full / 3


def test_transformer_lm_with_adaptive_softmax_from_config():
    from seqjax.models.from_config import transformer_config
    from seqjax.models.transformer import TransformerLM
    from seqjax.train import defaults

    model_cfg = defaults.model()
    model_cfg.update(num_layers=1, d_model=16, num_heads=2, max_len=8, positional="alibi")
    model_cfg.adaptive.update(enabled=True, cutoffs=(10, 25), div_val=2)

    class Info:
        vocab_size, pad_id = V, None

    class Config:
        model = model_cfg

    cfg = transformer_config(Config, Info, causal=True)
    assert cfg.adaptive and cfg.adaptive_cutoffs == (10, 25)
    model = TransformerLM(cfg)
    tok = jnp.array([[1, 12, 30, 39]])
    params = model.init(jax.random.PRNGKey(0), tok)["params"]
    assert "adaptive" in params["encoder"] and "proj_1" in params["encoder"]["adaptive"]
    lp = model.apply({"params": params}, tok)
    np.testing.assert_allclose(jax.nn.logsumexp(lp, -1), 0.0, atol=1e-5)
    model_cfg.adaptive.cutoffs = (10, 50)
    with pytest.raises(ValueError, match="model.adaptive.cutoffs"):
        transformer_config(Config, Info, causal=True)


def test_transformer_xl_with_adaptive_softmax():
    from seqjax.models.transformer import TransformerConfig
    from seqjax.models.transformer_xl import TransformerXL

    cfg = TransformerConfig(
        vocab_size=V, num_layers=1, num_heads=2, d_model=16, max_len=8, positional="none",
        attention=(("relative", ()),), adaptive=True, adaptive_cutoffs=(10, 25),
        adaptive_div_val=2,
    )  # fmt: skip
    model = TransformerXL(cfg, 4)
    tok = jnp.array([[1, 12, 30, 39]])
    variables = model.init(jax.random.PRNGKey(0), tok)
    lp, mem = model.apply(variables, tok)
    lp2, _ = model.apply(variables, tok, mem)
    for x in (lp, lp2):
        np.testing.assert_allclose(jax.nn.logsumexp(x, -1), 0.0, atol=1e-5)


def test_sharded_by_the_rules_equals_unsharded():
    from jax.sharding import AxisType, NamedSharding

    from seqjax.train import sharding

    m = adaptive.AdaptiveSoftmax(vocab_size=48, d_model=16, cutoffs=(16, 32), div_val=2)
    h = jax.random.normal(jax.random.PRNGKey(0), (4, 3, 16))
    boxed = m.init(jax.random.PRNGKey(1), h)
    require_devices(8)
    shape = {"data": 2, "fsdp": 2, "tensor": 2}  # every other mesh axis of size 1
    sizes = tuple(shape.get(a, 1) for a in sharding.MESH_AXES)
    mesh = jax.make_mesh(sizes, sharding.MESH_AXES, axis_types=(AxisType.Auto,) * len(sizes))
    with nn.logical_axis_rules(sharding.RULES):
        specs = nn.logical_to_mesh(nn.get_partition_spec(boxed))
    plain = nn.meta.unbox(boxed)
    placed = jax.tree.map(lambda x, s: jax.device_put(x, NamedSharding(mesh, s)), plain, specs)
    assert tuple(placed["params"]["embed_1"].sharding.spec) == ("tensor", "fsdp")
    want = m.apply(plain, h)
    got = jax.jit(m.apply)(placed, h)
    np.testing.assert_allclose(got, want, atol=1e-5)
    tok = jnp.array([[1, 20, 40]])
    np.testing.assert_allclose(
        jax.jit(lambda p, t: m.apply(p, t, method=m.embed))(placed, tok),
        m.apply(plain, tok, method=m.embed),
        atol=1e-5,
    )
