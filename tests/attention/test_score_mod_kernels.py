"""Score modifications (ALiBi, T5 bias) in ``flex`` and in the Pallas block-sparse kernels.

Every engine equals a direct materialised implementation written here (softmax of
``q k^T / sqrt(D) + bias`` under the pattern as an explicit mask), in values and in the
gradients of q, k, v and the T5 table; with fewer queries than keys (a KV cache) the rows
equal the full forward's. The kernels run in Pallas interpret mode on CPU (the same kernel
bodies as on a GPU; ``tests/accelerator/test_lowering.py`` lowers them for Triton).

Legend: B batch, T queries, S keys, H heads, D head dim, N buckets.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax.attention import dense, flex, pallas_blocks, score_mod
from tests.attention.test_score_mod import _t5_bucket_direct
from tests.conftest import require_devices

B, H, D, BS = 2, 2, 16, 16
NB, MAXD = 16, 32  # T5 buckets (fewer than the default 32: fewer selects to interpret)
WINDOW = 20
_SLOW = pytest.mark.slow


def _qkv(t, s, seed=0):
    ks = jax.random.split(jax.random.PRNGKey(seed), 4)
    q, k, v = (jax.random.normal(x, (B, n, H, D)) for x, n in zip(ks[:3], (t, s, s)))
    return q, k, v, jax.random.normal(ks[3], (B, t, H, D))


def _mod(scheme, table_NH, causal, q_offset):
    if scheme == "alibi":
        return score_mod.alibi(H, causal=causal, q_offset=q_offset)
    return score_mod.t5_bias(
        table_NH, causal=causal, num_buckets=NB, max_distance=MAXD, q_offset=q_offset
    )


def _direct_bias(scheme, table_NH, t, s, causal):
    """``[H, T, S]`` from the papers' formulas at absolute query positions ``S - T + i``."""
    i = np.arange(t)[:, None] + (s - t)
    j = np.arange(s)[None, :]
    if scheme == "alibi":  # Press et al. 2022, §3: -m_h (i - j)
        dist = (i - j) if causal else np.abs(i - j)
        return jnp.asarray(-score_mod.alibi_slopes(H)[:, None, None] * dist[None], jnp.float32)
    bucket = np.vectorize(lambda r: _t5_bucket_direct(int(r), causal, NB, MAXD))(j - i)
    return jnp.moveaxis(table_NH[bucket], -1, 0)


def _direct(q, k, v, table_NH, *, scheme, causal, allowed_TS):
    t, s = q.shape[1], k.shape[1]
    logits = jnp.einsum("bthd,bshd->bhts", q, k) / np.sqrt(D)
    logits = logits + _direct_bias(scheme, table_NH, t, s, causal)[None]
    ok = allowed_TS & ((np.arange(s)[None, :] <= np.arange(t)[:, None] + s - t) | (not causal))
    logits = jnp.where(ok[None, None], logits, -jnp.inf)
    return jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(logits, -1), v)


def _pattern_TS(pattern, t, s, **opts):
    """The pattern at absolute positions, as flex evaluates it (numpy)."""
    fn = flex.make_pattern(pattern, **opts)
    return np.asarray(fn(np.arange(t)[:, None] + s - t, np.arange(s)[None, :]))


def _grads(fn, q, k, v, table_NH, w):
    def loss(q, k, v, tab):
        return (fn(q, k, v, tab) * w).sum()

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3)))(q, k, v, table_NH)


def _assert_close(got, want, atol=2e-5):
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=atol)


CASES = [  # implementation, scheme, causal, pattern options
    ("pallas", "alibi", True, dict(pattern="sliding_window", window=WINDOW)),
    ("pallas", "t5_bias", False, dict(pattern="dilated", window=10, dilation=2)),
    ("blocksparse", "t5_bias", True, dict(pattern="sliding_window", window=WINDOW)),
    ("masked", "alibi", False, dict(pattern="dilated", window=10, dilation=2)),
    pytest.param(
        "pallas", "t5_bias", True, dict(pattern="sliding_window", window=WINDOW), marks=_SLOW
    ),  # fmt: skip
    pytest.param(
        "pallas", "alibi", False, dict(pattern="dilated", window=10, dilation=2), marks=_SLOW
    ),  # fmt: skip
    pytest.param(
        "blocksparse", "alibi", False, dict(pattern="dilated", window=10, dilation=2), marks=_SLOW
    ),  # fmt: skip
    pytest.param(
        "masked", "t5_bias", True, dict(pattern="sliding_window", window=WINDOW), marks=_SLOW
    ),  # fmt: skip
]


