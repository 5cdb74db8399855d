"""Beam-search translation with the encoder-decoder (``seqjax.tasks.seq2seq_decode``).

The cached search (decoder KV cache, cross-attention keys/values once per source) returns
exactly what the same search returns when it recomputes the decoder over the prefix at
every step; beam 1 equals greedy decoding of the full teacher-forced model; sacreBLEU
scores are those of sacreBLEU itself.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax.models import attention_cycle
from seqjax.models.encoder_decoder import EncoderDecoder, EncoderDecoderConfig, shift_right
from seqjax.tasks import seq2seq_decode, text_metrics

V, S, T, EOS = 13, 7, 6, 3


def _model(decoder_attention="dense", norm_position="post"):
    cfg = EncoderDecoderConfig(
        vocab_size=V, encoder_layers=1, decoder_layers=2, num_heads=2, d_model=16, d_ff=32,
        max_source_len=S, max_target_len=T, decoder_attention=decoder_attention,
        norm_position=norm_position,
    )  # fmt: skip
    model = EncoderDecoder(cfg)
    source = jnp.asarray(np.random.default_rng(0).integers(4, V, (3, S)), jnp.int32)
    source = source.at[1, 4:].set(0).at[2, 2:].set(0)  # padded sources
    params = model.init(jax.random.key(1), source, jnp.zeros((3, T), jnp.int32))["params"]
    # Sharper logits than the init gives, so that beams really differ.
    params = jax.tree.map(lambda p: p * 3.0, params)
    return cfg, model, params, source


@pytest.mark.parametrize(
    "beam, norm",
    [(3, "post"), pytest.param(1, "post", marks=pytest.mark.slow),
     pytest.param(3, "pre", marks=pytest.mark.slow)],
)  # fmt: skip
def test_cached_search_equals_recomputed_search(beam, norm):
    cfg, _, params, source = _model(norm_position=norm)
    kw = dict(beam_size=beam, alpha=0.6, max_len=T, eos_id=EOS)
    cached = seq2seq_decode.make_translate_fn(cfg, **kw)
    recomputed = seq2seq_decode.make_translate_fn(cfg, **kw, force_recompute=True)
    t1, s1 = cached(params, source)
    t2, s2 = recomputed(params, source)
    np.testing.assert_array_equal(np.asarray(t1), np.asarray(t2))
    np.testing.assert_allclose(np.asarray(s1), np.asarray(s2), rtol=1e-5, atol=1e-5)


def test_beam_one_equals_greedy_of_the_full_model():
    cfg, model, params, source = _model()
    tokens_BT, _ = seq2seq_decode.make_translate_fn(
        cfg, beam_size=1, alpha=0.0, max_len=T, eos_id=EOS
    )(params, source)
    # Greedy by hand: the full teacher-forced model re-run on the growing prefix.
    out = np.zeros((source.shape[0], T), np.int32)
    done = np.zeros(source.shape[0], bool)
    full = jax.jit(lambda p, s, d: model.apply({"params": p}, s, shift_right(d)))
    for t in range(T):
        logits = full(params, source, jnp.asarray(out))
        nxt = np.asarray(jnp.argmax(logits[:, t], -1))
        out[:, t] = np.where(done, 0, nxt)
        done |= nxt == EOS
    np.testing.assert_array_equal(np.asarray(tokens_BT), out)


@pytest.mark.slow  # compiles a block-sparse decoder inside the search (~20 s)
def test_a_decoder_without_kv_cache_decodes_by_recomputation():
    bigbird = dict(pattern="bigbird", block_size=2, window=1, num_global=1, num_random=1)
    cfg, _, params, source = _model(decoder_attention=attention_cycle("flex", {"flex": bigbird}))
    assert not seq2seq_decode.uses_cache(cfg)
    tokens_BT, scores_B = seq2seq_decode.make_translate_fn(
        cfg, beam_size=2, alpha=0.6, max_len=T, eos_id=EOS
    )(params, source)
    assert tokens_BT.shape == (3, T) and np.isfinite(np.asarray(scores_B)).all()


def test_corpus_scores_are_sacrebleus():
    import sacrebleu

    hyps = ["the cat sat on the mat", "a file was not found", "xyz"]
    refs = ["the cat sat on a mat", "the file was not found", "abc"]
    got = text_metrics.corpus_scores(hyps, refs)
    assert got["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    assert got["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score)
    assert got["bleu_signature"].startswith("nrefs:1|")
    with pytest.raises(ValueError, match="same examples"):
        text_metrics.corpus_scores(hyps, refs[:2])


def test_bleu_by_length_buckets_are_corpus_bleu_of_their_sources():
    import sacrebleu

    sources = ["one", "a b c d e", "w " * 10, "w " * 9, "w " * 25, "x y"]  # 1,5,10,9,25,2 words
    hyps = ["the cat sat", "a file was found", "xyz abc", "no such file", "it is open", "b"]
    refs = ["the cat sat down", "the file was not found", "xyz", "no such file", "it is", "b"]
    got = text_metrics.bleu_by_length(sources, hyps, refs, [0, 5, 10, 20, 40])
    assert [(b["lo"], b["hi"], b["count"]) for b in got] == [
        (0, 5, 2), (5, 10, 2), (10, 20, 1), (20, 40, 1), (40, None, 0)
    ]  # fmt: skip
    members = [[0, 5], [1, 3], [2], [4]]  # a length equal to an edge opens the next bucket
    for bucket, idx in zip(got, members):
        want = sacrebleu.corpus_bleu([hyps[i] for i in idx], [[refs[i] for i in idx]]).score
        assert bucket["bleu"] == pytest.approx(want)
    assert got[-1]["bleu"] is None
    assert text_metrics.bleu_by_length(sources, hyps, refs, [3])[0]["count"] == 4  # 5,10,9,25
    with pytest.raises(ValueError, match="same examples"):
        text_metrics.bleu_by_length(sources, hyps, refs[:2], [0])
    for edges in ([], [0, 10, 10], [5, 3], [-1, 2], [0.5]):
        with pytest.raises(ValueError, match="edges"):
            text_metrics.bleu_by_length(sources, hyps, refs, edges)


@pytest.mark.parametrize("text", ["10,5", "0,x", "", "-1,3"])
def test_evaluate_cli_length_edges_bad_input_is_one_sentence(text):
    from seqjax import evaluate
    from seqjax.tasks import inputs

    with pytest.raises(inputs.InputError, match=f"--bleu_by_length={text}; valid: "):
        evaluate._length_edges(text)
    assert evaluate._length_edges("0,10,20") == (0, 10, 20)
