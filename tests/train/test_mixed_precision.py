"""Mixed precision (``model.dtype = "bfloat16"``): parameters and optimizer state stay
float32, activations run in bfloat16, logits and the loss are float32, and a short run
learns like float32 (stated tolerance: the mean loss of the last 5 of 40 steps within 0.05
nats of float32's, about 2% of the loss there)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax.models.transformer import TransformerConfig, TransformerLM
from seqjax.train import loop


def test_policy_dtypes():
    cfg = TransformerConfig(vocab_size=64, num_layers=1, num_heads=2, d_model=32, max_len=16,
                            dtype="bfloat16")  # fmt: skip
    model = TransformerLM(cfg)
    tokens = jnp.zeros((2, 16), jnp.int32)
    params = model.init(jax.random.PRNGKey(0), tokens)["params"]
    assert {x.dtype for x in jax.tree.leaves(params)} == {jnp.dtype(jnp.float32)}
    _, inter = model.apply({"params": params}, tokens, capture_intermediates=True)
    dtypes = {x.dtype for x in jax.tree.leaves(inter)}
    assert jnp.dtype(jnp.bfloat16) in dtypes  # compute really is bf16 somewhere
    assert model.apply({"params": params}, tokens).dtype == jnp.float32  # logits


@pytest.mark.slow  # two 40-step runs (~35 s); `python -m pytest -m slow`
def test_bf16_run_matches_f32_loss(helpers, corpus, tmp_path):
    finals = {}
    for dtype in ("float32", "bfloat16"):
        config = helpers.tiny_config(corpus, **{"train.num_steps": 40, "model.dtype": dtype})
        loop.train_and_evaluate(config, str(tmp_path / dtype))
        losses = helpers.losses(tmp_path / dtype)
        finals[dtype] = float(np.mean([losses[s][0] for s in range(36, 41)]))
        assert all(np.isfinite(v[0]) for v in losses.values())
    assert abs(finals["bfloat16"] - finals["float32"]) < 0.05, finals