@pytest.mark.parametrize("implementation,scheme,causal,opts", CASES)
def test_flex_equals_direct_values_and_grads(implementation, scheme, causal, opts):
    """40 positions in blocks of 16 (the last one padded); gradients of q, k, v and table."""
    t = 40
    q, k, v, w = _qkv(t, t)
    table_NH = jax.random.normal(jax.random.PRNGKey(7), (NB, H))
    allowed = _pattern_TS(
        opts["pattern"], t, t, **{n: x for n, x in opts.items() if n != "pattern"}
    )

    def engine(q, k, v, tab):
        return flex.flex_attention(
            q, k, v, causal=causal, block_size=BS, implementation=implementation,
            score_mod=_mod(scheme, tab, causal, 0), **opts,
        )  # fmt: skip

    def direct(q, k, v, tab):
        return _direct(q, k, v, tab, scheme=scheme, causal=causal, allowed_TS=allowed)

    _assert_close(_grads(engine, q, k, v, table_NH, w), _grads(direct, q, k, v, table_NH, w))


@pytest.mark.parametrize(
    "implementation,scheme",
    [
        ("pallas", "alibi"),
        ("blocksparse", "t5_bias"),
        pytest.param("pallas", "t5_bias", marks=_SLOW),
        pytest.param("blocksparse", "alibi", marks=_SLOW),
    ],
)
def test_flex_with_a_cache_equals_full_forward(implementation, scheme):
    """Decoding: the last T = 1 and T = 9 queries over S cached keys (q_offset = S - T)
    equal those rows of the full forward; pattern and bias both at absolute positions."""
    s = 40
    q, k, v, _ = _qkv(s, s, seed=2)
    table_NH = jax.random.normal(jax.random.PRNGKey(8), (NB, H))
    opts = dict(pattern="sliding_window", window=WINDOW, block_size=BS)

    def run(q, k, v):
        t, n = q.shape[1], k.shape[1]
        mod = _mod(scheme, table_NH, True, n - t)
        return flex.flex_attention(
            q, k, v, causal=True, implementation=implementation, score_mod=mod, **opts
        )

    full = jax.jit(run)(q, k, v)
    for t, n in ((1, 33), (9, s)):  # one new token after 32; the last 9 of 40 at once
        got = jax.jit(run)(q[:, n - t : n], k[:, :n], v[:, :n])
        np.testing.assert_allclose(got, full[:, n - t : n], atol=2e-5)


def test_dense_pallas_cache_with_a_traced_offset_equals_reference():
    """The kernels read the query offset from an input: a fixed-size cache (48 slots, the
    slots after the token masked) with the offset traced under jit, as a decoding step."""
    s = 48
    q, k, v, _ = _qkv(1, s, seed=3)

    @functools.partial(jax.jit, static_argnums=1)
    def step(index, implementation):
        mask = (jnp.arange(s) <= index)[None].repeat(B, 0)
        return dense.dense_attention(
            q, k, v, mask=mask, implementation=implementation, block_q=16, block_k=16,
            score_mod=score_mod.alibi(H, causal=True, q_offset=index),
        )  # fmt: skip

    for index in (5, 30):
        got = step(jnp.int32(index), "pallas")
        np.testing.assert_allclose(got, step(jnp.int32(index), "reference"), atol=2e-5)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("nb,maxd", [(8, 20), (16, 64), (64, 256)])
def test_t5_thresholds_equal_the_formula(causal, nb, maxd):
    """The integer thresholds the kernels use equal Mesh TensorFlow's log formula."""
    rel = np.arange(-2 * maxd, 2 * maxd)
    got = score_mod.t5_bucket(jnp.asarray(rel), causal=causal, num_buckets=nb, max_distance=maxd)
    np.testing.assert_array_equal(got, [_t5_bucket_direct(int(r), causal, nb, maxd) for r in rel])


def test_kernel_table_gradient_sharded_equals_unsharded():
    """On a (data 2, fsdp 2, tensor 2) mesh the kernels run under shard_map over the batch;
    the T5 table's gradient (summed per device) equals the one-device gradient."""
    from seqjax.train import sharding

    b, t = 4, 32
    ks = jax.random.split(jax.random.PRNGKey(4), 4)
    q, k, v, w = (jax.random.normal(x, (b, t, H, D)) for x in ks)
    table_NH = jax.random.normal(jax.random.PRNGKey(9), (8, H))
    table, count, _ = flex.block_table(
        flex.make_pattern("sliding_window", window=WINDOW), None, t, t, BS, BS, True, 0
    )

    def fn(q, k, v, tab):
        mod = score_mod.t5_bias(tab, causal=True, num_buckets=8, max_distance=16)
        return pallas_blocks.block_sparse_attention(
            q, k, v, table=table, count=count, block_q=BS, block_k=BS, causal=True,
            score_mod=mod,
        )  # fmt: skip

    want = _grads(fn, q, k, v, table_NH, w)
    require_devices(8)
    mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    with sharding.rules_and_mesh(mesh):
        got = _grads(fn, q, k, v, table_NH, w)
    _assert_close(got, want)


