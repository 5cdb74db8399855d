"""Context-parallel attention (``seqjax.attention.ring``) on sub-meshes of 8 fake CPU devices.

Values and gradients of ring and all-to-all attention equal single-device ``chunked``
attention (causal and not, key padding, packed segments, axis sizes 2, 3, 4, 6, with a
data axis beside the sequence axis); ``auto`` picks by the heads; the per-device memory of
the compiled attention (forward and backward) falls as 1/n.

Legend: B batch, T length, H heads, D head dim, n sequence-axis size.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from seqjax.attention import dense, ring, ulysses
from tests.conftest import require_devices


def _mesh(n: int, data: int = 1):
    require_devices(n * data)
    devices = jax.devices()[: n * data]
    return jax.make_mesh(
        (data, n), ("data", "sequence"), axis_types=(AxisType.Auto,) * 2, devices=devices
    )


def _inputs(b=2, t=24, h=2, d=8, masked=True):
    kq, kk, kv, kg = jax.random.split(jax.random.key(0), 4)
    q_BTHD, k_BTHD, v_BTHD = (jax.random.normal(x, (b, t, h, d)) for x in (kq, kk, kv))
    g_BTHD = jax.random.normal(kg, (b, t, h, d))
    kw = {}
    if masked:  # the last 5 keys of example 1 are padding; two packed segments
        lengths = jnp.array([t, t - 5])[:, None]
        kw["mask"] = jnp.broadcast_to(jnp.arange(t)[None, :] < lengths, (b, t))
        kw["segment_ids"] = (jnp.arange(t)[None, :] >= t // 3 + 1).astype(jnp.int32) * jnp.ones(
            (b, 1), jnp.int32
        )
    return (q_BTHD, k_BTHD, v_BTHD), g_BTHD, kw


def _value_and_grads(fn, qkv, g, **kw):
    out, vjp = jax.vjp(lambda q, k, v: fn(q, k, v, block_q=4, block_k=4, **kw), *qkv)
    return out, vjp(g)


def _check(impl, n, causal, *, h=2, masked=True, data=1):
    qkv, g, kw = _inputs(h=h, masked=masked)
    want, want_grads = _value_and_grads(dense.chunked_attention, qkv, g, causal=causal, **kw)
    fn = ring.ring_attention if impl == "ring" else ulysses.ulysses_attention
    mesh = _mesh(n, data)
    with jax.set_mesh(mesh):
        sh = NamedSharding(mesh, P("data", "sequence"))
        qkv_sharded = [jax.device_put(x, sh) for x in qkv]
        got, got_grads = jax.jit(
            lambda q, k, v, g: _value_and_grads(fn, (q, k, v), g, causal=causal, **kw)
        )(*qkv_sharded, g)
    np.testing.assert_allclose(got, want, atol=2e-6, rtol=2e-5)
    for got_x, want_x in zip(got_grads, want_grads, strict=True):
        np.testing.assert_allclose(got_x, want_x, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    "n,causal",
    [
        (3, True),
        (4, False),
        (6, True),
        pytest.param(2, True, marks=pytest.mark.slow),
        pytest.param(2, False, marks=pytest.mark.slow),
        pytest.param(3, False, marks=pytest.mark.slow),
        pytest.param(4, True, marks=pytest.mark.slow),
        pytest.param(6, False, marks=pytest.mark.slow),
    ],
)
def test_ring_equals_chunked(n, causal):
    _check("ring", n, causal)


@pytest.mark.parametrize(
    "n,causal",
    [
        (2, True),
        (6, False),
        pytest.param(3, True, marks=pytest.mark.slow),
        pytest.param(4, False, marks=pytest.mark.slow),
        pytest.param(6, True, marks=pytest.mark.slow),
    ],
)
def test_ulysses_equals_chunked(n, causal):
    _check("ulysses", n, causal, h=12)


def test_ring_without_masks_beside_a_data_axis():
    _check("ring", 2, True, masked=False, data=2)


@pytest.mark.slow
def test_ulysses_beside_a_data_axis():
    _check("ulysses", 3, False, h=6, data=2)


def test_auto_picks_ulysses_when_heads_divide_else_ring(caplog):
    assert ring.choose(12, 4, _mesh(4))[0] == "ulysses"
    assert ring.choose(2, 4, _mesh(4))[0] == "ring"
    qkv, _, kw = _inputs(h=6)
    want = dense.chunked_attention(*qkv, causal=True, **kw)
    with jax.set_mesh(_mesh(3)):
        got = jax.jit(lambda q, k, v: dense.causal_attention(q, k, v, block_q=4, block_k=4, **kw))(
            *qkv
        )
    np.testing.assert_allclose(got, want, atol=2e-6, rtol=2e-5)


def test_bad_lengths_and_heads_raise_before_compiling():
    qkv, _, _ = _inputs(t=20, h=2, masked=False)
    with jax.set_mesh(_mesh(4)):
        with pytest.raises(ValueError, match="not a multiple of 8"):
            ring.ring_attention(*qkv, causal=True)
        with pytest.raises(ValueError, match="heads per device"):
            ulysses.ulysses_attention(*_inputs(t=24, h=2, masked=False)[0])
        with pytest.raises(ValueError, match="self-attention"):
            ring.ring_attention(qkv[0][:, :4], qkv[1], qkv[2])


def _per_token_temp_bytes(impl: str, n: int, lengths=(1024, 2048)) -> float:
    """Slope of the compiled per-device temporary memory of attention forward + backward in
    the sequence length (bytes per global token): the part that scales with T, without the
    constant working set of one block pair."""
    fn = ring.ring_attention if impl == "ring" else ulysses.ulysses_attention
    mesh = _mesh(n)

    def loss(q, k, v):
        return jnp.sum(fn(q, k, v, causal=True, block_q=64, block_k=64) ** 2)

    temps = []
    for t in lengths:
        x = jax.ShapeDtypeStruct(
            (1, t, 8, 16), jnp.float32, sharding=NamedSharding(mesh, P(None, "sequence"))
        )
        with jax.set_mesh(mesh):
            compiled = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(x, x, x).compile()
        temps.append(compiled.memory_analysis().temp_size_in_bytes)
    return (temps[1] - temps[0]) / (lengths[1] - lengths[0])


@pytest.mark.parametrize(
    "impl,sizes",
    [("ring", (2, 4)), pytest.param("ulysses", (2, 4, 8), marks=pytest.mark.slow),
     pytest.param("ring", (2, 4, 8), marks=pytest.mark.slow)],
)  # fmt: skip
def test_per_device_attention_memory_falls_as_one_over_n(impl, sizes):
    slopes = {n: _per_token_temp_bytes(impl, n) for n in sizes}
    for small, large in zip(sizes, sizes[1:]):
        ratio = slopes[large] / slopes[small]
        # doubling the devices at least nearly halves what each holds per token
        assert ratio < 1.2 * small / large, (slopes, small, large)


def test_ring_dropout_gradient_matches_finite_differences():
    """With dropout the ring's custom VJP has no chunked twin (other random stream): its
    gradient is checked against central differences of its own forward pass."""
    qkv, _, kw = _inputs(h=2)
    rng = jax.random.key(3)

    def loss(q, k, v):
        out = ring.ring_attention(
            q, k, v, causal=True, dropout_rate=0.25, dropout_rng=rng, block_q=4, block_k=4, **kw
        )
        return jnp.sum(jnp.sin(out))

    dirs = [jax.random.normal(jax.random.key(10 + i), x.shape) for i, x in enumerate(qkv)]
    qkv64 = [x.astype(jnp.float32) for x in qkv]
    with jax.set_mesh(_mesh(3)):
        f = jax.jit(loss)
        grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(*qkv64)
        eps = 1e-2
        plus = f(*(x + eps * d for x, d in zip(qkv64, dirs, strict=True)))
        minus = f(*(x - eps * d for x, d in zip(qkv64, dirs, strict=True)))
    directional = sum(jnp.vdot(g, d) for g, d in zip(grads, dirs, strict=True))
    np.testing.assert_allclose((plus - minus) / (2 * eps), directional, rtol=2e-2)


def test_linformer_runs_sequence_sharded_through_a_psum_of_projections():
    """Linformer's E K and F V contract the sharded sequence: the compiled program sums
    per-shard projections (all-reduce) and never gathers the sequence, and values and
    gradients equal one device."""
    from seqjax.attention import linformer

    b, t, h, d, k = 2, 32, 2, 8, 8
    q, kk, v = (jax.random.normal(jax.random.key(i), (b, t, h, d)) for i in range(3))
    e_KT, f_KT = (jax.random.normal(jax.random.key(5 + i), (k, t)) / 8 for i in range(2))
    mask_BT = jnp.arange(t)[None, :] < jnp.array([[t], [t - 9]])

    def loss(q, kk, v, e_KT, f_KT):
        out = linformer.linformer_attention(
            q, kk, v, mask=mask_BT, k=k, max_len=t, proj_e=e_KT, proj_f=f_KT
        )
        return jnp.sum(jnp.sin(out))

    fn = jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4))
    want = fn(q, kk, v, e_KT, f_KT)
    mesh = _mesh(4)
    sh = NamedSharding(mesh, P(None, "sequence"))
    args = [jax.device_put(x, sh) for x in (q, kk, v, e_KT, f_KT)]
    with jax.set_mesh(mesh):
        compiled = jax.jit(fn).lower(*args).compile()
        got = compiled(*args)
    hlo = compiled.as_text()
    assert "all-reduce(" in hlo and "all-gather(" not in hlo
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    for got_x, want_x in zip(got[1], want[1], strict=True):
        np.testing.assert_allclose(got_x, want_x, atol=1e-5, rtol=1e-4)


def test_without_a_sequence_axis_ring_and_ulysses_are_chunked():
    qkv, _, kw = _inputs(h=2)
    want = dense.chunked_attention(*qkv, causal=True, **kw)
    for impl in ("ring", "ulysses"):
        got = dense.causal_attention(*qkv, implementation=impl, **kw)
        np.testing.assert_allclose(got, want, atol=1e-6)


def test_ring_rows_without_visible_keys_are_zero_with_finite_gradients():
    qkv, g, _ = _inputs(h=2, masked=False)
    mask_BT = jnp.zeros((2, 24), bool).at[1].set(True)  # example 0: no visible key at all
    with jax.set_mesh(_mesh(2)):
        out, grads = jax.jit(
            lambda q, k, v: _value_and_grads(ring.ring_attention, (q, k, v), g, mask=mask_BT)
        )(*qkv)
    np.testing.assert_array_equal(out[0], 0.0)
    assert all(bool(jnp.isfinite(x).all()) for x in grads)
    np.testing.assert_array_equal(grads[0][0], 0.0)
