"""Packing for classification, the LM of example texts and sequence-to-sequence: packed
per-example losses equal those of each example alone in a padded row, for every mechanism
that honours segments (a matrix: dense, dense chunked, sparse_strided, local with aligned
examples, flex); exact resume; the efficiency figure; refusals."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import seqjax.data as sd
from seqjax import tasks
from seqjax.data.sources import DataError
from seqjax.models.transformer import (
    TransformerClassifier,
    TransformerConfig,
    TransformerLM,
    attention_cycle,
)

_LISTOPS = dict(name="listops", max_len=48, listops_train_size=64, listops_validation_size=16,
                listops_test_size=16, listops_min_length=4, listops_max_length=40,
                listops_max_depth=3, listops_max_args=4, listops_num_procs=1, batch_size=4,
                packing=True, max_examples_per_row=6)  # fmt: skip
MECHANISMS = {
    "dense": {},
    "dense_chunked": {"dense": {"implementation": "chunked", "block_q": 16, "block_k": 16}},
    "sparse_strided": {"sparse_strided": {"stride": 8, "block_size": 4}},
    "local": {"local": {"block_len": 8, "block_size": 8}},
    "flex": {"flex": {"pattern": "sliding_window", "window": 5, "block_size": 8}},
}


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
    c = sd.default_config()
    c.update(data_dir=str(tmp_path_factory.mktemp("tfds")), manual_dir=None, download=False,
             prefetch=1, **_LISTOPS)  # fmt: skip
    return c


class _Cfg:  # what ``Task.configure`` reads
    def __init__(self, packing, pooling="mean"):
        self.data = {"packing": packing}


def _mechanism(name):
    mech = "dense" if name.startswith("dense") else name
    return attention_cycle(mech, MECHANISMS[name]), (8 if name == "local" else 1)


def _segments(seg_T):
    return [np.flatnonzero(seg_T == s) for s in range(1, seg_T.max() + 1)]


def test_packed_classification_rows(cfg):
    it = sd.make(cfg, split="train")
    assert it.packing_efficiency > 0.5
    b = next(it)
    assert set(b) == {"inputs", "segment_ids", "positions", "targets", "weights"}
    assert b["targets"].shape == b["weights"].shape == (4, 6)
    n_B = b["segment_ids"].max(1)
    np.testing.assert_array_equal(b["weights"].sum(1), n_B)  # one label per example
    assert (n_B >= 2).any()
    state = it.get_state()
    want = [next(it) for _ in range(3)]
    again = sd.make(cfg, split="train")
    again.set_state(state)
    for w in want:  # exact resume of the packed iterator (epochs cross: 64 examples)
        got = next(again)
        for k in w:
            np.testing.assert_array_equal(got[k], w[k])
    ev = sd.make(cfg, split="validation", train=False)
    labels = [int(x["weights"].sum()) for x in ev]
    assert sum(labels) == 16  # every example once
    # the same labels as the unpacked evaluation, in order
    plain = cfg.copy_and_resolve_references()
    plain.packing = False

    def labels(c):
        it = sd.make(c, split="validation", train=False)
        return np.concatenate([x["targets"][x["weights"] > 0] for x in it])

    ref, got = labels(plain), labels(cfg)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize(
    "pooling, mech",
    [
        ("mean", "dense"),
        ("cls", "dense"),
        pytest.param("mean", "sparse_strided", marks=pytest.mark.slow),
        pytest.param("mean", "flex", marks=pytest.mark.slow),
    ],
)
def test_packed_classification_losses_equal_unpacked(cfg, pooling, mech):
    info = sd.info(cfg)
    batch = next(sd.make(cfg, split="train"))
    attention, _ = _mechanism(mech)
    mcfg = TransformerConfig(vocab_size=info.vocab_size, num_layers=2, num_heads=2, d_model=16,
                             max_len=64, causal=False, pad_id=0, num_classes=10,
                             pooling=pooling, attention=attention)  # fmt: skip
    model = TransformerClassifier(mcfg)
    params = jax.jit(model.init)(jax.random.PRNGKey(0), jnp.zeros((1, 48), jnp.int32))["params"]
    task = tasks.get("classification")
    packed_task = task.configure(_Cfg(True))

    @jax.jit
    def packed_ce(b):
        logits = packed_task.apply(model, params, b, rng=None, train=False)[0]
        return optax.softmax_cross_entropy_with_integer_labels(logits, b["targets"])

    packed_BK = np.asarray(packed_ce(batch))
    rows, labels, want = [], [], []
    for r in range(4):
        for s, at in enumerate(_segments(batch["segment_ids"][r])):
            row = np.zeros(48, np.int32)
            row[: len(at)] = batch["inputs"][r, at]
            rows.append(row)
            labels.append(batch["targets"][r, s])
            want.append(packed_BK[r, s])
    alone = {"inputs": np.stack(rows), "targets": np.array(labels, np.int32)}

    @jax.jit
    def alone_ce(b):
        logits = task.apply(model, params, b, rng=None, train=False)[0]
        return optax.softmax_cross_entropy_with_integer_labels(logits, b["targets"])

    np.testing.assert_allclose(np.asarray(alone_ce(alone)), want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("mech", ["dense", "dense_chunked", "sparse_strided", "local", "flex"])
def test_packed_lm_losses_equal_unpacked(cfg, mech):
    attention, align = _mechanism(mech)
    c = cfg.copy_and_resolve_references()
    c.objective, c.packing_align = "lm", align
    info = sd.info(c)
    assert info.task == "lm"
    it = sd.make(c, split="train")
    batch = next(it)
    assert set(batch) == {"inputs", "targets", "weights", "segment_ids", "positions"}
    seg = batch["segment_ids"]
    if align > 1:  # every example starts at a multiple of the alignment
        starts = np.flatnonzero((batch["positions"] == 0) & (seg > 0)) % 48
        assert (starts % align == 0).all()
    mcfg = TransformerConfig(vocab_size=info.vocab_size, num_layers=2, num_heads=2, d_model=16,
                             max_len=64, causal=True, pad_id=0, attention=attention)  # fmt: skip
    model = TransformerLM(mcfg)
    params = jax.jit(model.init)(jax.random.PRNGKey(1), jnp.zeros((1, 48), jnp.int32))["params"]
    lm = tasks.get("lm")

    def token_ce(b, packed):
        logits = lm.configure(_Cfg(packed)).apply(model, params, b, rng=None, train=False)[0]
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, b["targets"])
        return ce * b["weights"]

    packed_BT = np.asarray(jax.jit(lambda b: token_ce(b, True))(batch))
    rows, want = [], []
    for r in range(4):
        for at in _segments(seg[r]):
            row = {k: np.zeros(48, batch[k].dtype) for k in ("inputs", "targets", "weights")}
            for k in row:
                row[k][: len(at)] = batch[k][r, at]
            rows.append(row)
            want.append(packed_BT[r, at])
    alone = {k: np.stack([row[k] for row in rows]) for k in rows[0]}
    alone_BT = np.asarray(jax.jit(lambda b: token_ce(b, False))(alone))
    for i, w in enumerate(want):  # per-document losses
        np.testing.assert_allclose(alone_BT[i, : len(w)], w, rtol=2e-5, atol=2e-5)
    # the unpacked LM of example texts: one document per row, the same documents
    plain = c.copy_and_resolve_references()
    plain.packing = False
    one = next(sd.make(plain, split="validation", train=False))
    assert set(one) == {"inputs", "targets", "weights"}
    inside = one["weights"][:, 1:] > 0  # input t+1 is the target of t within a document
    np.testing.assert_array_equal(one["inputs"][:, 1:][inside], one["targets"][:, :-1][inside])


@pytest.fixture(scope="module")
def s2s_cfg(tmp_path_factory):
    c = sd.default_config()
    c.update(data_dir=str(tmp_path_factory.mktemp("tfds_s2s")), name="reverse",
             max_source_len=24, max_target_len=24, copy_vocab_size=12, dup_eval_size=12,
             batch_size=4, prefetch=1, packing=True)  # fmt: skip
    return c


@pytest.mark.parametrize("mech", ["dense", pytest.param("flex", marks=pytest.mark.slow)])
def test_packed_seq2seq_losses_equal_unpacked(s2s_cfg, mech):
    from seqjax.models.encoder_decoder import EncoderDecoder, EncoderDecoderConfig

    it = sd.make(s2s_cfg, split="train")
    batch = next(b for b in it if (b["segment_ids"].max(1) >= 2).any())
    assert {"segment_ids", "positions", "target_segment_ids", "target_positions"} <= set(batch)
    seg, tseg = batch["segment_ids"], batch["target_segment_ids"]
    assert (seg.max(1) == tseg.max(1)).all() and (seg.max(1) >= 2).any()
    assert 0 < it.packing_efficiency <= 1
    attention, _ = _mechanism(mech)
    mcfg = EncoderDecoderConfig(vocab_size=12, encoder_layers=1, decoder_layers=2, num_heads=2,
                                d_model=16, max_source_len=24, max_target_len=24,
                                encoder_attention=attention)  # fmt: skip
    model = EncoderDecoder(mcfg)
    z = jnp.zeros((1, 24), jnp.int32)
    params = jax.jit(model.init)(jax.random.PRNGKey(2), z, z)["params"]
    task = tasks.get("seq2seq")

    def token_ce(b, packed):
        t = task.configure(_S2SCfg(packed))
        logits = t.apply(model, params, b, rng=None, train=False)[0]
        return optax.softmax_cross_entropy_with_integer_labels(logits, b["targets"]) * b["weights"]

    packed_BT = np.asarray(jax.jit(lambda b: token_ce(b, True))(batch))
    rows, want = [], []
    for r in range(4):
        for s in range(1, seg[r].max() + 1):
            src, tgt = np.flatnonzero(seg[r] == s), np.flatnonzero(tseg[r] == s)
            row = {"inputs": np.zeros(24, np.int32), "targets": np.zeros(24, np.int32)}
            row["inputs"][: len(src)] = batch["inputs"][r, src]
            row["targets"][: len(tgt)] = batch["targets"][r, tgt]
            rows.append(row)
            want.append(packed_BT[r, tgt])
    alone = {k: np.stack([row[k] for row in rows]) for k in rows[0]}
    alone["weights"] = (alone["targets"] > 0).astype(np.float32)
    alone_BT = np.asarray(jax.jit(lambda b: token_ce(b, False))(alone))
    for i, w in enumerate(want):  # per-pair losses
        np.testing.assert_allclose(alone_BT[i, : len(w)], w, rtol=2e-5, atol=2e-5)
    # every evaluation pair once
    ev = sd.make(s2s_cfg, split="validation", train=False)
    assert sum(int(x["segment_ids"].max(1).sum()) for x in ev) == 12


class _S2SCfg:
    def __init__(self, packing):
        self.data = {"packing": packing}
        self.train = {"label_smoothing": 0.0}

    def get(self, key, default=None):
        return default


def test_packed_translation_rows_hold_the_unpacked_pairs(make_cfg, shared_data, tmp_path):
    import gzip

    path = tmp_path / "en-de-slice.jsonl.gz"
    with gzip.open(shared_data / "software_l10n" / "en-de.jsonl.gz", "rt", encoding="utf-8") as f:
        lines = [line for _, line in zip(range(1500), f)]
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines(lines)
    cfg = make_cfg(name="translation_jsonl", path=str(path), vocab="sentencepiece",
                   vocab_size=500, heldout_fraction=0.2, max_source_len=48,
                   max_target_len=56, packing=True)  # fmt: skip
    plain = cfg.copy_and_resolve_references()
    plain.packing = False
    want = []
    for b in sd.make(plain, split="validation", train=False):
        for r in range(len(b["inputs"])):
            if b["weights"][r].any():
                src, tgt = b["inputs"][r], b["targets"][r]
                want.append((tuple(src[src > 0]), tuple(tgt[tgt > 0])))
    it = sd.make(cfg, split="validation", train=False)
    assert it.packing_efficiency > 0.4
    got = []
    for b in it:
        seg, tseg = b["segment_ids"], b["target_segment_ids"]
        assert (b["weights"] == (tseg > 0)).all()
        for r in range(len(seg)):
            for s in range(1, seg[r].max() + 1):
                got.append((tuple(b["inputs"][r][seg[r] == s]),
                            tuple(b["targets"][r][tseg[r] == s])))  # fmt: skip
                assert (b["target_positions"][r][tseg[r] == s] == np.arange(len(got[-1][1]))).all()
    assert got == want  # the same pairs, in the same order, nothing cut


def _smoke(data_cfg, **model):
    from seqjax.configs import common
    from tests.train.conftest import CONFIG

    config = common.load_file(CONFIG).get_config("smoke")
    config.data = data_cfg.copy_and_resolve_references()
    config.data.batch_size = 8
    config.model.max_len = 64
    for k, v in model.items():
        setattr(config.model, k, v)
    return config


@pytest.mark.parametrize(
    "model, match",
    [
        ({"attention": "linformer"}, r"config\.data\.packing=True .*'linformer'"),
        ({"attention": "lsh"}, r"config\.data\.packing=True .*'lsh'"),
        ({"attention": "performer"}, r"config\.data\.packing=True .*'performer'"),
        ({"attention": "local"}, r"config\.data\.packing_align=1 .*a multiple of 64"),
    ],
)
def test_mechanisms_that_cannot_honour_segments_refuse_packing(cfg, model, match):
    from seqjax.train import config_validation

    config = _smoke(cfg, **model)
    if model["attention"] == "linformer":
        config.model.attention_options.linformer = {"k": 8, "max_len": 64}
    with pytest.raises(config_validation.ConfigError, match=match):
        config_validation.validate(config)
    if model["attention"] == "local":  # aligned examples are accepted
        config.data.packing_align = 64
        config_validation.validate(config)


def test_packing_refused_for_stream_corpora_and_reversible_seq2seq(cfg, s2s_cfg, shakespeare):
    from seqjax.train import config_validation

    c = sd.default_config()
    c.update(name="text_file", path=shakespeare, packing=True)
    with pytest.raises(DataError, match=r"config\.data\.packing=True .*dense token stream"):
        sd.info(c)
    config = _smoke(s2s_cfg, reversible=True)
    with pytest.raises(config_validation.ConfigError, match=r"data\.packing=True .*reversible"):
        config_validation.validate(config)
