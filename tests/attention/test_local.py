"""LRA's block-local attention ("local", a flex pattern): equals dense attention restricted
to same-block pairs, in values and gradients; visits only the diagonal blocks; causality;
padding; option errors.

Legend: B batch, T length, H heads, D head dim, L block_len.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax import attention
from seqjax.attention import dense, flex, local

B, T, H, D = 2, 40, 2, 8  # 40: the last block of 16 is partial


def _qkv(seed=0):
    ks = jax.random.split(jax.random.key(seed), 4)
    return [jax.random.normal(kk, (B, T, H, D), jnp.float32) for kk in ks]


def _dense_block_local(q, k, v, *, block_len, causal, mask):
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    allowed = (i // block_len) == (j // block_len)
    if causal:
        allowed &= j <= i
    valid = jnp.asarray(allowed)[None, None] & mask[:, None, None, :]
    return dense.masked_attention(q, k, v, valid)


@pytest.mark.parametrize("causal", [False, True])
def test_equals_dense_restricted_to_blocks_values_and_gradients(causal):
    q, k, v, ct = _qkv()
    mask = jnp.arange(T)[None, :] < jnp.array([[T], [T - 5]])
    fn = attention.get("local")

    def vg(f):
        return jax.value_and_grad(lambda q, k, v: jnp.vdot(f(q, k, v), ct), argnums=(0, 1, 2))(
            q, k, v
        )

    got = vg(lambda q, k, v: fn(q, k, v, block_len=16, causal=causal, mask=mask))
    want = vg(lambda q, k, v: _dense_block_local(q, k, v, block_len=16, causal=causal, mask=mask))
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5)


def test_block_table_holds_only_the_diagonal_blocks():
    table, count, pairs = flex.block_table(local.BlockLocal(16), None, 64, 64, 16, 16, False, 0)
    assert pairs == 4 and list(count) == [1, 1, 1, 1]
    np.testing.assert_array_equal(table[:, 0], np.arange(4))


def test_outputs_independent_of_other_blocks():
    q, k, v, _ = _qkv(1)
    fn = attention.get("local")
    out = fn(q, k, v, block_len=16)
    out2 = fn(q, k.at[:, 16:].add(5.0), v.at[:, 16:].add(-3.0), block_len=16)
    np.testing.assert_array_equal(out[:, :16], out2[:, :16])
    assert float(jnp.abs(out[:, 16:] - out2[:, 16:]).max()) > 1e-3


@pytest.mark.parametrize("bad", [0, -2, 3.0, None])
def test_block_len_must_be_positive(bad):
    spec = attention.spec("local")
    with pytest.raises(ValueError, match="block_len"):
        spec.validate({"block_len": bad}, T)
    q, k, v, _ = _qkv()
    with pytest.raises(ValueError, match="block_len"):
        spec.fn(q, k, v, block_len=bad)
