"""Beam search against brute force, a plain-Python reference, greedy, and itself (batched
vs alone, jitted once); greedy and sampled search on the same toy model.

The toy model is a table of logits indexed by a hash of the whole generated prefix (kept
per row in the cache, so a wrong cache reordering gives wrong logits) plus a bias for the
position (a rank-0 counter in the cache, shared by the rows), one table per example.
On V = 3 and T = 4 the hash is exact and every hypothesis can be enumerated.

Legend: B batch, K beams, N = B * K rows, V vocabulary, T max_len, P table rows.
"""

import functools
import itertools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax.decoding import (
    beam_search,
    check_beam,
    expand_to_beams,
    greedy_search,
    length_penalty,
    sample_search,
    sequence_lengths,
)

EOS = 1


def _tables(seed, b, v, p=40, t=4):
    rng = np.random.default_rng(seed)
    return (
        rng.normal(0.0, 1.5, (b, p, v)).astype(np.float32),
        rng.normal(0.0, 0.5, (t + 1, v)).astype(np.float32),
    )


def _step(tables, v):
    """``step_fn`` of the toy model: the fed token extends the prefix hash (step 0 feeds
    the start token, which is not part of the prefix)."""
    table_BPV, bias_TV = jnp.asarray(tables[0]), jnp.asarray(tables[1])
    p = table_BPV.shape[1]

    def step_fn(tokens_N1, cache):
        pos = cache["pos"]
        tok_N = tokens_N1[:, 0]
        hist_N = jnp.where(pos == 0, 0, (cache["hist_N"] * v + tok_N + 1) % p)
        logits_NV = (
            table_BPV[cache["example_N"], hist_N]
            + bias_TV[jnp.minimum(pos, len(bias_TV) - 1)][None]
        )
        return logits_NV, dict(pos=pos + 1, hist_N=hist_N, example_N=cache["example_N"])

    return step_fn


def _cache(b, k=1):
    ex = expand_to_beams(dict(example_N=jnp.arange(b, dtype=jnp.int32)), k)
    return dict(pos=jnp.int32(0), hist_N=jnp.zeros((b * k,), jnp.int32), **ex)


@functools.partial(jax.jit, static_argnames=("v", "k", "t", "alpha"))
def _beam(table_BPV, bias_TV, *, v, k, t, alpha):
    """Beam search on the toy model, one compiled program per static setting."""
    b = table_BPV.shape[0]
    return beam_search(_step((table_BPV, bias_TV), v), _cache(b, k), batch_size=b,
                       beam_size=k, max_len=t, eos_id=EOS, alpha=alpha)  # fmt: skip


@functools.partial(jax.jit, static_argnames=("v", "t"))
def _greedy(table_BPV, bias_TV, *, v, t):
    b = table_BPV.shape[0]
    return greedy_search(_step((table_BPV, bias_TV), v), _cache(b), batch_size=b, max_len=t,
                         eos_id=EOS)  # fmt: skip


@functools.partial(jax.jit, static_argnames=("v", "t", "top_k"))
def _sample(table_BPV, bias_TV, rng, *, v, t, top_k):
    b = table_BPV.shape[0]
    return sample_search(_step((table_BPV, bias_TV), v), _cache(b), rng, batch_size=b,
                         max_len=t, eos_id=EOS, temperature=1.5, top_k=top_k)  # fmt: skip


def _toy_logits(tables, v, example, prefix):
    """float64 logits ``[V]`` of the toy model after ``prefix``."""
    table_BPV, bias_TV = tables
    hist = 0
    for j in range(1, len(prefix) + 1):
        hist = (hist * v + prefix[j - 1] + 1) % table_BPV.shape[1]
    return table_BPV[example, hist].astype(np.float64) + bias_TV[len(prefix)]


def _logp(tables, v, example, seq):
    """float64 log P(seq) of the toy model (brute force)."""
    total = 0.0
    for j, tok in enumerate(seq):
        z = _toy_logits(tables, v, example, seq[:j])
        total += z[tok] - np.log(np.exp(z - z.max()).sum()) - z.max()
    return total


def _hypotheses(v, t):
    """Every output: non-EOS tokens then EOS (length <= T), or T tokens without EOS."""
    body = [s for s in range(v) if s != EOS]
    for n in range(1, t + 1):
        for prefix in itertools.product(body, repeat=n - 1):
            yield (*prefix, EOS)
            if n == t:
                yield from ((*prefix, s) for s in body)


def _brute_force(tables, v, t, example, alpha):
    scored = [
        (_logp(tables, v, example, h) / ((5 + len(h)) / 6) ** alpha, h) for h in _hypotheses(v, t)
    ]
    return sorted(scored, key=lambda x: -x[0])


