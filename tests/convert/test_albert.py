"""ALBERT (``seqjax.models.albert``) equals Hugging Face's ``AlbertForPreTraining``: masked-LM
and sentence-order logits to float32 rounding after import (all layers in one group, and 2
groups of 2 layers), the export loads in ``transformers`` with the same logits, and a shared
layer's gradient is the sum of its applications' gradients."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

from seqjax import convert
from seqjax.models.albert import AlbertConfig, AlbertLM
from tests.convert import _hf_models as hf

B, T = 2, 10
SHAPES = {"1group": dict(num_hidden_layers=3, num_hidden_groups=1, inner_group_num=1),
          "2groups": dict(num_hidden_layers=4, num_hidden_groups=2, inner_group_num=2)}  # fmt: skip


def _albert(arch="AlbertForPreTraining", **shape):
    cfg = hf.transformers.AlbertConfig(
        vocab_size=hf.V, embedding_size=16, hidden_size=hf.E, num_attention_heads=hf.HEADS,
        intermediate_size=hf.FF, max_position_embeddings=hf.POSITIONS, **shape,
    )  # fmt: skip
    return hf._seeded(lambda: getattr(hf.transformers, arch)(cfg))


@pytest.fixture(scope="module", params=sorted(SHAPES))
def pretrained(request, tmp_path_factory):
    model = _albert(**SHAPES[request.param])
    imp = convert.load(hf.save(model, tmp_path_factory.mktemp(request.param)))
    return model, imp


def _inputs():
    ids, types = hf.ids((B, T)), hf.ids((B, T), low=0, seed=1) % 2
    return ids, types


def _theirs(model, ids, types):
    torch = hf.torch
    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(ids.astype(np.int64)),
                    token_type_ids=torch.from_numpy(types.astype(np.int64)))  # fmt: skip
    return out.prediction_logits.numpy(), out.sop_logits.numpy()


def _ours(imp, params, ids, types):
    return imp.model.apply({"params": params}, jnp.asarray(ids), token_types_BT=jnp.asarray(types),
                           outputs="pretraining")  # fmt: skip


def test_pretraining_logits_equal_transformers(pretrained):
    model, imp = pretrained
    assert imp.arch == "albert" and imp.unused == [] and imp.config.pair_head
    assert imp.config.num_hidden_groups == model.config.num_hidden_groups
    ids, types = _inputs()
    mlm, sop = _ours(imp, imp.params, ids, types)
    mlm_ref, sop_ref = _theirs(model, ids, types)
    hf.assert_close(mlm, mlm_ref)
    hf.assert_close(sop, sop_ref)


def test_export_loads_in_transformers(pretrained, tmp_path):
    _, imp = pretrained
    flat = traverse_util.flatten_dict(imp.params)
    rng = np.random.default_rng(3)  # every tensor moved: the export must carry each one
    params = traverse_util.unflatten_dict(
        {k: (v + 0.05 * rng.standard_normal(v.shape)).astype(np.float32) for k, v in flat.items()}
    )
    convert.save(tmp_path, "albert", imp.config, params)
    back = convert.load(tmp_path)
    assert back.config == imp.config
    for k, v in traverse_util.flatten_dict(back.params).items():
        np.testing.assert_array_equal(v, traverse_util.flatten_dict(params)[k], err_msg=str(k))
    theirs = hf.transformers.AlbertForPreTraining.from_pretrained(str(tmp_path)).eval()
    ids, types = _inputs()
    mlm, sop = _ours(imp, params, ids, types)
    mlm_ref, sop_ref = _theirs(theirs, ids, types)
    hf.assert_close(mlm, mlm_ref)
    hf.assert_close(sop, sop_ref)


def test_shared_layer_gradient_is_the_sum_over_its_applications():
    """One group applied 3 times vs 3 unshared layers holding the same weights: the shared
    weights' gradient equals the sum of the three layers' gradients (and the forward pass is
    the same)."""
    kw = dict(vocab_size=hf.V, num_layers=3, num_heads=4, d_model=32, d_ff=64, max_len=16,
              embed_dim=16, pair_head=True)  # fmt: skip
    shared = AlbertLM(AlbertConfig(num_hidden_groups=1, **kw))
    unshared = AlbertLM(AlbertConfig(num_hidden_groups=3, **kw))
    ids = jnp.asarray(hf.ids((B, T)))
    p = jax.tree.map(np.asarray, shared.init(jax.random.key(1), ids)["params"])
    enc = dict(p["encoder"])
    layer = enc.pop("group_0_layer_0")
    p_un = {**p, "encoder": {**enc, **{f"group_{g}_layer_0": layer for g in range(3)}}}
    targets = jnp.asarray(hf.ids((B, T), seed=5))

    def loss(model, params):
        mlm, sop = model.apply({"params": params}, ids, outputs="pretraining")
        lp = jax.nn.log_softmax(mlm)
        return -jnp.take_along_axis(lp, targets[..., None], -1).mean() + sop[:, 1].mean()

    l_sh, g_sh = jax.jit(jax.value_and_grad(lambda q: loss(shared, q)))(p)
    l_un, g_un = jax.jit(jax.value_and_grad(lambda q: loss(unshared, q)))(p_un)
    np.testing.assert_allclose(l_sh, l_un, rtol=1e-6)
    summed = jax.tree.map(lambda *g: sum(g), *[g_un["encoder"][f"group_{g}_layer_0"]
                                                 for g in range(3)])  # fmt: skip
    per_layer = jax.tree.leaves(g_un["encoder"]["group_1_layer_0"])
    assert max(float(jnp.abs(a).max()) for a in per_layer) > 0
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-7),
                 g_sh["encoder"]["group_0_layer_0"], summed)  # fmt: skip
    # and not just one application's: the first layer's gradient alone differs
    first = jax.tree.leaves(g_un["encoder"]["group_0_layer_0"])
    whole = jax.tree.leaves(g_sh["encoder"]["group_0_layer_0"])
    assert any(not np.allclose(a, b, rtol=1e-3) for a, b in zip(first, whole))


def test_masked_lm_checkpoint_has_no_pair_head(tmp_path):
    model = _albert("AlbertForMaskedLM", num_hidden_layers=2)
    imp = convert.load(hf.save(model, tmp_path))
    assert not imp.config.pair_head and "pair_head" not in imp.params
    ids = hf.ids((B, T))
    hf.assert_close(np.asarray(imp.model.apply({"params": imp.params}, jnp.asarray(ids))),
                    hf.logits(model, ids))  # fmt: skip


@pytest.mark.parametrize(
    "field, value", [("num_hidden_groups", 4), ("inner_group_num", 0), ("norm_position", "pre")]
)
def test_bad_config_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"model.{field}="):
        AlbertConfig(vocab_size=hf.V, num_layers=3, **{field: value})


def test_block_of_rebuilds_the_config(pretrained):
    """``config.init_from=hf:<folder>`` fills ``config.model`` with ``block_of``; the family's
    ``build_config`` then gives back the imported config."""
    import ml_collections

    from seqjax.models import registry

    _, imp = pretrained
    family = registry.get("albert")
    block = registry.model_block("albert", **family.block_of(imp.config))
    config = ml_collections.ConfigDict({"model": block})
    info = type("Info", (), {"vocab_size": imp.config.vocab_size, "pad_id": imp.config.pad_id})
    assert family.build_config(config, info, None) == imp.config
