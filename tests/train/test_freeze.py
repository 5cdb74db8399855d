"""``config.optimizer.freeze``: optax masking of named parameter subtrees (seqjax.train.optim).

Frozen leaves stay bit-for-bit unchanged over steps (no weight decay, no moments), the others
move; the state builds on a real model's logically boxed parameters; a prefix that matches
nothing is one sentence naming the field.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from seqjax.models import TransformerConfig
from seqjax.models.transformer import TransformerLM
from seqjax.train import defaults, optim


def _opt(**fields):
    o = defaults.optimizer()
    o.update({"schedule": "constant", "warmup_steps": 0, "learning_rate": 0.1, **fields})
    return o


def _model():
    cfg = TransformerConfig(vocab_size=11, d_model=16, num_heads=2, num_layers=2, d_ff=32,
                            max_len=8)  # fmt: skip
    return TransformerLM(cfg)


def test_frozen_leaves_unchanged_others_move_on_boxed_params():
    model = _model()
    x = jnp.arange(8, dtype=jnp.int32)[None] % 11
    boxed = jax.jit(model.init)(jax.random.PRNGKey(0), x)["params"]
    tx, _ = optim.make_optimizer(_opt(freeze=("encoder/block_0", "encoder/embed")), 10)
    jax.eval_shape(tx.init, boxed)  # builds on boxed parameters, as the train state's init does
    params = nn.unbox(boxed)

    def loss(p):
        logits = model.apply({"params": p}, x)
        return -jnp.mean(jax.nn.log_softmax(logits)[..., 3])

    @jax.jit
    def three_steps(p):
        opt_state = tx.init(p)
        for _ in range(3):
            updates, opt_state = tx.update(jax.grad(loss)(p), opt_state, p)
            p = optax.apply_updates(p, updates)
        return p

    new = three_steps(params)
    flat_old = dict(jax.tree_util.tree_flatten_with_path(params)[0])
    flat_new = dict(jax.tree_util.tree_flatten_with_path(new)[0])
    frozen = moved = 0
    for path, old in flat_old.items():
        text = optim._path_text(path)
        same = np.array_equal(np.asarray(old), np.asarray(flat_new[path]))
        if text.startswith(("encoder/block_0/", "encoder/embed/")):
            assert same, text
            frozen += 1
        elif text.startswith("encoder/block_1/"):
            assert not same, text
            moved += 1
    assert frozen >= 5 and moved >= 5


def test_prefix_matching_nothing_is_one_sentence_naming_the_field():
    tx, _ = optim.make_optimizer(_opt(freeze=("encodr",)), 10)
    params = {"encoder": {"w": jnp.ones((2, 2))}, "head": {"b": jnp.ones(2)}}
    with pytest.raises(ValueError, match=r"config\.optimizer\.freeze entry 'encodr' matches no"):
        tx.init(params)


def test_an_empty_prefix_is_refused():
    with pytest.raises(ValueError, match=r"config\.optimizer\.freeze=\('',\) is invalid"):
        optim.make_optimizer(_opt(freeze=("",)), 10)


def test_describe_names_the_frozen_prefixes():
    assert optim.describe(_opt(freeze=("teacher",)), 10).endswith("frozen: teacher")