def _trim(seq, length):
    return tuple(int(x) for x in seq[:length])


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_wide_beam_is_exhaustive(alpha):
    """K = 27 keeps every prefix: the K finished hypotheses are the brute force's K best,
    with its scores; with K = 12 the best one still is."""
    v, t, b = 3, 4, 2
    tables = _tables(int(alpha * 10), b, v)
    for k in (27, 12):
        seqs, scores = _beam(*tables, v=v, k=k, t=t, alpha=alpha)
        lengths = np.asarray(sequence_lengths(seqs, EOS))
        for ex in range(b):
            want = _brute_force(tables, v, t, ex, alpha)
            top = k if k == 27 else 1
            got = [_trim(seqs[ex, j], lengths[ex, j]) for j in range(top)]
            assert got == [h for _, h in want[:top]], (k, ex)
            np.testing.assert_allclose(scores[ex, :top], [s for s, _ in want[:top]], rtol=1e-5)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_narrow_beam_hypotheses_are_consistent(alpha):
    """K = 3 on V = 5: scores descend, each is its sequence's log P / lp(|Y|), only 0
    after an EOS, and none beats the exhaustive best."""
    v, t, b, k = 5, 6, 3, 3
    tables = _tables(5, b, v, p=97, t=t)
    seqs, scores = _beam(*tables, v=v, k=k, t=t, alpha=alpha)
    seqs, scores = np.asarray(seqs), np.asarray(scores)
    assert seqs.shape == (b, k, t) and seqs.dtype == np.int32 and scores.dtype == np.float32
    assert (np.diff(scores, axis=1) <= 0).all()
    lengths = np.asarray(sequence_lengths(seqs, EOS))
    for ex, j in itertools.product(range(b), range(k)):
        n = lengths[ex, j]
        assert (seqs[ex, j, n:] == 0).all() and EOS not in seqs[ex, j, : n - 1]
        want = _logp(tables, v, ex, _trim(seqs[ex, j], n)) / ((5 + n) / 6) ** alpha
        np.testing.assert_allclose(scores[ex, j], want, rtol=1e-5)


def _reference_beam(tables, v, t, example, k, alpha):
    """The same search in plain Python, float64, run to max_len (no early stop)."""
    live, finished = [(0.0, ())], []
    for i in range(t):
        cands = []
        for _, seq in live:
            for tok in range(v):
                cands.append((_logp(tables, v, example, (*seq, tok)), (*seq, tok)))
        cands = sorted(cands, key=lambda c: -c[0])[: 2 * k]  # stable: parent, then token
        for logp, seq in cands[:k]:
            if seq[-1] == EOS or i == t - 1:
                finished.append((logp / ((5 + len(seq)) / 6) ** alpha, seq))
        finished = sorted(finished, key=lambda f: -f[0])[:k]
        live = [c for c in cands if c[1][-1] != EOS][:k]
    return finished


@pytest.mark.parametrize(("k", "alpha"), [(2, 0.0), (2, 1.0), (3, 0.6), (3, 2.0)])
def test_early_stop_changes_nothing(k, alpha):
    """Against a reference that always runs to max_len: the stop rule only ends a search
    whose finished set can no longer change."""
    v, t, b = 4, 7, 8
    tables = _tables(k * 10 + int(alpha * 10), b, v, p=89, t=t)
    seqs, scores = _beam(*tables, v=v, k=k, t=t, alpha=alpha)
    lengths = np.asarray(sequence_lengths(seqs, EOS))
    for ex in range(b):
        want = _reference_beam(tables, v, t, ex, k, alpha)
        got = [_trim(seqs[ex, j], lengths[ex, j]) for j in range(k)]
        assert got == [h for _, h in want], ex
        np.testing.assert_allclose(scores[ex], [sc for sc, _ in want], rtol=1e-5)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_one_equals_greedy(seed):
    """K = 1, alpha = 0: the greedy tokens and log-probability, EOS or not."""
    v, t, b = 4, 6, 5
    tables = _tables(seed, b, v, p=61, t=t)
    seqs, scores = _beam(*tables, v=v, k=1, t=t, alpha=0.0)
    g_seqs, g_logp = _greedy(*tables, v=v, t=t)
    np.testing.assert_array_equal(seqs[:, 0], g_seqs)
    np.testing.assert_array_equal(scores[:, 0], g_logp)
    lengths = np.asarray(sequence_lengths(g_seqs, EOS))
    assert len(set(lengths.tolist())) > 1  # some rows end early, some run to T


