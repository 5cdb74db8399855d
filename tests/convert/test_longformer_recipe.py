"""The Longformer recipe (``seqjax.convert.longformer``): copied positions extend the model
without changing what it computes on the original length, and the copies repeat."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from seqjax import convert
from seqjax.convert.longformer import extend_context
from tests.convert import _hf_models as hf


@pytest.fixture(scope="module")
def roberta(tmp_path_factory):
    return convert.load(hf.save(hf.bert(roberta=True), tmp_path_factory.mktemp("r")))


def test_copied_positions(roberta):
    n = hf.POSITIONS
    cfg, params = extend_context(roberta.config, roberta.params, 4)
    table = np.asarray(params["encoder"]["pos_embed"])
    old = np.asarray(roberta.params["encoder"]["pos_embed"])
    assert table.shape == (2 + 4 * n, hf.E) and cfg.max_len == 2 + 4 * n
    np.testing.assert_array_equal(table[: 2 + n], old)  # the offset rows, then the copies
    for k in range(1, 4):
        np.testing.assert_array_equal(table[2 + k * n : 2 + (k + 1) * n], old[2:])
    ids = jnp.asarray(hf.ids((2, n)))  # the original length: the same function
    before = roberta.model.apply({"params": roberta.params}, ids)
    after = convert.make_model("roberta", cfg).apply({"params": params}, ids)
    np.testing.assert_array_equal(np.asarray(before), np.asarray(after))


def test_mechanism_swap_runs_long(roberta):
    n = hf.POSITIONS
    opts = {"flex": {"pattern": "global_tokens", "window": 8, "num_global": 1, "block_size": 16}}
    cfg, params = extend_context(roberta.config, roberta.params, 2, attention="flex",
                                 attention_options=opts)  # fmt: skip
    assert cfg.attention[0][0] == "flex"
    ids = jnp.asarray(hf.ids((1, 2 * n)))
    logits = convert.make_model("roberta", cfg).apply({"params": params}, ids)
    assert logits.shape == (1, 2 * n, hf.V) and bool(jnp.isfinite(logits).all())
    # a window covering everything is dense attention: equal logits
    wide = {"flex": dict(opts["flex"], window=2 * n)}
    cfg_w, _ = extend_context(roberta.config, roberta.params, 2, attention="flex",
                              attention_options=wide)  # fmt: skip
    dense_cfg = dataclasses.replace(cfg_w, attention=(("dense", ()),))
    a = convert.make_model("roberta", cfg_w).apply({"params": params}, ids)
    b = convert.make_model("roberta", dense_cfg).apply({"params": params}, ids)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)


def test_bad_recipe(roberta):
    with pytest.raises(ValueError, match="position_init='zeros' is not one of"):
        extend_context(roberta.config, roberta.params, 2, position_init="zeros")
    gpt_like = dataclasses.replace(roberta.config, positional="sinusoidal")
    with pytest.raises(ValueError, match="model.positional='sinusoidal' has no learned table"):
        extend_context(gpt_like, roberta.params, 2)
