"""TPU splash attention with seqjax's patterns (Pallas interpret mode off TPU) equals the
dense reference with the pattern as a mask, in values and gradients."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax import attention
from tests.conftest import require_devices


def _inputs(b, t, h, d, seed=0):
    ks = jax.random.split(jax.random.PRNGKey(seed), 4)
    return [jax.random.normal(kk, (b, t, h, d), jnp.float32) for kk in ks]


def _vg(fn, q, k, v, ct):
    return jax.value_and_grad(lambda q, k, v: jnp.vdot(fn(q, k, v), ct), argnums=(0, 1, 2))(q, k, v)


def _close(a, b, tol=5e-5):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=tol, rtol=tol)


@pytest.mark.parametrize(
    "name,options,causal",
    [
        ("dense", {}, True),
        ("sparse_fixed", dict(stride=16, c=4, head_mode="split"), True),
        ("flex", dict(pattern="sliding_window", window=20), False),
    ],
)
def test_splash_equals_reference(name, options, causal):
    b, t, h, d = 2, 140, 2, 64  # 140: padded to two 128-row tiles inside
    q, k, v, ct = _inputs(b, t, h, d)
    mask = jnp.arange(t)[None, :] < jnp.array([[t], [t - 30]])
    fn = attention.get(name)
    ref_impl = "reference" if name == "dense" else "masked"

    def run(impl):
        return _vg(
            lambda q, k, v: fn(q, k, v, causal=causal, mask=mask, implementation=impl, **options),
            q,
            k,
            v,
            ct,
        )

    _close(run("splash"), run(ref_impl))


def test_rows_without_a_visible_key_are_zero():
    q, k, v, _ = _inputs(1, 128, 1, 64, seed=1)
    seg = jnp.zeros((1, 128), jnp.int32).at[0, 0].set(5)  # query 0 is alone in segment 5...
    kv_seg = jnp.zeros((1, 128), jnp.int32)  # ...and no key is
    out = attention.get("dense")(q, k, v, segment_ids=(seg, kv_seg), implementation="splash")
    ref = attention.get("dense")(q, k, v, segment_ids=(seg, kv_seg), implementation="reference")
    assert np.all(np.asarray(out[0, 0]) == 0)
    _close(out, ref)


class _TinyAttention(nn.Module):
    """Projections + one splash attention call: the kernel as a model calls it."""

    name_: str
    options: tuple

    @nn.compact
    def __call__(self, x_BTE):
        q, k, v = (nn.DenseGeneral((2, 64), name=n)(x_BTE) for n in ("q", "k", "v"))
        fn = attention.get(self.name_)
        out_BTHD = fn(q, k, v, causal=True, implementation="splash", **dict(self.options))
        return out_BTHD.sum()


@pytest.mark.parametrize(
    "name,options",
    [
        ("dense", ()),
        # The same kernel cache: the other mechanisms in the slow set (~15 s each).
        pytest.param(
            "flex", (("pattern", "sliding_window"), ("window", 16)), marks=pytest.mark.slow
        ),
        pytest.param("sparse_fixed", (("stride", 32), ("c", 8)), marks=pytest.mark.slow),
    ],
)
def test_kernel_cache_survives_the_traces_of_training(name, options):
    """Issue 28: the cached splash kernel was built inside the first trace and held its
    tracers, so the second trace failed (UnexpectedTracerError). Training's order:
    eval_shape(init), jit(init), jit(step), jit(grad), twice with fresh jit objects."""
    model = _TinyAttention(name, options)
    x_BTE = jax.random.normal(jax.random.PRNGKey(0), (1, 128, 8))
    results = []
    for _ in range(2):
        init = lambda: model.init(jax.random.PRNGKey(1), x_BTE)  # noqa: E731
        abstract = jax.eval_shape(init)
        params = jax.jit(init)()
        assert jax.tree.map(jnp.shape, params) == jax.tree.map(lambda a: a.shape, abstract)

        def step(p):
            loss, g = jax.value_and_grad(model.apply)(p, x_BTE)
            return loss, jax.tree.map(lambda a, b: a - 0.1 * b, p, g)

        loss, _ = jax.jit(step)(params)
        grads = jax.jit(jax.grad(model.apply))(params, x_BTE)
        results.append((loss, grads))
    _close(results[0], results[1], tol=0)


@pytest.mark.parametrize(
    "name,options",
    [("dense", {}), ("sparse_fixed", dict(stride=32, c=8, head_mode="split"))],
    ids=["same_mask_heads_split", "per_head_masks"],
)
def test_sharded_equals_unsharded_on_eight_devices(name, options):
    """On a (data 2, fsdp 2, tensor 2) mesh under seqjax's logical-axis rules the kernel runs
    under shard_map (XLA cannot partition a Mosaic kernel): batch over data+fsdp, heads over
    tensor when they share one mask. Values and gradients equal the one-device call."""
    from seqjax.train import sharding

    b, t, h, d = 4, 128, 2, 64
    q, k, v, ct = _inputs(b, t, h, d, seed=3)
    mask = jnp.arange(t)[None, :] < jnp.array([[t], [t - 30], [t - 5], [t]])
    fn = attention.get(name)

    def run(q, k, v):
        return _vg(
            lambda q, k, v: fn(q, k, v, causal=True, mask=mask, implementation="splash", **options),
            q,
            k,
            v,
            ct,
        )

    want = jax.jit(run)(q, k, v)
    require_devices(8)
    mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    with sharding.rules_and_mesh(mesh):
        lowered = jax.jit(run).lower(q, k, v).as_text()
        got = jax.jit(run)(q, k, v)
    assert "shard_map" in lowered or "sdy.manual_computation" in lowered
    _close(got, want)
