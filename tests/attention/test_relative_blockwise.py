"""Blockwise Transformer-XL relative attention equals the materialized one (values and
gradients w.r.t. q, k, v, r, u and v), skips exactly the fully masked key blocks, is
causal, and gives the same Transformer-XL logits over consecutive segments with memory.

Legend: B batch, T segment length, M memory length, S = M + T, H heads, D head dim.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax.attention import masks as masks_lib
from seqjax.attention import registry, relative, relative_blockwise
from seqjax.configs import common
from seqjax.models import TransformerConfig
from seqjax.models.transformer_xl import TransformerXL
from seqjax.train import config_validation

ARGS = ("q", "k", "v", "r", "r_w_bias", "r_r_bias")


def _inputs(b=2, t=13, m=7, h=2, d=8, clamp_len=-1, seed=0, dtype=jnp.float32):
    """Random q/k/v, u/v biases, and ``r = W_R R`` from the (clamped) sinusoids."""
    s = m + t
    ks = jax.random.split(jax.random.key(seed), 6)
    w_r = jax.random.normal(ks[3], (h * d, h, d)) / np.sqrt(h * d)
    r = jnp.einsum("se,ehd->shd", relative.relative_sinusoid(s, h * d, clamp_len), w_r)
    x = {
        "q": jax.random.normal(ks[0], (b, t, h, d)),
        "k": jax.random.normal(ks[1], (b, s, h, d)),
        "v": jax.random.normal(ks[2], (b, s, h, d)),
        "r": r,
        "r_w_bias": 0.5 * jax.random.normal(ks[4], (h, d)),
        "r_r_bias": 0.5 * jax.random.normal(ks[5], (h, d)),
    }
    return {n: a.astype(dtype) for n, a in x.items()}


def _attend(impl, x, **options):
    return relative.relative_attention(
        x["q"], x["k"], x["v"], r=x["r"], r_w_bias=x["r_w_bias"], r_r_bias=x["r_r_bias"],
        implementation=impl, **options,
    )  # fmt: skip


def _value_and_grads(impl, x, ct, **options):
    def loss(*arrays):
        out = _attend(impl, dict(zip(ARGS, arrays)), **options)
        return jnp.sum(out.astype(jnp.float32) * ct), out

    # One jitted program (eager dispatch of the unrolled blocks would dominate test time).
    grad_fn = jax.jit(jax.grad(loss, argnums=tuple(range(len(ARGS))), has_aux=True))
    grads, out = grad_fn(*(x[n] for n in ARGS))
    return out, dict(zip(ARGS, grads))


def _segments(b, t, m, seed=1):
    """Packed-segment ids for queries (the last T positions) and keys, as a pair."""
    ids = np.sort(np.random.default_rng(seed).integers(0, 3, (b, m + t)), axis=1)
    return jnp.asarray(ids[:, m:]), jnp.asarray(ids)


def _key_mask(b, t, m, seed=2):
    keep = np.random.default_rng(seed).random((b, m + t)) > 0.3
    keep[:, m:] = True  # the segment itself is never padding (as in TransformerXL)
    return jnp.asarray(keep)


CASES = {
    # T = 7 is not a multiple of block_q = 3, S = 12 not one of block_k = 5.
    "causal_memory": dict(t=7, m=5, opts=dict(block_q=3, block_k=5)),
    "no_memory": dict(t=7, m=0, opts=dict(block_q=4, block_k=3)),
    "same_length": dict(t=7, m=5, opts=dict(same_length=True, mem_len=5, block_q=3, block_k=2)),
    "same_length_short": dict(
        t=6, m=5, opts=dict(same_length=True, mem_len=3, block_q=3, block_k=2)
    ),
    "clamp_len": dict(t=7, m=5, clamp_len=4, opts=dict(block_q=3, block_k=5)),
    "key_padding": dict(t=6, m=6, mask=True, opts=dict(block_q=4, block_k=5)),
    "segment_ids": dict(t=6, m=4, segments=True, opts=dict(block_q=3, block_k=4)),
    "block_larger_than_s": dict(t=6, m=5, opts=dict(block_q=64, block_k=64)),
    "one_query_decode_step": dict(t=1, m=9, opts=dict(block_q=4, block_k=4)),
    "unit_blocks": dict(t=3, m=2, opts=dict(block_q=1, block_k=1)),
}


# The cases that add little beyond the others (each compiles a gradient: ~10-15 s on 2 cores).
SLOW_CASES = ("unit_blocks", "same_length_short")


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, marks=pytest.mark.slow) if c in SLOW_CASES else c for c in CASES],
    ids=list(CASES),
)
def test_blockwise_equals_reference_values_and_gradients(case):
    c = CASES[case]
    b, t, m = 2, c["t"], c["m"]
    x = _inputs(b=b, t=t, m=m, clamp_len=c.get("clamp_len", -1))
    opts = dict(c["opts"])
    if c.get("mask"):
        opts["mask"] = _key_mask(b, t, m)
    if c.get("segments"):
        opts["segment_ids"] = _segments(b, t, m)
    ct = jax.random.normal(jax.random.key(9), x["q"].shape)
    want, want_g = _value_and_grads("reference", x, ct, **opts)
    got, got_g = _value_and_grads("blockwise", x, ct, **opts)
    np.testing.assert_allclose(got, want, atol=2e-6, rtol=1e-5)
    for name in ARGS:
        assert float(jnp.abs(want_g[name]).max()) > 0, name  # the gradient is not trivial
        np.testing.assert_allclose(got_g[name], want_g[name], atol=2e-5, rtol=1e-4, err_msg=name)


@pytest.mark.slow
def test_blockwise_bf16_matches_reference():
    x = _inputs(t=13, m=7, dtype=jnp.bfloat16)
    ct = jax.random.normal(jax.random.key(9), x["q"].shape)
    opts = dict(block_q=4, block_k=6, same_length=True, mem_len=9)
    want, want_g = _value_and_grads("reference", x, ct, **opts)
    got, got_g = _value_and_grads("blockwise", x, ct, **opts)
    assert got.dtype == jnp.bfloat16
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), atol=4e-2)
    for name in ARGS:
        g, w = got_g[name].astype(np.float32), want_g[name].astype(np.float32)
        assert got_g[name].dtype == jnp.bfloat16
        np.testing.assert_allclose(g, w, atol=0.1 * float(np.abs(w).max()) + 1e-2, err_msg=name)


def test_changing_future_keys_leaves_earlier_outputs_unchanged():
    """Query i (absolute position M + i) ignores keys after it, value and gradient paths."""
    t, m, i = 12, 5, 6
    x = _inputs(t=t, m=m)
    opts = dict(block_q=4, block_k=4)
    out = _attend("blockwise", x, **opts)
    y = dict(x)
    for name in ("k", "v"):
        y[name] = x[name].at[:, m + i + 1 :].add(3.0)
    out2 = _attend("blockwise", y, **opts)
    np.testing.assert_array_equal(out[:, : i + 1], out2[:, : i + 1])
    assert not np.allclose(out[:, i + 1 :], out2[:, i + 1 :])


@pytest.mark.parametrize("same_length,mem_len", [(False, 0), (True, 4), (True, 9)])
def test_key_block_range_skips_exactly_the_fully_masked_blocks(same_length, mem_len):
    t, m, bq, bk = 11, 9, 3, 4
    s = m + t
    valid = masks_lib.dense_mask(1, t, s, causal=True)[0, 0]
    if same_length:
        valid = valid & ((m + jnp.arange(t)[:, None] - jnp.arange(s)[None, :]) < mem_len)
    for i0 in range(0, t, bq):
        i1 = min(i0 + bq, t)
        lo, hi = relative_blockwise.key_block_range(
            i0, i1, t=t, s=s, bk=bk, same_length=same_length, mem_len=mem_len
        )
        seen = [bool(valid[i0:i1, j * bk : (j + 1) * bk].any()) for j in range(-(-s // bk))]
        assert seen == [lo <= j < hi for j in range(len(seen))], (i0, lo, hi, seen)


def test_shift_block_is_the_relative_shift():
    raw = jnp.arange(3 * 7, dtype=jnp.float32).reshape(1, 1, 3, 7)  # bq = 3, bk = 4
    got = relative_blockwise.shift_block(raw, 4)[0, 0]
    want = np.array([[raw[0, 0, i, j + 2 - i] for j in range(4)] for i in range(3)])
    np.testing.assert_array_equal(got, want)


def test_auto_is_blockwise_without_dropout_and_reference_with_it():
    x = _inputs(t=9, m=4)
    opts = dict(block_q=4, block_k=4)
    np.testing.assert_array_equal(_attend("auto", x, **opts), _attend("blockwise", x, **opts))
    drop = dict(dropout_rate=0.2, dropout_rng=jax.random.key(3), **opts)
    np.testing.assert_array_equal(_attend("auto", x, **drop), _attend("reference", x, **drop))
    with pytest.raises(ValueError, match="'blockwise' has no attention dropout.*'reference'"):
        _attend("blockwise", x, **drop)


@pytest.mark.parametrize(
    "options,expected",
    [
        ({"implementation": "magic"}, "implementation='magic' is not one of ('reference', "),
        ({"implementation": "blockwise", "block_k": 0}, "block_k=0 is invalid; valid: an int"),
        ({"block_q": 2.5}, "block_q=2.5 is invalid"),
    ],
)
def test_invalid_options_name_the_field_and_valid_values(options, expected):
    x = _inputs(t=4, m=2)
    with pytest.raises(ValueError) as e:
        _attend(options.pop("implementation", "blockwise"), x, **options)
    assert expected in str(e.value)
    config = common.load_config("transformer_xl:smoke")
    config.model.attention_options["relative"].update(
        {"implementation": "magic"} if "magic" in expected else options
    )
    with pytest.raises(config_validation.ConfigError) as e:
        config_validation.validate(config, num_devices=1, process_count=1)
    assert "config.model.attention_options.relative" in str(e.value)
    assert expected in str(e.value)
    assert "implementation" in registry.spec("relative").options


def _xl(impl, mem_len=6):
    options = {"mem_len": mem_len, "same_length": True, "clamp_len": 8, "implementation": impl}
    options.update(block_q=3, block_k=4)
    cfg = TransformerConfig(
        vocab_size=30, num_layers=2, d_model=16, num_heads=2, max_len=64, positional="none",
        attention=(("relative", tuple(sorted(options.items()))),),
    )  # fmt: skip
    return TransformerXL(cfg, mem_len=mem_len)


def test_transformer_xl_logits_blockwise_equal_reference_over_two_segments():
    tok = jnp.asarray(np.random.default_rng(0).integers(0, 30, (2, 2, 6)), jnp.int32)
    ref, blk = _xl("reference"), _xl("blockwise")
    params = ref.init(jax.random.key(0), tok[0])["params"]
    mem_ref, mem_blk = ref.init_memory(2), blk.init_memory(2)
    apply_ref, apply_blk = jax.jit(ref.apply), jax.jit(blk.apply)
    for n, seg in enumerate(tok):  # the second segment attends to the first one's memory
        assert bool(mem_ref[1].all()) == (n == 1)  # empty, then full
        lg_ref, mem_ref = apply_ref({"params": params}, seg, mem_ref)
        lg_blk, mem_blk = apply_blk({"params": params}, seg, mem_blk)
        np.testing.assert_allclose(lg_blk, lg_ref, atol=2e-5, rtol=1e-5)
        for a, b in zip(mem_blk[0], mem_ref[0]):
            np.testing.assert_allclose(a, b, atol=2e-5, rtol=1e-5)
