"""``auto`` under the traced GPU dispatch never raises and never picks a plain-JAX cliff
(issue 36).

Each call is lowered for ``cuda`` on this CPU machine (``lowering_lib.target``: seqjax's
dispatch sees a GPU). The plain-JAX engines (``blockwise``, the materialized reference) are
replaced by functions that fail the test when traced, so a call passes only if every part
of it lowered to Triton kernels or cuDNN: head dims 80, 96, 8, float32, ALiBi / T5 biases
and attention dropout included.

Legend: B batch, T sequence length, H heads, D head dim.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from seqjax import attention
from seqjax.attention import blockwise, dense, numerics, score_mod
from tests.accelerator import lowering_lib as lib

B, T, H = 2, 256, 2
KERNELS = {lib.TRITON, *lib.CUDNN}


@pytest.fixture
def no_plain_jax(monkeypatch):
    """Tracing a plain-JAX attention engine fails the test."""

    def refuse(name):
        def fn(*args, **kwargs):
            raise AssertionError(f"'auto' on GPU traced the plain-JAX engine {name}")

        return fn

    monkeypatch.setattr(blockwise, "blockwise_attention", refuse("blockwise"))
    monkeypatch.setattr(numerics, "attend", refuse("reference (numerics.attend)"))
    monkeypatch.setattr(numerics, "attend_logits", refuse("reference (numerics.attend_logits)"))


def _lower(fn, d, dtype, *extra):
    x = jax.ShapeDtypeStruct((B, T, H, d), dtype)

    def both(q, k, v, *rest):
        loss = lambda *a: fn(*a).astype(jnp.float32).sum()  # noqa: E731
        n = 3 + len(rest)
        return fn(q, k, v, *rest), jax.grad(loss, argnums=tuple(range(n)))(q, k, v, *rest)

    return {c["target"] for c in lib.custom_calls(lib.export(both, "cuda", x, x, x, *extra))}


MECHANISMS = {
    "dense": dict(),
    "causal": dict(),
    "sparse_strided": dict(stride=16),
    "sparse_fixed": dict(stride=16, c=4),
    "flex": dict(pattern="sliding_window", window=48),
}


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32], ids=["bf16", "f32"])
@pytest.mark.parametrize("d", [8, 80, 96, 64])
@pytest.mark.parametrize("name", MECHANISMS)
def test_auto_lowers_to_kernels_for_odd_head_dims_and_float32(name, d, dtype, no_plain_jax):
    def fn(q, k, v):
        return attention.get(name)(q, k, v, causal=True, **MECHANISMS[name])

    targets = _lower(fn, d, dtype)
    assert targets and targets <= KERNELS, targets
    if dtype == jnp.float32:  # cuDNN takes 16-bit inputs only: the Triton kernels
        assert targets == {lib.TRITON}


@pytest.mark.parametrize("scheme", ["alibi", "t5_bias"])
@pytest.mark.parametrize("name", ["dense", "causal", "flex"])
def test_auto_with_a_positional_bias_lowers_to_the_kernels(name, scheme, no_plain_jax):
    """ALiBi / T5 on a GPU: the Pallas kernels compute the bias (before: ``reference`` or
    ``chunked``)."""

    def fn(q, k, v, tab):
        mod = score_mod.alibi(H) if scheme == "alibi" else score_mod.t5_bias(tab, causal=True)
        return attention.get(name)(q, k, v, causal=True, score_mod=mod, **MECHANISMS[name])

    tab = jax.ShapeDtypeStruct((32, H), jnp.float32)
    assert _lower(fn, 64, jnp.bfloat16, tab) == {lib.TRITON}


@pytest.mark.parametrize("scheme", ["alibi", "t5_bias"])
def test_sparse_strided_with_a_bias_runs_wholly_in_the_kernels(scheme, no_plain_jax):
    """sparse_strided with ALiBi / T5: the band part keeps the bias's kernel form, and the
    column part's remap (positions times l, ``ScoreMod.remap(scale=l)``) keeps it too."""

    def fn(q, k, v, tab):
        mod = score_mod.alibi(H) if scheme == "alibi" else score_mod.t5_bias(tab, causal=True)
        return attention.get("sparse_strided")(q, k, v, causal=True, stride=16, score_mod=mod)

    tab = jax.ShapeDtypeStruct((32, H), jnp.float32)
    assert _lower(fn, 64, jnp.bfloat16, tab) == {lib.TRITON}


def test_sparse_fixed_with_alibi_runs_its_block_part_in_the_kernels():
    """sparse_fixed with ALiBi: the block-diagonal part in the kernels; the gathered summary
    keys' bias (positions through a gather) has no kernel form and runs on plain JAX."""

    def fn(q, k, v):
        return attention.get("sparse_fixed")(
            q, k, v, causal=True, stride=16, c=4, score_mod=score_mod.alibi(H)
        )

    assert lib.TRITON in _lower(fn, 64, jnp.bfloat16)


def test_explicit_cudnn_with_float32_is_one_sentence():
    q = jnp.zeros((1, 16, 1, 64), jnp.float32)
    with lib.target("cuda"), pytest.raises(ValueError) as err:
        dense.dense_attention(q, q, q, implementation="cudnn")
    message = str(err.value)
    assert "\n" not in message
    assert "float32" in message and "'pallas'" in message and "'chunked'" in message


def test_explicit_pallas_above_the_head_dim_limit_is_one_sentence():
    q = jnp.zeros((1, 16, 1, 320), jnp.float32)
    with pytest.raises(ValueError, match=r"head dim 320 is above the kernels' limit"):
        dense.dense_attention(q, q, q, implementation="pallas")


def test_auto_above_every_kernels_head_dim_falls_back_and_runs():
    """D 320: no kernel takes it; ``auto`` on GPU runs a plain-JAX engine (logged), never
    raises."""

    def fn(q, k, v):
        return attention.get("dense")(q, k, v, causal=True)

    x = jax.ShapeDtypeStruct((1, 64, 1, 320), jnp.float32)
    assert not lib.targets(lib.export(fn, "cuda", x, x, x))


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32], ids=["bf16", "f32"])
@pytest.mark.parametrize("name", MECHANISMS)
def test_auto_with_attention_dropout_lowers_to_the_kernels(name, dtype, no_plain_jax):
    """Attention dropout on a GPU: the Pallas kernels draw the counter-based keep mask
    in-kernel (its integer hash lowers through Triton); before, dropout sent every mechanism
    to the plain-JAX engines."""

    def fn(q, k, v):
        return attention.get(name)(
            q, k, v, causal=True, dropout_rate=0.1, dropout_rng=jax.random.PRNGKey(0),
            **MECHANISMS[name],
        )  # fmt: skip

    assert _lower(fn, 64, dtype) == {lib.TRITON}


@pytest.mark.parametrize("name", MECHANISMS)
def test_head_dim_256_in_float32_lowers_with_tiles_within_the_budget(name, no_plain_jax):
    """The heaviest tiles (D 256, float32): every part of every mechanism takes the
    planner's tiles (the budget check in ``pallas_blocks`` raises otherwise)."""

    def fn(q, k, v):
        return attention.get(name)(q, k, v, causal=True, **MECHANISMS[name])

    assert _lower(fn, 256, jnp.float32) == {lib.TRITON}
