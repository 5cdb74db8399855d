"""Block-sparse and flex patterns on the ring (``seqjax.attention.ring_sparse``), on
sub-meshes of 8 fake CPU devices.

Values and gradients equal one device's execution of the same mechanism (sparse_strided,
sparse_fixed, flex sliding window / Longformer global tokens / BigBird, local; causal and
not; padding; packed segments; axis sizes 2, 3, 4; contiguous and zigzag placement). The
static schedule skips ring steps: a narrow window runs 2 (causal) or 3 (bidirectional) of
n steps, with that many fewer ``ppermute``s in the program, and idle devices take the empty
branch. A few training steps of a flex model on sequence=4 give one device's losses.

Legend: B batch, T length, H heads, D head dim, n sequence-axis size.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from seqjax.attention import registry, ring, ring_sparse
from tests.conftest import require_devices
from tests.train.conftest import corpus, tiny_config  # noqa: F401 (fixture)

WINDOW = dict(pattern="sliding_window", window=3, block_size=4)


def _mesh(n: int):
    require_devices(n)
    return jax.make_mesh(
        (1, n), ("data", "sequence"), axis_types=(AxisType.Auto,) * 2, devices=jax.devices()[:n]
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


def _value_and_grads(fn, qkv, g):
    out, vjp = jax.vjp(fn, *qkv)
    return out, vjp(g)


def _check(mechanism, options, n, causal, *, masked=True, placement="auto", t=24):
    qkv, g, kw = _inputs(t=t, masked=masked)
    one = registry.get(mechanism)
    want, want_grads = _value_and_grads(
        lambda q, k, v: one(q, k, v, causal=causal, **kw, **options), qkv, g
    )
    mesh = _mesh(n)

    def ringed(q, k, v):
        return ring_sparse.ring_sparse_attention(
            q, k, v, mechanism=mechanism, causal=causal, placement=placement, **kw, **options
        )

    with jax.set_mesh(mesh):
        sh = NamedSharding(mesh, P("data", "sequence"))
        args = [jax.device_put(x, sh) for x in (*qkv, g)]
        got, got_grads = jax.jit(lambda q, k, v, g: _value_and_grads(ringed, (q, k, v), g))(*args)
    np.testing.assert_allclose(got, want, atol=2e-6, rtol=2e-5)
    for got_x, want_x in zip(got_grads, want_grads, strict=True):
        np.testing.assert_allclose(got_x, want_x, atol=1e-5, rtol=1e-4)


BIGBIRD = dict(pattern="bigbird", window=1, num_global=1, num_random=1, block_size=4, seed=1)
LONGFORMER = dict(pattern="global_tokens", window=2, num_global=2, block_size=4)
STRIDED = dict(stride=4, block_size=4)
FIXED = dict(stride=6, c=2, block_size=2)


@pytest.mark.parametrize(
    "mechanism,options,n,causal",
    [
        ("flex", WINDOW, 4, True),
        ("flex", BIGBIRD, 3, False),
        ("sparse_strided", STRIDED, 3, True),  # zigzag placement (auto)
        ("sparse_fixed", FIXED, 2, False),
        pytest.param("flex", WINDOW, 3, False, marks=pytest.mark.slow),
        pytest.param("flex", BIGBIRD, 4, True, marks=pytest.mark.slow),
        pytest.param("flex", LONGFORMER, 2, False, marks=pytest.mark.slow),
        pytest.param("flex", LONGFORMER, 3, True, marks=pytest.mark.slow),
        pytest.param("sparse_strided", STRIDED, 2, False, marks=pytest.mark.slow),
        pytest.param("sparse_fixed", FIXED, 4, True, marks=pytest.mark.slow),
        pytest.param(
            "sparse_fixed", dict(FIXED, head_mode="split"), 3, True, marks=pytest.mark.slow
        ),
        pytest.param("local", dict(block_len=4), 4, False, marks=pytest.mark.slow),
    ],
)
def test_ring_equals_one_device(mechanism, options, n, causal):
    _check(mechanism, options, n, causal)


@pytest.mark.slow
@pytest.mark.parametrize("placement", ["contiguous", "zigzag"])
def test_both_placements_equal_one_device_without_masks(placement):
    _check("flex", BIGBIRD, 2, True, masked=False, placement=placement)


@pytest.mark.slow
def test_a_loop_and_unrolled_steps_together_equal_one_device():
    # window 6 on shards of 4, bidirectional, n = 6: steps 0, 1, 2 (a loop), 4 and 5
    options = dict(pattern="sliding_window", window=6, block_size=2)
    assert _schedule(options, 6, False, t=24).steps == (0, 1, 2, 4, 5)
    _check("flex", options, 6, False)


@pytest.mark.slow
def test_dropout_gradient_matches_finite_differences():
    """With dropout the ring has no one-device twin (other random stream): its custom VJP
    is checked against central differences of its own forward pass."""
    qkv, _, kw = _inputs()
    rng = jax.random.key(3)

    def loss(q, k, v):
        out = ring_sparse.ring_sparse_attention(
            q, k, v, mechanism="flex", causal=True, dropout_rate=0.25, dropout_rng=rng,
            **BIGBIRD, **kw,
        )  # fmt: skip
        return jnp.sum(jnp.sin(out))

    dirs = [jax.random.normal(jax.random.key(10 + i), x.shape) for i, x in enumerate(qkv)]
    with jax.set_mesh(_mesh(3)):
        f = jax.jit(loss)
        grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(*qkv)
        eps = 1e-2
        plus = f(*(x + eps * d for x, d in zip(qkv, dirs, strict=True)))
        minus = f(*(x - eps * d for x, d in zip(qkv, dirs, strict=True)))
    directional = sum(jnp.vdot(g, d) for g, d in zip(grads, dirs, strict=True))
    np.testing.assert_allclose((plus - minus) / (2 * eps), directional, rtol=2e-2)


def _schedule(options, n, causal, t=64):
    fn, bs = ring_sparse.ring_pattern("flex", options, t=t, num_heads=2, causal=causal)
    return ring_sparse.choose_schedule(fn, t, n, min(bs, t // n), causal)


def test_a_narrow_window_skips_ring_steps_and_idle_devices():
    window = dict(pattern="sliding_window", window=3, block_size=4)
    causal = _schedule(window, 8, True)
    assert causal.steps == (0, 1) and causal.placement == "contiguous"
    assert causal.active[1] == tuple(range(1, 8))  # device 0 has no earlier neighbour
    assert causal.which[1][0] == 0  # ... and takes the idle branch
    assert _schedule(window, 8, False).steps == (0, 1, 7)
    assert _schedule(BIGBIRD, 8, False).steps == tuple(range(8))  # globals touch every shard


def _ppermutes(options, n, causal, t=32) -> int:
    """``ppermute`` equations in the jaxpr of the ring forward + backward."""
    qkv, _, _ = _inputs(t=t, masked=False)

    def loss(q, k, v):
        out = ring_sparse.ring_sparse_attention(q, k, v, mechanism="flex", causal=causal, **options)
        return jnp.sum(out)

    with jax.set_mesh(_mesh(n)):
        text = str(jax.make_jaxpr(jax.grad(loss, argnums=(0, 1, 2)))(*qkv))
    return text.count("ppermute[")


def test_skipped_steps_send_nothing():
    """Unrolled steps: forward k, v per executed step s > 0; backward k, v again and dK, dV
    home. A run of >= ``LOOP_MIN`` consecutive steps is one loop (ppermutes in its body)."""
    n = 4
    assert _ppermutes(WINDOW, n, True) == 6 * 1  # steps 0 and 1 only, of n
    assert _ppermutes(WINDOW, n, False) == 6 * 2  # steps 0, 1 and n - 1
    full = dict(mask_fn=_everything, block_size=4)
    # one loop of n steps: k, v in the forward body; k, v, dK, dV in the backward body,
    # then dK, dV home
    assert _ppermutes(full, n, False) == 2 + 4 + 2
    assert ring_sparse.segments((0, 1, 7)) == [[(0, 0)], [(1, 1)], [(2, 7)]]
    assert ring_sparse.segments((0, 1, 2, 5)) == [[(0, 0), (1, 1), (2, 2)], [(3, 5)]]


def _everything(q, k):
    return (q >= 0) | (k >= 0)


def test_refusals_and_config_problems():
    for name in ring_sparse.MECHANISMS:
        assert ring.refusal(name) is None
    assert "config.mesh.sequence > 1" in ring.refusal("lsh")
    assert "config.mesh.sequence > 1" in ring.refusal("relative")
    problems = ring.sparse_config_problems(["flex"], length=30, n=4, positional="alibi")
    assert "multiple of config.mesh.sequence=4" in problems[0]
    assert "config.model.positional='alibi'" in problems[1]
    assert ring.sparse_config_problems(["dense"], length=30, n=4, positional="alibi") == []
    qkv, _, _ = _inputs(t=30, masked=False)
    with jax.set_mesh(_mesh(4)), pytest.raises(ValueError, match="not a multiple of 4"):
        ring_sparse.ring_sparse_attention(*qkv, mechanism="flex", **WINDOW)
    with jax.set_mesh(_mesh(2)), pytest.raises(ValueError, match="block_size"):
        ring_sparse.ring_sparse_attention(*qkv, mechanism="sparse_strided", stride=4, block_size=3)


def test_config_validation_accepts_patterns_and_checks_the_length(corpus):  # noqa: F811
    from seqjax.train import config_validation

    def problems(**extra):
        config = tiny_config(corpus, **{"model.attention": "flex", **extra})
        config.model.attention_options = {"flex": dict(WINDOW)}
        try:
            config_validation.validate(config, num_devices=8, process_count=1)
        except config_validation.ConfigError as e:
            return str(e)
        return ""

    assert problems(**{"mesh.sequence": 4}) == ""
    msg = problems(**{"mesh.sequence": 4, "data.seq_len": 30})
    assert "config.mesh.sequence=4: the input length 30" in msg
    msg = problems(**{"mesh.sequence": 4, "model.positional": "alibi"})
    assert "config.model.positional='alibi'" in msg


@pytest.mark.slow
def test_training_losses_on_sequence_4_equal_one_device(corpus):  # noqa: F811
    from tests.train.test_sequence_parallel import _losses

    base = {
        "model.attention": "flex",
        "model.attention_options": {"flex": dict(WINDOW, window=5)},
        "train.num_steps": 3,
    }
    want = _losses(tiny_config(corpus, **base))
    got = _losses(tiny_config(corpus, **base, **{"mesh.sequence": 4}))
    np.testing.assert_allclose(got, want, rtol=2e-5)
