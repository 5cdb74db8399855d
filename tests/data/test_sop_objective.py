"""ALBERT's objective as data (``config.data.objective='sop'``, ``seqjax.data.sop``) and its
task (``mlm_pair``): rows ``[CLS] A [SEP] B [SEP]`` of whole consecutive lines, swapped for
label 1 (the same two segments, never a random sentence), n-gram masked; the loss is the
masked-LM mean plus the sentence-order mean; the albert family trains the pair head."""

from __future__ import annotations

import jax
import numpy as np
import optax
import pytest

import seqjax.data as sd
from seqjax import tasks
from seqjax.configs import common
from seqjax.data import sop
from tests.conftest import REPO

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rng = np.random.default_rng(0)
    lines = [f"{i} " + " ".join(rng.choice(WORDS, size=rng.integers(1, 3))) for i in range(3000)]
    path = tmp_path_factory.mktemp("sop") / "lines.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def _cfg(corpus, tfds_dir, **kw):
    cfg = sd.default_config()
    cfg.update(name="text_file", path=str(corpus), vocab="bytes", data_dir=str(tfds_dir),
               manual_dir=None, download=False, batch_size=32, objective="sop", seq_len=48,
               prefetch=1)  # fmt: skip
    cfg.update(kw)
    return cfg


def _batch(cfg):
    it = sd.make(cfg, split="train")
    try:
        return next(it)
    finally:
        it.close()


def test_sop_rows_are_ordered_or_swapped_whole_lines(corpus, tfds_dir):
    cfg = _cfg(corpus, tfds_dir)
    info = sd.info(cfg)
    assert info.task == "mlm_pair" and tasks.get(info.task).family == "albert"
    text = corpus.read_text()
    ids = sop.special_ids(sd.info(sop.base_data(cfg)))
    cls, sep = ids.special.cls, ids.special.sep
    b = _batch(cfg)
    counted = 0
    for row in range(len(b["inputs"])):
        tgt, types = b["targets"][row], b["token_types"][row]
        n = int((tgt > 0).sum())
        assert (tgt[n:] == 0).all() and tgt[0] == cls and tgt[n - 1] == sep
        s = int(np.flatnonzero(tgt[:n] == sep)[0])
        assert (types[: s + 1] == 0).all() and (types[s + 1 : n] == 1).all()
        w = b["weights"][row]
        assert w[[0, s, n - 1]].sum() == 0 and w[n:].sum() == 0  # no special or pad masked
        assert 0 < w.sum() <= round(48 * 0.15)
        unmasked = w == 0
        np.testing.assert_array_equal(b["inputs"][row][unmasked], tgt[unmasked])
        if b["pair_weights"][row] == 0:
            continue
        counted += 1
        a_txt = bytes((tgt[1:s] - 1).tolist()).decode()
        b_txt = bytes((tgt[s + 1 : n - 1] - 1).tolist()).decode()
        assert a_txt.endswith("\n") and b_txt.endswith("\n")  # whole lines: no order cue
        first, second = (b_txt, a_txt) if b["pair_labels"][row] else (a_txt, b_txt)
        assert "\n" + first + second in text  # consecutive lines of the corpus
    assert counted >= 24
    assert 0.2 < b["pair_labels"][b["pair_weights"] > 0].mean() < 0.8


def test_sop_deterministic_and_bad_fields(corpus, tfds_dir):
    a, b = _batch(_cfg(corpus, tfds_dir)), _batch(_cfg(corpus, tfds_dir))
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert not np.array_equal(_batch(_cfg(corpus, tfds_dir, seed=3))["inputs"], a["inputs"])
    for field, value in (("sop_ngram", 0), ("vocab", "words"), ("seq_len", 4)):
        cfg = _cfg(corpus, tfds_dir)
        cfg[field] = value
        with pytest.raises(ValueError, match=rf"config\.data\.{field}=.*valid"):
            sd.info(cfg)


def test_mlm_pair_loss_and_albert_pair_head_trains(corpus, tfds_dir):
    config = common.load_file(REPO / "configs" / "albert.py", "albert_cfg").get_config("smoke")
    config.data = _cfg(corpus, tfds_dir, batch_size=8)
    m = config.model
    m.num_layers, m.d_model, m.d_ff, m.num_heads, m.embed_dim, m.max_len = 1, 16, 32, 2, 8, 48
    info = sd.info(config.data)
    task = tasks.get(info.task).configure(config)
    model = task.make_model(task.model_config(config, info))
    batch = {k: np.asarray(v) for k, v in _batch(config.data).items()}
    task.check_batch(batch)
    params = model.init(jax.random.PRNGKey(0), batch["inputs"][:1])["params"]
    assert "pair_head" in params

    def loss(p):
        outputs, _ = task.apply(model, p, batch, rng=None, train=False)
        sums = task.sums(outputs, batch)
        return sums["loss_sum"] / sums["weight_sum"], (sums, outputs)

    (value, (sums, (mlm, pair))), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
    ce = optax.softmax_cross_entropy_with_integer_labels
    w, pw = batch["weights"], batch["pair_weights"]
    want = (ce(mlm, batch["targets"]) * w).sum() / w.sum()
    want += (ce(pair, batch["pair_labels"]) * pw).sum() / pw.sum()
    np.testing.assert_allclose(value, want, rtol=1e-5)  # MLM mean + SOP mean
    summary = task.eval_summary(jax.device_get(sums), config)
    np.testing.assert_allclose(summary["loss"], want, rtol=1e-5)
    head = jax.tree.leaves(grads["pair_head"])
    assert all(np.isfinite(g).all() for g in head) and any(np.abs(g).max() > 0 for g in head)
