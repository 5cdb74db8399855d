"""XLNet as a left-to-right LM (``seqjax.models.xlnet_generate``): greedy tokens equal
``transformers``' ``XLNetLMHeadModel.generate`` without mems (same weights, imported from a
``save_pretrained`` folder; its default reuses the mems of earlier steps, computed before the
later tokens existed, and drifts from the full recompute: here from the 5th token), and
every step's logits equal its forward on the truncated sequence with a dummy token, for the
prefix order and the causal (identity) order."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from seqjax import convert  # noqa: E402
from seqjax.models import xlnet_generate  # noqa: E402

V, PROMPT, N = 37, [3, 7, 9, 11, 2], 6


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    torch.manual_seed(0)
    cfg = transformers.XLNetConfig(
        vocab_size=V, d_model=16, n_layer=2, n_head=2, d_inner=24, dropout=0.0, mem_len=None,
        reuse_len=None, initializer_range=0.5, pad_token_id=None, bos_token_id=None,
        eos_token_id=None,
    )  # fmt: skip
    hf = transformers.XLNetLMHeadModel(cfg).eval()
    path = tmp_path_factory.mktemp("xlnet_gen")
    hf.save_pretrained(path)
    return hf, convert.load(path)


def _hf_next_logits(hf, ids, causal: bool):
    """The brute force: the truncated sequence, a dummy token last, seen by nobody."""
    n = len(ids) + 1
    x = torch.tensor([list(ids) + [0]])
    perm = torch.zeros(1, n, n)
    perm[:, :, -1] = 1.0
    if causal:
        perm = torch.maximum(perm, torch.triu(torch.ones(n, n), 1)[None])
    target = torch.zeros(1, 1, n)
    target[0, 0, -1] = 1.0
    with torch.no_grad():
        return hf(x, perm_mask=perm, target_mapping=target, use_mems=False).logits[0, 0].numpy()


def test_greedy_generation_equals_transformers_generate(pair):
    hf, imp = pair
    mine = xlnet_generate.generate(imp.model, imp.params, PROMPT, N, temperature=0.0)
    with torch.no_grad():
        want = hf.generate(torch.tensor([PROMPT]), max_new_tokens=N, do_sample=False,
                           use_mems=False)  # fmt: skip
    want = want[0, len(PROMPT) :].numpy()
    assert len(set(want.tolist())) > 1  # a non-trivial continuation
    np.testing.assert_array_equal(mine, want)


@pytest.mark.parametrize("order", ["prefix", "causal"])
def test_each_step_equals_the_truncated_forward(pair, order):
    hf, imp = pair
    seq = PROMPT + [5, 30, 1]
    buf = jnp.asarray(seq + [0, 0], jnp.int32)  # positions after the target are ignored
    step = jax.jit(lambda p, b, i: xlnet_generate.next_logits(imp.model, p, b, i, order))
    for i in (1, len(PROMPT), len(seq)):
        got = step(imp.params, buf, i)
        want = _hf_next_logits(hf, seq[:i], causal=order == "causal")
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)


def test_bad_order_is_one_sentence(pair):
    _, imp = pair
    with pytest.raises(ValueError, match="order"):
        xlnet_generate.generate(imp.model, imp.params, PROMPT, 2, order="r2l")
