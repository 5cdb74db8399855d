"""Any pattern ("flex"): the block table visits exactly the needed blocks, and both engines
equal dense attention with the pattern as a mask, in values and gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax import attention
from seqjax.attention import flex

FLEX = attention.get("flex")


def _inputs(b, t, h, d, seed=0):
    ks = jax.random.split(jax.random.PRNGKey(seed), 4)
    return [jax.random.normal(kk, (b, t, h, d), jnp.float32) for kk in ks]


def _vg(fn, q, k, v, ct):
    def loss(q, k, v):
        return jnp.vdot(fn(q, k, v), ct)

    return jax.value_and_grad(loss, argnums=(0, 1, 2))(q, k, v)


def _close(a, b, tol=2e-5):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=tol, rtol=tol)


PATTERN_CASES = [
    dict(pattern="sliding_window", window=9),
    dict(pattern="dilated", window=4, dilation=3),
    dict(pattern="global_tokens", window=5, num_global=3),
    dict(pattern="bigbird", window=1, num_global=1, num_random=1, seed=3),
]


@pytest.mark.parametrize(
    "options,causal", list(zip(PATTERN_CASES, [False, True, False, True])), ids=str
)
def test_blocksparse_engine_equals_masked(options, causal):
    b, t, h, d = 2, 72, 2, 8  # 72: the last block is partial
    q, k, v, ct = _inputs(b, t, h, d)
    mask = jnp.arange(t)[None, :] < jnp.array([[t], [t - 7]])

    def run(impl):
        return _vg(
            lambda q, k, v: FLEX(
                q, k, v, causal=causal, mask=mask, implementation=impl, block_size=16, **options
            ),
            q,
            k,
            v,
            ct,
        )

    _close(run("blocksparse"), run("masked"))


def test_pallas_engine_equals_masked():
    q, k, v, ct = _inputs(1, 64, 2, 16, seed=1)
    options = dict(pattern="sliding_window", window=7, block_size=16, causal=True)

    def run(impl):
        return _vg(lambda q, k, v: FLEX(q, k, v, implementation=impl, **options), q, k, v, ct)

    _close(run("pallas"), run("masked"))


def test_table_visits_only_blocks_with_a_visible_pair():
    """A sliding window of 16 at T = 1024, blocks of 64: each query block sees <= 3 blocks."""
    pattern = flex.make_pattern("sliding_window", window=16)
    table, count, pairs = flex.block_table(pattern, None, 1024, 1024, 64, 64, False, 0)
    assert count.max() == 3 and count.min() == 2
    assert pairs == 3 * 16 - 2  # vs 256 pairs for dense
    for i in range(16):
        assert set(table[i, : count[i]]) == {j for j in (i - 1, i, i + 1) if 0 <= j < 16}
    _, causal_count, _ = flex.block_table(pattern, None, 1024, 1024, 64, 64, True, 0)
    assert causal_count[0] == 1 and causal_count[1:].tolist() == [2] * 15


@pytest.mark.parametrize(
    "kind,options", [("strided", dict(stride=8)), ("fixed", dict(stride=8, c=2))]
)
def test_sparse_transformer_patterns_are_instances(kind, options):
    """flex(pattern=strided|fixed) == sparse_strided|sparse_fixed (Child et al. 2019)."""
    q, k, v, ct = _inputs(1, 64, 2, 8, seed=2)
    sparse = attention.get(f"sparse_{kind}")
    for causal in (True, False):
        want = sparse(q, k, v, causal=causal, implementation="masked", **options)
        got = FLEX(q, k, v, causal=causal, pattern=kind, block_size=16, **options)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-5)


def test_user_mask_function_and_block_mask():
    q, k, v, _ = _inputs(1, 48, 1, 8, seed=4)

    def every_other_key(qi, ki):
        return (ki % 2 == 0) | (qi == ki)

    got = FLEX(q, k, v, mask_fn=every_other_key, block_size=16)
    want = FLEX(q, k, v, mask_fn=every_other_key, block_size=16, implementation="masked")
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-5)
    layout = np.eye(3, dtype=bool)
    got = FLEX(q, k, v, block_mask=layout, block_size=16)
    blocks = [attention.get("dense")(q[:, i : i + 16], k[:, i : i + 16], v[:, i : i + 16])
              for i in (0, 16, 32)]  # fmt: skip
    np.testing.assert_allclose(np.asarray(got), np.asarray(jnp.concatenate(blocks, 1)), atol=2e-5)


@pytest.mark.parametrize(
    "options,match",
    [
        (dict(pattern="wavy"), "valid: sliding_window"),
        (dict(pattern="sliding_window", window=0), "window >= 1"),
        (dict(pattern="fixed", stride=4, c=9), "c <= stride"),
        (dict(pattern="sliding_window", window=2, implementation="magic"), "implementation"),
        (dict(), "exactly one of pattern"),
    ],
)
def test_bad_options_name_the_option(options, match):
    q, k, v, _ = _inputs(1, 32, 1, 8)
    with pytest.raises(ValueError, match=match):
        FLEX(q, k, v, block_size=16, **options)


# ---------------------------------------------------------------- absolute positions (T < S)


def _one_hot_values(s, d=16):
    """q = 0 and v[j] = e_j: the output row is the attention distribution over the keys."""
    q = jnp.zeros((1, 1, 1, d))
    k = jax.random.normal(jax.random.PRNGKey(0), (1, s, 1, d))
    v = jnp.eye(s, d)[None, :, None, :]
    return q, k, v


@pytest.mark.parametrize("impl", ["masked", "blocksparse", "pallas", "splash"])
def test_one_query_after_nine_positions_sees_the_last_window(impl):
    """Issue 28: one query at position 9 with a sliding window of 2 sees keys [7, 8, 9]
    (it saw [0, 1, 2] when the pattern was evaluated at the raw query index)."""
    q, k, v = _one_hot_values(10)
    out = FLEX(q, k, v, causal=True, pattern="sliding_window", window=2, block_size=16,
               implementation=impl)  # fmt: skip
    np.testing.assert_allclose(np.asarray(out[0, 0, 0, :10]), [0] * 7 + [1 / 3] * 3, atol=1e-6)


DECODE_CASES = [
    dict(pattern="sliding_window", window=5),
    dict(pattern="dilated", window=3, dilation=2),
    dict(pattern="global_tokens", window=3, num_global=2),
    dict(pattern="strided", stride=6),
]


@pytest.mark.parametrize("options", DECODE_CASES, ids=lambda o: o["pattern"])
def test_cached_decoding_equals_the_full_forward(options):
    """Query i against the cache of keys 0..i (T = 1, S = i + 1) is row i of the full causal
    forward pass (blocksparse engine), at the first position, at block edges and inside
    blocks (the pattern's block table differs at each)."""
    q, k, v, _ = _inputs(1, 24, 2, 8, seed=5)
    full = FLEX(q, k, v, causal=True, block_size=8, **options)
    for i in (0, 7, 8, 13, 23):
        row = FLEX(
            q[:, i : i + 1], k[:, : i + 1], v[:, : i + 1], causal=True, block_size=8, **options
        )
        np.testing.assert_allclose(np.asarray(row[:, 0]), np.asarray(full[:, i]), atol=2e-5)


@pytest.mark.parametrize("impl", ["blocksparse", "masked"])
def test_bigbird_queries_after_a_cache_take_the_last_rows_of_the_layout(impl):
    """BigBird with the last block's queries only (S - T = a block multiple) equals those rows
    of the full forward; an unaligned cache is refused with the reason."""
    q, k, v, _ = _inputs(1, 48, 2, 8, seed=6)
    opts = dict(pattern="bigbird", window=0, num_global=1, num_random=1, seed=2, block_size=8)
    full = FLEX(q, k, v, causal=True, implementation=impl, **opts)
    last = FLEX(q[:, 40:], k, v, causal=True, implementation=impl, **opts)
    np.testing.assert_allclose(np.asarray(last), np.asarray(full[:, 40:]), atol=2e-5)
    with pytest.raises(ValueError, match="multiple of block_size=8"):
        FLEX(q[:, 43:], k, v, causal=True, **opts)


# ---------------------------------------------------------------- BigBird layout


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("num_global", [1, 2, 3])
def test_bigbird_layout_properties(causal, num_global):
    """google-research/bigbird's layout: the first ceil(g/2) and last floor(g/2) blocks are
    global, and every other row has its band plus exactly r random blocks outside the band
    and the globals (fewer only where fewer exist)."""
    n, w, r = 16, 1, 3
    layout = flex.bigbird_block_mask(
        n, n, window=w, num_global=num_global, num_random=r, seed=7, causal=causal
    )
    first, last = -(-num_global // 2), num_global // 2
    glob = (np.arange(n) < first) | (np.arange(n) >= n - last)
    tri = np.tril(np.ones((n, n), bool)) if causal else np.ones((n, n), bool)
    assert (layout[glob] == tri[glob]).all()  # global rows see every (allowed) key
    assert (layout[:, glob] == tri[:, glob]).all()  # global columns are seen by every row
    for i in np.nonzero(~glob)[0]:
        band = np.abs(np.arange(n) - i) <= w
        assert (layout[i, band] == tri[i, band]).all()
        outside = ~band & ~glob & tri[i]
        assert layout[i, outside].sum() == min(r, outside.sum())
    assert not (layout & ~tri).any()
    # Seeded: the same layout every call; another seed, another layout.
    again = flex.bigbird_block_mask(
        n, n, window=w, num_global=num_global, num_random=r, seed=7, causal=causal
    )
    other = flex.bigbird_block_mask(
        n, n, window=w, num_global=num_global, num_random=r, seed=8, causal=causal
    )
    assert (again == layout).all() and (other != layout).any()


# ------------------------------------------------- BigBird per head and per layer (issue 40)


def test_bigbird_random_blocks_differ_per_head_and_layer_with_r_per_row():
    """google-research/bigbird draws the random blocks per head
    (``bigbird_block_rand_mask_with_head``) and seeds each layer differently: the heads'
    layouts and the layers' layouts differ, and every layout keeps exactly r random blocks
    per non-global row outside its band and the globals."""
    n, w, g, r, h = 16, 1, 2, 2, 4
    kw = dict(window=w, num_global=g, num_random=r, seed=5, num_heads=h)
    layer0 = flex.bigbird_block_mask(n, n, layer=0, **kw)
    layer1 = flex.bigbird_block_mask(n, n, layer=1, **kw)
    assert layer0.shape == (h, n, n)
    for a in range(h):
        for b in range(a + 1, h):
            assert (layer0[a] != layer0[b]).any(), (a, b)
    assert all((layer0[x] != layer1[x]).any() for x in range(h))
    glob = (np.arange(n) < 1) | (np.arange(n) >= n - 1)
    for layout in (*layer0, *layer1):
        for i in np.nonzero(~glob)[0]:
            band = np.abs(np.arange(n) - i) <= w
            assert layout[i, band].all() and layout[i, glob].all()
            assert layout[i, ~band & ~glob].sum() == r
    # One layout (num_heads=None) is the first head's of the same draw; seeded.
    one = flex.bigbird_block_mask(n, n, window=w, num_global=g, num_random=r, seed=5)
    assert (one == layer0[0]).all()
    assert (flex.bigbird_block_mask(n, n, layer=0, **kw) == layer0).all()


@pytest.mark.parametrize("impl", ["blocksparse", "masked"])
def test_bigbird_identical_heads_give_different_outputs(impl):
    """Four identical heads as input: each head attends to its own random blocks, so the
    four outputs differ (they were equal when one layout served every head); each head
    equals masked attention under its own layout, in values and gradients."""
    b, t, d, bs = 1, 64, 8, 8
    q1, k1, v1, ct = _inputs(b, t, 1, d, seed=3)
    q, k, v = (jnp.tile(x, (1, 1, 4, 1)) for x in (q1, k1, v1))
    ct = jnp.tile(ct, (1, 1, 4, 1))
    opts = dict(pattern="bigbird", window=1, num_global=1, num_random=2, block_size=bs, seed=1)
    out = FLEX(q, k, v, implementation=impl, **opts)
    for a in range(4):
        for c in range(a + 1, 4):
            assert float(jnp.abs(out[:, :, a] - out[:, :, c]).max()) > 1e-3, (a, c)
    layouts = flex.bigbird_block_mask(
        t // bs, t // bs, window=1, num_global=1, num_random=2, seed=1, num_heads=4
    )
    elem_HTS = jnp.asarray(np.repeat(np.repeat(layouts, bs, 1), bs, 2))
    got = _vg(lambda q, k, v: FLEX(q, k, v, implementation=impl, **opts), q, k, v, ct)
    want = _vg(lambda q, k, v: _masked_per_head(q, k, v, elem_HTS), q, k, v, ct)
    _close(got, want)


def _masked_per_head(q, k, v, elem_HTS):
    """Softmax attention with a per-head element mask ``[H, T, S]`` (the ground truth)."""
    logits = jnp.einsum("bthd,bshd->bhts", q, k) / np.sqrt(q.shape[-1])
    logits = jnp.where(elem_HTS[None], logits, -jnp.inf)
    return jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(logits, axis=-1), v)


def test_bigbird_layers_of_a_model_draw_their_own_blocks():
    """The model folds its layer index into the seed (``layers.with_layer_index``): two
    layers of a flex-BigBird model get layer 0 and 1, so their layouts differ."""
    from seqjax.models import layers

    opts = layers.freeze_options(dict(pattern="bigbird", num_random=1, seed=4))
    got = [dict(layers.with_layer_index("flex", opts, i)[1])["layer"] for i in range(3)]
    assert got == [0, 1, 2]
    given = layers.freeze_options(dict(pattern="bigbird", layer=7))
    assert dict(layers.with_layer_index("flex", given, 2)[1])["layer"] == 7
    assert layers.with_layer_index("dense", (), 3) == ("dense", ())
    with pytest.raises(ValueError, match="layer must be an integer >= 0"):
        attention.spec("flex").validate(dict(pattern="bigbird", layer=-1), 64)


def test_bigbird_per_head_on_the_pallas_kernels_and_with_alibi():
    """The per-head calls run the Pallas kernels (interpret mode here) and equal the masked
    ground truth in values and gradients; a per-head ALiBi bias (each call its head's slope)
    equals it too (``pallas`` then runs ``blocksparse``: the sliced bias has no kernel form)."""
    from seqjax.attention import score_mod

    q, k, v, ct = _inputs(1, 64, 4, 16, seed=5)
    opts = dict(pattern="bigbird", window=1, num_global=1, num_random=2, block_size=16, layer=3)

    def run(impl, **kw):
        return _vg(lambda q, k, v: FLEX(q, k, v, implementation=impl, **opts, **kw), q, k, v, ct)

    _close(run("pallas"), run("masked"))
    alibi = score_mod.alibi(4, causal=False, q_offset=0)
    _close(run("pallas", score_mod=alibi), run("masked", score_mod=alibi))