def test_sampled_search_stays_in_the_filter_and_stops_at_eos():
    """top_k = 2 at temperature 1.5: every token is among its step's 2 most probable, only
    0 after EOS, log-probabilities under the unfiltered model; top_k = 1 is greedy."""
    v, t, b = 5, 6, 16
    tables = _tables(3, b, v, p=97, t=t)
    rng = jax.random.PRNGKey(0)
    seqs, logp = (np.asarray(x) for x in _sample(*tables, rng, v=v, t=t, top_k=2))
    lengths = np.asarray(sequence_lengths(seqs, EOS))
    assert seqs.dtype == np.int32 and len(set(lengths.tolist())) > 1
    for ex in range(b):
        seq = _trim(seqs[ex], lengths[ex])
        assert (seqs[ex, lengths[ex] :] == 0).all()
        for j, tok in enumerate(seq):
            assert tok in np.argsort(-_toy_logits(tables, v, ex, seq[:j]))[:2]
        np.testing.assert_allclose(logp[ex], _logp(tables, v, ex, seq), rtol=1e-5)
    g_seqs, g_logp = _greedy(*tables, v=v, t=t)
    k1_seqs, k1_logp = _sample(*tables, rng, v=v, t=t, top_k=1)
    np.testing.assert_array_equal(k1_seqs, g_seqs)
    np.testing.assert_array_equal(k1_logp, g_logp)
    assert (np.asarray(g_seqs) != seqs).any()


def test_batch_gives_what_each_example_gives_alone():
    v, t, b, k = 5, 6, 4, 3
    tables = _tables(9, b, v, p=97, t=t)
    seqs, scores = _beam(*tables, v=v, k=k, t=t, alpha=0.6)
    for ex in range(b):
        s1, sc1 = _beam(tables[0][ex : ex + 1], tables[1], v=v, k=k, t=t, alpha=0.6)
        np.testing.assert_array_equal(s1[0], seqs[ex])
        np.testing.assert_array_equal(sc1[0], scores[ex])


def test_jitted_search_compiles_once():
    v, t, b, k = 3, 4, 2, 4

    @jax.jit
    @chex.assert_max_traces(n=1)
    def decode(table_BPV, bias_TV):
        return beam_search(_step((table_BPV, bias_TV), v), _cache(b, k), batch_size=b,
                           beam_size=k, max_len=t, eos_id=EOS)  # fmt: skip

    for seed in (0, 1):
        tables = _tables(seed, b, v)
        seqs, scores = decode(*tables)
        best = _brute_force(tables, v, t, 0, 0.6)[0]
        assert _trim(seqs[0, 0], int(sequence_lengths(seqs[0, 0], EOS))) == best[1]
        np.testing.assert_allclose(scores[0, 0], best[0], rtol=1e-5)
    assert decode._cache_size() == 1


def test_expand_to_beams_tiles_each_example():
    tree = dict(enc_BTE=jnp.arange(2 * 3 * 2).reshape(2, 3, 2), step=jnp.int32(7))
    out = expand_to_beams(tree, 3)
    assert out["enc_BTE"].shape == (6, 3, 2) and out["step"].shape == ()
    np.testing.assert_array_equal(
        out["enc_BTE"][3:], np.broadcast_to(tree["enc_BTE"][1], (3, 3, 2))
    )


def test_length_penalty_is_gnmt():
    np.testing.assert_allclose(length_penalty(7, 0.6), (12 / 6) ** 0.6, rtol=1e-6)
    assert float(length_penalty(9, 0.0)) == 1.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(beam_size=0), "beam_size"),
        (dict(beam_size=-2), "beam_size"),
        (dict(beam_size=2.0), "beam_size"),
        (dict(alpha=-0.1), "alpha"),
        (dict(alpha=float("inf")), "alpha"),
        (dict(max_len=0), "max_len"),
        (dict(eos_id=3), r"eos_id=3 is outside the vocabulary \[0, 3\)"),
        (dict(start_id=-1), "start_id"),
    ],
)
def test_bad_arguments_raise_a_clear_error(kwargs, match):
    v, b, k = 3, 2, 2
    args = dict(batch_size=b, beam_size=k, max_len=4, eos_id=EOS, alpha=0.6) | kwargs
    with pytest.raises(ValueError, match=match):
        beam_search(_step(_tables(0, b, v), v), _cache(b, k), **args)


def test_wrong_cache_rows_or_step_outputs_raise():
    v, b, k = 3, 2, 2
    step = _step(_tables(0, b, v), v)
    with pytest.raises(
        ValueError, match=r"example_N.*batch_size \* beam_size = 4.*expand_to_beams"
    ):
        beam_search(step, _cache(b, 1), batch_size=b, beam_size=k, max_len=4, eos_id=EOS)

    def bad_cache(tokens_N1, cache):
        logits, new = step(tokens_N1, cache)
        return logits, dict(new, pos=new["pos"].astype(jnp.float32))

    with pytest.raises(ValueError, match="same|structure, shapes and dtypes"):
        beam_search(bad_cache, _cache(b, k), batch_size=b, beam_size=k, max_len=4, eos_id=EOS)
    check_beam(4, 0.6)
