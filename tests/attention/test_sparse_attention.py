"""Block-sparse Sparse Transformer attention equals the masked dense reference.

Values and gradients, both kinds, both head modes, causal and bidirectional, with padding
masks, a length that is not a multiple of the stride, packed segments and distinct summary
sub-blocks; causality; and no ``T x T`` array in the forward or backward program.

Legend: B batch, T sequence length, H heads, D head dim.
"""

import functools
import itertools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax import attention
from seqjax.attention import sparse

B, T, H, D = 2, 37, 4, 8  # T is not a multiple of the stride
STRIDE, C = 8, 3


def inputs(seed=0, t=T, h=H, pad=True):
    rng = np.random.default_rng(seed)
    q, k, v, ct = (jnp.asarray(rng.standard_normal((B, t, h, D)), jnp.float32) for _ in range(4))
    mask = jnp.asarray(rng.random((B, t)) > 0.25) if pad else None
    if pad:
        mask = mask.at[1, t - 5 :].set(False)  # a padded tail
    return q, k, v, ct, mask


@functools.cache
def value_and_grads(name, impl, options):
    """jit of (q, k, v, ct, mask, seg) -> (out, (dq, dk, dv)) for one configuration.

    Cached, so tests sharing a configuration share one compilation.
    """
    fn = attention.get(name)
    opts = dict(options)

    def loss(q, k, v, ct, mask, seg):
        out = fn(q, k, v, mask=mask, segment_ids=seg, implementation=impl, **opts)
        return jnp.sum(out * ct), out

    grad = jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True)
    return jax.jit(lambda *a: (lambda r: (r[0][1], r[1]))(grad(*a)))


def compare(name, options, *, segments=False, h=H):
    q, k, v, ct, mask = inputs(0, h=h)
    seg = None
    if segments:
        seg = jnp.asarray(np.repeat(np.array([[0] * 15 + [1] * 10 + [2] * 12]), B, 0))
    options = tuple(sorted(options.items()))
    want = value_and_grads(name, "masked", options)(q, k, v, ct, mask, seg)
    got = value_and_grads(name, "blocksparse", options)(q, k, v, ct, mask, seg)
    for label, w, g in zip(("out", "dq", "dk", "dv"), [want[0], *want[1]], [got[0], *got[1]]):
        assert np.isfinite(np.asarray(g)).all(), label
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5, err_msg=f"{name} {options} {label}")


# Every (kind, head_mode, causal) combination (one compilation each keeps CI fast); some also
# use small engine blocks, packed segments, or distinct summary sub-blocks (c=2 in l=8 with 6
# heads: the heads use sub-blocks 0, 1, 2, 3, 0, 1).
EXTRAS = {
    ("strided", "merged", True): dict(block_size=4),
    ("strided", "split", True): dict(block_size=2, segments=True),
    ("fixed", "merged", True): dict(c=2, distinct_summaries=True, block_size=4),
    ("fixed", "split", False): dict(c=2, distinct_summaries=True),
}


def configuration(kind, head_mode, causal):
    options = dict(stride=STRIDE, head_mode=head_mode, causal=causal)
    if kind == "fixed":
        options["c"] = C
    options.update(EXTRAS.get((kind, head_mode, causal), {}))
    segments = options.pop("segments", False)
    h = 6 if options.get("distinct_summaries") else H
    return tuple(sorted(options.items())), segments, h


@pytest.mark.parametrize(
    "kind, head_mode, causal",
    list(itertools.product(["strided", "fixed"], ["merged", "split"], [True, False])),
)
def test_blocksparse_equals_masked(kind, head_mode, causal):
    options, segments, h = configuration(kind, head_mode, causal)
    compare(f"sparse_{kind}", dict(options), segments=segments, h=h)


@pytest.mark.parametrize("head_mode", ["merged", "split"])
@pytest.mark.parametrize("kind", ["strided", "fixed"])
def test_causal_future_does_not_change_past(kind, head_mode):
    options, segments, h = configuration(kind, head_mode, True)
    fn = value_and_grads(f"sparse_{kind}", "blocksparse", options)  # compiled above
    q, k, v, ct, mask = inputs(1, h=h)
    seg = jnp.zeros((B, T), jnp.int32) if segments else None
    p = 20
    noise = jnp.asarray(np.random.default_rng(2).standard_normal(q.shape), jnp.float32)
    future = (jnp.arange(T) > p)[None, :, None, None]
    out0, _ = fn(q, k, v, ct, mask, seg)
    out1, _ = fn(q, k + future * noise, v + future * noise, ct, mask, seg)
    np.testing.assert_allclose(out1[:, : p + 1], out0[:, : p + 1], atol=1e-6)
    assert not np.allclose(out1[:, p + 1 :], out0[:, p + 1 :])


def _tensor_sizes(hlo_text):
    """Element counts of every tensor type in a StableHLO module."""
    sizes = []
    for dims in re.findall(r"tensor<([0-9x]+)x[a-z]+[0-9]*>", hlo_text):
        sizes.append(int(np.prod([int(x) for x in dims.split("x")])))
    return sizes


@pytest.mark.parametrize("kind", ["strided", "fixed"])
def test_no_t_by_t_array_forward_or_backward(kind):
    t, l = 256, 16
    q = jnp.zeros((1, t, 2, 4), jnp.float32)
    biggest = {}
    configs = {
        "blocksparse": list(itertools.product([True, False], ["merged", "split"])),
        "masked": [(True, "merged")],  # shows that the check sees a T x T array when present
    }
    for impl, combos in configs.items():
        sizes = []
        for causal, head_mode in combos:
            fn = functools.partial(
                attention.get(f"sparse_{kind}"),
                stride=l,
                causal=causal,
                head_mode=head_mode,
                implementation=impl,
            )
            grad = jax.grad(lambda q, k, v, fn=fn: fn(q, k, v).sum(), argnums=(0, 1, 2))
            sizes += _tensor_sizes(jax.jit(grad).lower(q, q, q).as_text())
        biggest[impl] = max(sizes)
    assert biggest["masked"] >= t * t  # the check can see a T x T array when there is one
    assert biggest["blocksparse"] <= t * t // 8, biggest  # O(T sqrt(T)) at most


def test_sparse_errors():
    q, k, v, _, _ = inputs(0, pad=False)
    with pytest.raises(ValueError, match="self-attention"):
        sparse.sparse_strided(q, k[:, :16], v[:, :16], stride=4)
    with pytest.raises(ValueError, match="even number of heads"):
        sparse.sparse_fixed(q[:, :, :3], k[:, :, :3], v[:, :, :3], stride=4, head_mode="split")
    with pytest.raises(ValueError, match="unknown option"):
        sparse.sparse_fixed(q, k, v, stride=4, n_hashes=2)
    with pytest.raises(ValueError, match="c"):
        sparse.sparse_fixed(q, k, v, stride=4, c=8)
