"""The LM task's chunked cross-entropy (``train.xent_chunk``, ``seqjax.tasks.lm``): the
sums and their gradients w.r.t. every parameter equal the plain form's, with dropout on,
tied and untied output layers, packed rows; the compiled train gradient holds no float32
``[B, T, V]`` logits; the default picks the form by size; bad values are named."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax import tasks
from seqjax.models.transformer import TransformerConfig, TransformerLM
from seqjax.tasks import lm

B, T, V = 2, 12, 29


class _Cfg:  # what ``Task.configure`` reads
    def __init__(self, chunk, packing=False):
        self.data = {"packing": packing}
        self.train = {"xent_chunk": chunk}


def _model(tie=True, dropout=0.1):
    cfg = TransformerConfig(vocab_size=V, num_layers=2, num_heads=2, d_model=16, max_len=T,
                            causal=True, tie_embeddings=tie, dropout_rate=dropout)  # fmt: skip
    model = TransformerLM(cfg)
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, T), jnp.int32))["params"]
    return model, nn.unbox(params)  # as the train step holds them


def _batch(packed=False):
    ks = jax.random.split(jax.random.PRNGKey(3), 2)
    batch = {
        "inputs": jax.random.randint(ks[0], (B, T), 0, V),
        "targets": jax.random.randint(ks[1], (B, T), 0, V),
        "weights": jnp.ones((B, T)).at[1, -3:].set(0.0),
    }
    if packed:
        seg = jnp.array([[1] * 5 + [2] * 7, [1] * 9 + [0] * 3], jnp.int32)
        batch["segment_ids"] = seg
        batch["positions"] = jnp.array([list(range(5)) + list(range(7)), list(range(12))])
    return batch


def _sums_and_grads(task, model, params, batch):
    def loss(p):
        sums, _ = task.batch_sums(model, p, batch, rng=jax.random.PRNGKey(7), train=True)
        return sums["loss_sum"] / sums["weight_sum"], sums

    (_, sums), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
    return sums, grads


@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize("packed", [False, True])
def test_chunked_equals_plain_in_values_and_gradients(tie, packed):
    model, params = _model(tie)
    batch = _batch(packed)
    chunked = lm.TASK.configure(_Cfg(5, packed))
    plain = lm.TASK.configure(_Cfg(0, packed))
    assert chunked.output_layer(model, params, batch)[1:] == ("ve" if tie else "ev", 5)
    assert plain.output_layer(model, params, batch) is None
    got, g_got = _sums_and_grads(chunked, model, params, batch)
    want, g_want = _sums_and_grads(plain, model, params, batch)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-5, err_msg=key)
    flat_got = jax.tree_util.tree_flatten_with_path(g_got)[0]
    flat_want = jax.tree.leaves(g_want)
    assert len(flat_got) == len(flat_want)
    for (path, a), b in zip(flat_got, flat_want):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-6, err_msg=jax.tree_util.keystr(path))
    # The output embedding's gradient is the chunked one (tied: plus the lookup's).
    g_head = g_got["encoder"]["embed"]["embedding"] if tie else g_got["head"]["kernel"]
    assert float(jnp.abs(g_head).max()) > 0


def test_compiled_gradient_has_no_full_logits():
    model, params = _model(tie=True, dropout=0.0)
    batch = _batch()
    task = lm.TASK.configure(_Cfg(4))

    def loss(p, task):
        return task.batch_sums(model, p, batch, rng=None, train=False)[0]["loss_sum"]

    def hlo(task):
        return jax.jit(jax.grad(loss), static_argnums=1).lower(params, task).compile().as_text()

    logits = f"f32[{B},{T},{V}]"
    assert logits not in hlo(task)
    assert logits in hlo(lm.TASK.configure(_Cfg(0)))  # the check can fail


def test_default_chunks_only_large_logits(monkeypatch):
    model, params = _model()
    batch = _batch()
    assert lm.TASK.configure(_Cfg(None)) is lm.TASK  # None: the registered task itself
    assert lm.TASK.output_layer(model, params, batch) is None  # 2 x 12 x 29 floats: plain
    monkeypatch.setattr(lm, "AUTO_BYTES", 4 * B * T * V)
    monkeypatch.setattr(lm.jax, "device_count", lambda: 1)
    assert lm.TASK.output_layer(model, params, batch)[1:] == ("ve", lm.AUTO_CHUNK)
    monkeypatch.setattr(lm.jax, "device_count", lambda: 8)  # a mesh: plain unless asked
    assert lm.TASK.output_layer(model, params, batch) is None
    assert lm.TASK.configure(_Cfg(4)).output_layer(model, params, batch)[1:] == ("ve", 4)
    packed = lm.TASK.configure(_Cfg(None, packing=True))
    assert packed is lm.PACKED and tasks.get("lm") is lm.TASK


@pytest.mark.parametrize(
    "overrides, valid",
    [
        ({"train.xent_chunk": -2}, "None (auto), 0 (plain logits) or tokens per chunk > 0"),
        ({"train.xent_chunk": 64, "model.adaptive.enabled": True}, "None or 0 with model."),
    ],
)
def test_bad_xent_chunk_is_named(overrides, valid):
    from seqjax.configs import char_lm

    config = char_lm.get_config("smoke")
    problems = []
    for key, value in overrides.items():
        node = config
        *parents, leaf = key.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    lm.TASK.validate(config, lambda field, value, want: problems.append((field, value, want)))
    assert any(f == "train.xent_chunk" and valid in w for f, _, w in problems), problems


def test_gradient_lowered_for_cuda_has_no_full_logits():
    """The LM gradient as a GPU runs it (``lowering_lib``: cuDNN attention, bf16 compute),
    lowered for ``cuda`` on this CPU: ``[C, V]`` chunks, no float32 ``[B, T, V]`` logits
    (the model's unused logits are gone before XLA); the plain form has them."""
    from tests.accelerator import lowering_lib

    b, t, v, c = 2, 128, 300, 64
    cfg = TransformerConfig(vocab_size=v, num_layers=1, num_heads=2, d_model=128, max_len=t,
                            causal=True, dtype="bfloat16")  # fmt: skip
    model = TransformerLM(cfg)
    params = nn.unbox(model.init(jax.random.PRNGKey(0), jnp.zeros((1, t), jnp.int32))["params"])
    zeros = jnp.zeros((b, t), jnp.int32)
    batch = {"inputs": zeros, "targets": zeros, "weights": jnp.ones((b, t))}

    def lowered(chunk):
        task = lm.LanguageModel(xent_chunk=chunk)

        def grad(p, batch):
            def loss(p):
                sums, _ = task.batch_sums(model, p, batch, rng=jax.random.PRNGKey(0), train=True)
                return sums["loss_sum"]

            return jax.grad(loss)(p)

        exported = lowering_lib.export(grad, "cuda", params, batch)
        calls = {call["target"] for call in lowering_lib.custom_calls(exported)}
        return exported.mlir_module(), calls

    text, calls = lowered(c)
    assert "__cudnn$fmhaSoftmaxBackward" in calls  # the GPU's attention path was traced
    assert f"{c}x{v}xf32" in text and f"{b}x{t}x{v}xf32" not in text
    assert f"{b}x{t}x{v}xf32" in lowered(0)[0]
