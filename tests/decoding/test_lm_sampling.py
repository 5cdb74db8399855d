"""The samplers in LM sampling (``seqjax.tasks.sampling``) and the searches on a real
Transformer KV cache.

Default settings give the samples of the former sampler (temperature-only categorical)
bit for bit, seed for seed; top-k / top-p reach every decoding path (KV cache, prefix
recomputation, recurrent memory); bad settings raise before anything compiles. On a tiny
random-weight ``TransformerLM`` with ``decode=True``, ``greedy_search`` equals
``sampling.generate`` and every beam hypothesis's score is its full-forward log-probability
over the GNMT penalty (so the Flax cache rows follow their beams).

Legend: B batch, K beams, N = B * K, V vocabulary, L model max_len.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax import models
from seqjax.decoding import beam_search, expand_to_beams, greedy_search, sequence_lengths
from seqjax.tasks import sampling

V, L = 13, 12


@pytest.fixture(scope="module")
def lm():
    cfg = models.TransformerConfig(vocab_size=V, num_layers=1, d_model=16, num_heads=2, max_len=L)
    init = jax.jit(models.TransformerLM(cfg).init)
    params = init(jax.random.PRNGKey(0), jnp.zeros((1, L), jnp.int32))["params"]
    return cfg, params


def _old_pick(logits_V, rng, temperature, top_k=0, top_p=1.0):
    """The sampler ``_pick`` was before ``seqjax.decoding`` (temperature only)."""
    assert top_k == 0 and top_p == 1.0
    if temperature <= 0.0:
        return jnp.argmax(logits_V, -1).astype(jnp.int32)
    return jax.random.categorical(rng, logits_V / temperature).astype(jnp.int32)


class _ToyRecurrent:
    """A recurrent 'model' for ``generate_recurrent``: logits from a table of the token
    plus a decaying memory of the tokens seen (``[B, V]``)."""

    def init_memory(self, batch):
        return jnp.zeros((batch, V), jnp.float32)

    def apply(self, variables, tokens_BT, memory_BV):
        table_VV = variables["params"]["table"]
        for t in range(tokens_BT.shape[1]):
            logits_BV = table_VV[tokens_BT[:, t]] + memory_BV
            memory_BV = 0.5 * memory_BV + jax.nn.one_hot(tokens_BT[:, t], V)
        return logits_BV[:, None], memory_BV


def _paths(cfg, params, prompt, n):
    """Each decoding path as ``(**sampling kwargs) -> samples``."""
    buf = np.zeros(L, np.int32)
    buf[: len(prompt)] = prompt
    toy_params = {"table": jax.random.normal(jax.random.PRNGKey(1), (V, V))}

    def windowed(temperature=1.0, seed=0, **kw):
        rng = jax.random.PRNGKey(seed)
        out = sampling._generate_windowed(cfg, params, buf, len(prompt), n, temperature, rng, **kw)
        return np.asarray(out)

    return {
        "cached": lambda **kw: sampling.generate(cfg, params, prompt, n, **kw),
        "windowed": windowed,
        "recurrent": lambda **kw: sampling.generate_recurrent(
            _ToyRecurrent(), toy_params, prompt, n, segment_len=2, **kw
        ),
    }


def test_default_pick_is_the_former_pick():
    """200 seeds at once, three temperatures (0 = greedy): the same token every time."""
    logits_V = jax.random.normal(jax.random.PRNGKey(0), (V,)) * 2.0
    keys = jax.random.split(jax.random.PRNGKey(1), 200)
    for temp in (0.8, 1.0, 0.0):
        new = jax.vmap(lambda r, t=temp: sampling._pick(logits_V, r, t))(keys)
        old = jax.vmap(lambda r, t=temp: _old_pick(logits_V, r, t))(keys)
        np.testing.assert_array_equal(new, old)
        assert len(set(np.asarray(new).tolist())) > (1 if temp else 0)


@pytest.mark.parametrize("path", ["cached", "windowed", "recurrent"])
def test_default_samples_are_unchanged(lm, path, monkeypatch):
    cfg, params = lm
    run = _paths(cfg, params, np.array([3, 1, 4], np.int32), 6)[path]
    new = run(temperature=0.8, seed=3)
    monkeypatch.setattr(sampling, "_pick", _old_pick)
    np.testing.assert_array_equal(new, run(temperature=0.8, seed=3))


@pytest.mark.parametrize("path", ["cached", "windowed", "recurrent"])
def test_top_k_and_top_p_reach_every_path(lm, path):
    """top_k = 1 or a tiny nucleus at a high temperature is greedy; a wide one is not."""
    cfg, params = lm
    run = _paths(cfg, params, np.array([5, 2], np.int32), 7)[path]
    greedy = run(temperature=0.0)
    np.testing.assert_array_equal(run(temperature=3.0, top_k=1, seed=4), greedy)
    np.testing.assert_array_equal(run(temperature=3.0, top_p=1e-4, seed=4), greedy)
    assert (run(temperature=3.0, top_k=8, top_p=0.95, seed=4) != greedy).any()


@pytest.mark.parametrize(
    ("kwargs", "field"), [(dict(top_p=0.0), "top_p"), (dict(top_k=-3), "top_k"),
                          (dict(temperature=-1.0), "temperature")],
)  # fmt: skip
def test_bad_settings_raise_before_compiling(lm, kwargs, field):
    cfg, params = lm
    with pytest.raises(ValueError, match=rf"{field} \(--{field}\)"):
        sampling.generate(cfg, params, np.array([1], np.int32), 3, **kwargs)
    with pytest.raises(ValueError, match=rf"{field} \(--{field}\)"):
        sampling.generate_recurrent(_ToyRecurrent(), {}, np.array([1], np.int32), 3,
                                    segment_len=2, **kwargs)  # fmt: skip


def _primed_cache(cfg, params, first_B):
    """A B-row KV cache after feeding each row its own first token."""
    dec = models.TransformerLM(cfg, decode=True)
    tokens_BL = jnp.zeros((len(first_B), L), jnp.int32)
    shapes = jax.eval_shape(dec.init, jax.random.PRNGKey(0), tokens_BL)["cache"]
    cache = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), shapes)
    prime = jax.jit(lambda c, x: dec.apply({"params": params, "cache": c}, x, mutable=["cache"]))
    _, mut = prime(cache, jnp.asarray(first_B)[:, None])

    def step_fn(tokens_N1, cache):
        logits_N1V, mut = dec.apply({"params": params, "cache": cache}, tokens_N1,
                                    mutable=["cache"])  # fmt: skip
        return logits_N1V[:, -1], mut["cache"]

    return step_fn, mut["cache"]


def test_greedy_search_on_the_kv_cache_equals_generate(lm):
    cfg, params = lm
    first, start, n, eos = np.array([3, 8], np.int32), 6, 7, V - 1
    step_fn, cache = _primed_cache(cfg, params, first)
    seqs, _ = jax.jit(lambda c: greedy_search(step_fn, c, batch_size=2, max_len=n, eos_id=eos,
                                              start_id=start))(cache)  # fmt: skip
    lengths = np.asarray(sequence_lengths(seqs, eos))
    for b in range(2):
        want = sampling.generate(cfg, params, np.array([first[b], start]), n, temperature=0.0)
        np.testing.assert_array_equal(seqs[b, : lengths[b]], want[: lengths[b]])


def test_beam_scores_on_the_kv_cache_are_full_forward_scores(lm):
    cfg, params = lm
    b, k, n, eos, alpha, start = 2, 3, 6, 0, 0.6, 7
    first = np.array([2, 9], np.int32)
    step_fn, cache = _primed_cache(cfg, params, first)
    search = jax.jit(lambda c: beam_search(step_fn, c, batch_size=b, beam_size=k, max_len=n,
                                           eos_id=eos, alpha=alpha, start_id=start))  # fmt: skip
    seqs, scores = search(expand_to_beams(cache, k))
    model = models.TransformerLM(cfg)
    full = jax.jit(lambda x: jax.nn.log_softmax(model.apply({"params": params}, x[None])[0]))
    lengths = np.asarray(sequence_lengths(seqs, eos))
    for ex in range(b):
        assert len({tuple(np.asarray(s)) for s in seqs[ex]}) == k  # k distinct hypotheses
        for j in range(k):
            m = int(lengths[ex, j])
            toks = np.zeros(L, np.int32)  # causal: what follows the hypothesis never matters
            toks[: m + 2] = [first[ex], start, *np.asarray(seqs[ex, j, :m])]
            logp_LV = np.asarray(full(jnp.asarray(toks)))
            logp = logp_LV[np.arange(1, m + 1), toks[2 : m + 2]].sum()
            np.testing.assert_allclose(scores[ex, j], logp / ((5 + m) / 6) ** alpha, atol=1e-5)