# --- Where a bias cannot go -------------------------------------------------------------


def test_refusals_name_the_way_out(monkeypatch):
    q, k, v, _ = _qkv(32, 32)
    opts = dict(pattern="sliding_window", window=8, block_size=BS, causal=True)
    with pytest.raises(ValueError, match="splash attention has no bias input.*'blocksparse'"):
        flex.flex_attention(q, k, v, implementation="splash", score_mod=score_mod.alibi(H), **opts)
    with pytest.raises(ValueError, match="q_offset=0 must equal S - T = 24"):
        flex.flex_attention(q[:, 24:], k, v, score_mod=score_mod.alibi(H), **opts)
    remapped = score_mod.alibi(H).remap(heads=(1, 0))
    with pytest.raises(ValueError, match="no kernel form"):
        flex.flex_attention(q, k, v, implementation="pallas", score_mod=remapped, **opts)
    with pytest.raises(ValueError, match=r"implementation='splash'.*in \('auto'"):
        score_mod.check_supported("alibi", (("flex", (("implementation", "splash"),)),))
    for name in ("flex", "local", "sparse_strided", "dense"):
        score_mod.check_supported("t5_bias", ((name, (("implementation", "pallas"),)),))


def test_flex_auto_on_tpu_runs_blocksparse(monkeypatch):
    """``auto`` would be splash on a TPU: with a bias it runs the plain-JAX engine."""
    q, k, v, _ = _qkv(32, 32)
    calls = []
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    monkeypatch.setattr(flex.splash, "splash_attention", lambda *a, **kw: calls.append(1))
    mod = score_mod.alibi(H, causal=True)
    opts = dict(pattern="sliding_window", window=8, block_size=BS, causal=True, score_mod=mod)
    got = flex.flex_attention(q, k, v, **opts)
    assert not calls
    np.testing.assert_allclose(got, flex.flex_attention(q, k, v, implementation="masked",
                                                        **opts), atol=2e-5)  # fmt: skip


@_SLOW
def test_model_with_flex_and_t5_bias_pallas_equals_masked():
    """A one-layer LM on flex: the T5 table's gradient through the kernels equals the
    materialised one (the config check accepts flex with a score bias)."""
    from seqjax.models.transformer import TransformerConfig, TransformerLM

    def model(implementation):
        opts = (("pattern", "sliding_window"), ("window", 8), ("block_size", BS))
        cfg = TransformerConfig(
            vocab_size=11, num_layers=1, num_heads=H, d_model=2 * D, max_len=32,
            positional="t5_bias",
            attention=(("flex", (*opts, ("implementation", implementation))),),
        )  # fmt: skip
        return TransformerLM(cfg)

    tok = jax.random.randint(jax.random.PRNGKey(1), (B, 32), 0, 11)
    params = model("masked").init(jax.random.PRNGKey(0), tok)["params"]

    def loss(p, implementation):
        return model(implementation).apply({"params": p}, tok).astype(jnp.float32).mean()

    got = jax.jit(jax.value_and_grad(loss), static_argnums=1)(params, "pallas")
    want = jax.jit(jax.value_and_grad(loss), static_argnums=1)(params, "masked")
    _assert_close(got, want, atol=1e-5)


@pytest.mark.parametrize("scheme", ["alibi", "t5_bias"])
def test_sparse_strided_columns_in_the_kernels_equal_masked(scheme):
    """sparse_strided through the kernels with a bias: the column part (strided layout,
    positions times l: ``ScoreMod.remap(scale=l)``) now runs in the kernels too, and equals
    the masked ground truth in values and in the gradients of q, k, v and the T5 table."""
    from seqjax import attention

    t = 64
    q, k, v, w = _qkv(t, t, seed=7)
    table_NH = jax.random.normal(jax.random.PRNGKey(3), (NB, H)) * 0.5
    fn = attention.get("sparse_strided")

    def run(impl):
        return _grads(
            lambda q, k, v, tab: fn(
                q, k, v, causal=True, stride=16, implementation=impl,
                score_mod=_mod(scheme, tab, True, 0),
            ),
            q, k, v, table_NH, w,
        )  # fmt: skip

    _assert_close(run("pallas"), run("masked"))
