"""The permutation as ranks (issue 45: a block mask computed per block, no ``[T, S]`` mask):
the sampler's ranks give exactly its ``perm_mask``; the blockwise relative attention with
``rank_mask`` (several blocks, memory) equals it with the dense ``attn_mask``; XLNet with
``perm_ranks`` equals XLNet with ``perm_mask_BTT`` (both streams, both engines, memory)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax.attention import relative
from seqjax.data import xlnet_perm
from seqjax.models.xlnet import XLNet, XLNetConfig

B, T, M, V, H, D = 2, 16, 3, 50, 2, 8


def _examples(seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(5, V, (B, T))
    tokens[:, 5] = 3  # a functional token (keeps a rank, never a target)
    return tokens, xlnet_perm.batch(tokens, rng, reuse_len=T // 2, perm_size=4, num_predict=5)


def test_ranks_give_the_sampler_perm_mask():
    for seed in range(5):
        _, ex = _examples(seed)
        from_ranks = ex["q_rank"][:, :, None] <= ex["k_rank"][:, None, :]
        np.testing.assert_array_equal(from_ranks, ex["perm_mask"].astype(bool))


@pytest.mark.parametrize("self_visible", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_blockwise_rank_mask_equals_the_dense_mask(self_visible):
    _, ex = _examples(1)
    ks = jax.random.split(jax.random.key(0), 5)
    q = jax.random.normal(ks[0], (B, T, H, D))
    k, v = (jax.random.normal(x, (B, M + T, H, D)) for x in ks[1:3])
    r = jax.random.normal(ks[3], (M + 2 * T - 1, H, D))
    u, w = jax.random.normal(ks[4], (2, H, D)) * 0.1
    k_rank = jnp.concatenate([jnp.full((B, M), -1), jnp.asarray(ex["k_rank"])], axis=1)
    dense = np.concatenate([np.ones((B, T, M), bool), ~ex["perm_mask"].astype(bool)], axis=2)
    if self_visible:
        dense |= np.eye(T, M + T, M, dtype=bool)[None]
    kw = dict(r=r, r_w_bias=u, r_r_bias=w, causal=False, implementation="blockwise",
              block_q=4, block_k=5)  # fmt: skip
    want = relative.relative_attention(q, k, v, attn_mask=jnp.asarray(dense), **kw)
    got = relative.relative_attention(
        q, k, v, rank_mask=(jnp.asarray(ex["q_rank"]), k_rank, self_visible), **kw
    )
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "implementation", [pytest.param("reference", marks=pytest.mark.slow), "blockwise"]
)
def test_xlnet_with_ranks_equals_xlnet_with_perm_mask(implementation):
    tokens, ex = _examples(2)
    cfg = XLNetConfig(vocab_size=V, d_model=16, num_layers=1, num_heads=H, d_inner=24,
                      dropout_rate=0.0, implementation=implementation)  # fmt: skip
    model = XLNet(cfg)
    tm = jnp.asarray(ex["target_mapping"])
    params = model.init(jax.random.key(1), jnp.asarray(tokens[:, :4]))["params"]
    mems = (jax.random.normal(jax.random.key(2), (B, M, 16)),)
    common = dict(target_mapping_BPT=tm, mems=mems, return_state=True)
    perm = jnp.asarray(ex["perm_mask"] > 0)
    want, (_, hid_want) = model.apply({"params": params}, jnp.asarray(tokens), perm_mask_BTT=perm,
                                      **common)  # fmt: skip
    ranks = (jnp.asarray(ex["q_rank"]), jnp.asarray(ex["k_rank"]))
    got, (_, hid_got) = model.apply({"params": params}, jnp.asarray(tokens), perm_ranks=ranks,
                                    **common)  # fmt: skip
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(hid_got[-1]), np.asarray(hid_want[-1]), atol=1e-5)


def test_plm_batches_as_ranks_train_the_same_model():
    """``data.plm_ranks``: the same draws as ``q_rank``/``k_rank`` (no ``perm_mask``), and
    the ranks' task accepts them and hands them to XLNet as ``perm_ranks`` (whose outputs
    equal the dense mask's: the test above)."""
    import ml_collections

    from seqjax.data import plm
    from seqjax.tasks import plm as plm_task
    from tests.data import test_xlnet_perm as tp

    opts = dict(num_predict=4, reuse_len=tp.R, perm_size=tp.R, mask_alpha=3, mask_beta=1,
                max_gram=5)  # fmt: skip
    dense, ranked = (
        plm.PermutationLM(tp._Rows([12, 8, 3, 10]), seed=1, stream=0, num_tokens=0, opts=opts,
                          texts=True, ranks=r)(0)
        for r in (False, True)
    )  # fmt: skip
    assert "perm_mask" not in ranked and set(ranked) - set(dense) == {"q_rank", "k_rank"}
    np.testing.assert_array_equal(ranked["q_rank"][:, :, None] <= ranked["k_rank"][:, None, :],
                                  dense["perm_mask"])  # fmt: skip
    cfg = ml_collections.ConfigDict({"data": {"plm_ranks": True}})
    task = plm_task.TASK.configure(cfg)
    task.check_batch({k: jnp.asarray(v) for k, v in ranked.items()})
    ranks = task.order({k: jnp.asarray(v) for k, v in ranked.items()})["perm_ranks"]
    np.testing.assert_array_equal(np.asarray(ranks[0]), ranked["q_rank"])  # what XLNet gets
    np.testing.assert_array_equal(np.asarray(ranks[1]), ranked["k_rank"])
