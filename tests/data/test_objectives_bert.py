"""BERT pre-training details of the masked LM: whole-word masking
(``config.data.mlm_whole_word``) and the MLM head transform (``model.mlm_head_transform``)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import seqjax.data as sd
from seqjax.data import objectives
from seqjax.data.sources import DataError
from seqjax.models import layers
from seqjax.models.transformer import Encoder, TransformerConfig, TransformerLM


def _words(start_bT):
    """Word index of every position (each row: 0, 0, 1, 1, 1, 2, ...)."""
    s = start_bT.copy()
    s[:, 0] = True
    return np.cumsum(s, axis=1) - 1


def _check_whole_words(out, start_bT, real_bT, mask_id):
    chosen, words = out["weights"] > 0, _words(start_bT)
    n_words = n_chosen = 0
    for r in range(chosen.shape[0]):
        for w in np.unique(words[r][real_bT[r]]):
            at = (words[r] == w) & real_bT[r]
            c = chosen[r, at]
            assert c.all() or not c.any(), f"row {r} word {w} partly chosen"
            masked = out["inputs"][r, at] == mask_id
            assert not c.any() or masked.all() or not masked.any(), "one decision per word"
            n_words, n_chosen = n_words + 1, n_chosen + int(c.all())
    return n_chosen / n_words


def test_whole_word_masking_chooses_whole_words_at_the_rate():
    rng = np.random.default_rng(0)
    b, T, V = 32, 96, 50
    tokens = rng.integers(1, V, (b, T))
    start = rng.random((b, T)) < 0.35  # words of ~3 pieces
    real = np.ones((b, T), bool)
    real[:4, 80:] = False  # padding
    out = objectives.mask_tokens(tokens, real, np.arange(b), seed=3, stream=0, mask_id=V,
                                 low=1, high=V, word_start_bT=start)  # fmt: skip
    rate = _check_whole_words(out, start, real, V)
    assert 0.11 < rate < 0.19  # ~1000 words: 15% +- 3.5 sd
    assert (out["weights"][~real] == 0).all()
    masked = out["inputs"][out["weights"] > 0] == V
    assert 0.7 < masked.mean() < 0.9  # 80% [MASK]
    # without word starts every token is its own word: the old per-token masking
    per_token = objectives.mask_tokens(tokens, real, np.arange(b), seed=3, stream=0,
                                       mask_id=V, low=1, high=V)  # fmt: skip
    every = objectives.mask_tokens(tokens, real, np.arange(b), seed=3, stream=0, mask_id=V,
                                   low=1, high=V, word_start_bT=np.ones((b, T), bool))  # fmt: skip
    for k in per_token:
        np.testing.assert_array_equal(per_token[k], every[k])


@pytest.mark.parametrize("vocab", ["bytes", "sentencepiece"])
def test_whole_word_mlm_batches(make_cfg, shakespeare, vocab):
    extra = {"vocab_size": 500} if vocab == "sentencepiece" else {}
    cfg = make_cfg(name="text_file", path=shakespeare, vocab=vocab, objective="mlm",
                   mlm_whole_word=True, batch_size=16, **extra)  # fmt: skip
    info = sd.info(cfg)
    starts_V, space_V = objectives.word_tables(info)
    batch = next(sd.make(cfg, split="train"))
    tokens = batch["targets"]
    start = starts_V[tokens] | space_V[tokens]
    start[:, 1:] |= space_V[tokens[:, :-1]]
    rate = _check_whole_words(batch, start, np.ones(tokens.shape, bool), info.mask_id)
    assert 0.07 < rate < 0.23
    chosen = batch["weights"] > 0
    words = _words(start)
    multi = [(r, w) for r, w in zip(*np.nonzero(chosen)) if (words[r] == words[r, w]).sum() > 1]
    assert multi  # some chosen words have several pieces, all chosen
    if vocab == "sentencepiece":
        pieces = {int(t) for t in tokens[start]}
        assert any(not starts_V[t] and not space_V[t] for t in tokens[~start].tolist())
        assert pieces  # '▁' pieces start words, continuation pieces do not
    else:  # a byte word is a run of non-space bytes
        assert not space_V[ord("a")] and space_V[ord(" ")] and space_V[ord("\n")]


def test_whole_word_refusals(make_cfg):
    cfg = make_cfg(name="listops", objective="mlm", mlm_whole_word=True)
    with pytest.raises(DataError, match=r"config\.data\.mlm_whole_word=True .*listops"):
        sd.info(cfg)
    cfg = make_cfg(name="text_file", objective="", mlm_whole_word=True)
    with pytest.raises(DataError, match=r"config\.data\.mlm_whole_word=True .*objective='mlm'"):
        sd.info(cfg)


def test_mlm_head_is_dense_gelu_layernorm_tied_decoder_plus_bias():
    cfg = TransformerConfig(vocab_size=11, num_layers=1, num_heads=2, d_model=8, max_len=16,
                            causal=False, mlm_head_transform=True)  # fmt: skip
    model = TransformerLM(cfg)
    tokens = jnp.arange(12, dtype=jnp.int32).reshape(2, 6) % 11
    params = nn.meta.unbox(jax.jit(model.init)(jax.random.PRNGKey(0), tokens)["params"])
    assert set(params["mlm_head"]) == {"transform", "ln", "bias"}
    assert params["mlm_head"]["bias"].shape == (11,)
    params = jax.tree.map(lambda p: p + 0.01 * jnp.arange(p.size).reshape(p.shape), params)
    logits = jax.jit(model.apply)({"params": params}, tokens)

    @jax.jit
    def reference(params):
        x, _ = Encoder(cfg, causal=False).apply({"params": params["encoder"]}, tokens)
        tr = params["mlm_head"]["transform"]
        h = x @ tr["kernel"] + tr["bias"][None, None, :]
        h = layers.norm().apply({"params": params["mlm_head"]["ln"]}, jax.nn.gelu(h, False))
        out = h @ params["encoder"]["embed"]["embedding"].T
        return out + params["mlm_head"]["bias"][None, None, :]

    np.testing.assert_allclose(logits, reference(params), rtol=1e-5, atol=1e-5)
