"""Masked LM (``config.data.objective='mlm'``): BERT's 15% / 80-10-10 masking, loss only on
the chosen positions, seeded masks that resume exactly, a bidirectional encoder, and one
error naming the field for a causal model kind or an unknown objective."""

from __future__ import annotations

import numpy as np
import pytest

import seqjax.data as sd
from seqjax import tasks
from seqjax.data import objectives
from seqjax.train import config_validation, loop

_TEXT = "".join(f"def f_{i % 17}(x):\n    return x * {i % 7} + {i % 5}\n" for i in range(400))


def test_mask_tokens_follows_bert_80_10_10():
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, 50, size=(256, 256)).astype(np.int32)
    real = np.ones(tokens.shape, bool)
    real[:, 200:] = False  # padding is never chosen
    out = objectives.mask_tokens(tokens, real, np.arange(256), seed=3, stream=0,
                                 mask_id=50, low=1, high=50)  # fmt: skip
    chosen = out["weights"] > 0
    assert not chosen[:, 200:].any()
    share = chosen[:, :200].mean()
    assert 0.14 < share < 0.16, share
    np.testing.assert_array_equal(out["targets"], tokens)  # targets: the original tokens
    np.testing.assert_array_equal(out["inputs"][~chosen], tokens[~chosen])
    masked = out["inputs"][chosen] == 50
    same = out["inputs"][chosen] == tokens[chosen]
    assert 0.78 < masked.mean() < 0.82, masked.mean()
    # 10% random (a random id equals the original 1/49 of the time) + 10% unchanged
    assert 0.09 < (~masked & ~same).mean() < 0.11
    assert 0.09 < same.mean() < 0.115
    assert out["inputs"].min() >= 1 and out["inputs"].max() <= 50  # never pad 0
    again = objectives.mask_tokens(tokens, real, np.arange(256), seed=3, stream=0,
                                   mask_id=50, low=1, high=50)  # fmt: skip
    other = objectives.mask_tokens(tokens, real, np.arange(256), seed=4, stream=0,
                                   mask_id=50, low=1, high=50)  # fmt: skip
    np.testing.assert_array_equal(again["weights"], out["weights"])
    assert (other["weights"] != out["weights"]).any()


@pytest.fixture(scope="module")
def text_cfg(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlm")
    (root / "t.txt").write_text(_TEXT)

    def make(**overrides):
        cfg = sd.default_config()
        cfg.update(name="text_file", path=str(root / "t.txt"), vocab="chars",
                   data_dir=str(root / "tfds"), manual_dir=None, download=False, batch_size=8,
                   seq_len=32, prefetch=1, objective="mlm")  # fmt: skip
        cfg.update(overrides)
        return cfg

    return make


def test_mlm_data_mask_id_seeded_batches_and_exact_resume(text_cfg):
    cfg = text_cfg()
    base = sd.info(text_cfg(objective=""))
    info = sd.info(cfg)
    assert info.task == "mlm" and info.mask_id == base.vocab_size
    assert info.vocab_size == base.vocab_size + 1
    it = sd.make(cfg, split="train")
    batches = [next(it) for _ in range(3)]
    state = it.get_state()
    after = [next(it) for _ in range(2)]
    resumed = sd.make(cfg, split="train")
    resumed.set_state(state)
    for want in after:  # the masks of the next steps are exactly those of the straight run
        got = next(resumed)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])
    b = batches[0]
    assert set(b) == {"inputs", "targets", "weights"} and b["inputs"].shape == (8, 32)
    assert (b["inputs"] == info.mask_id).any()
    assert not np.array_equal(batches[0]["weights"], batches[1]["weights"])  # fresh each step
    # two hosts hold disjoint rows of the same global batch
    halves = [sd.make(cfg, split="train", process_index=p, process_count=2) for p in (0, 1)]
    joined = np.concatenate([next(h)["weights"] for h in halves])
    np.testing.assert_array_equal(joined, b["weights"])
    # evaluation: fixed masks, real positions only
    ev1 = next(sd.make(cfg, split="validation", train=False))
    ev2 = next(sd.make(cfg, split="validation", train=False))
    np.testing.assert_array_equal(ev1["weights"], ev2["weights"])
    assert ev1["weights"].sum() > 0


def _tiny(helpers_config, **extra):
    config = helpers_config
    for key, value in extra.items():
        node = config
        *parents, leaf = key.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return config


def _config(text_cfg, tmp, **extra):
    from seqjax.configs import common

    config = common.load_file(config_validation.__file__.replace(
        "seqjax/train/config_validation.py", "configs/char_lm.py")).get_config("smoke")  # fmt: skip
    config.data = text_cfg()
    o = {"model.num_layers": 1, "model.d_model": 32, "model.num_heads": 2,
         "model.max_len": 64, "mesh.data": 1, "optimizer.warmup_steps": 1,
         "train.num_steps": 4, "train.log_every": 1, "train.eval_every": 0,
         "train.checkpoint_every": 2, "train.final_eval": True, "train.eval_max_batches": 2,
         "train.sample_length": 0}  # fmt: skip
    o.update(extra)
    return _tiny(config, **o)


def test_mlm_rejects_causal_kind_and_bad_objective(text_cfg, tmp_path):
    config = _config(text_cfg, tmp_path, **{"model.kind": "transformer_xl"})
    with pytest.raises(config_validation.ConfigError, match=r"config\.model\.kind"):
        config_validation.validate(config)
    config = _config(text_cfg, tmp_path, **{"model.attention": "causal"})
    with pytest.raises(config_validation.ConfigError, match=r"config\.model\.attention='causal'"):
        config_validation.validate(config)
    config = _config(text_cfg, tmp_path)
    config.data.objective = "bert"
    with pytest.raises(config_validation.ConfigError, match=r"config\.data\.objective='bert'"):
        config_validation.validate(config)
    assert tasks.for_data_config(text_cfg()).name == "mlm"
    assert not tasks.get("mlm").causal


def _losses(workdir):
    import json

    out = {}
    for line in (workdir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if "train/loss" in rec:
            out.setdefault(rec["step"], []).append(rec["train/loss"])
    return out


def test_mlm_run_resumes_exactly_and_reports_perplexity(text_cfg, tmp_path):
    """4 steps straight == 2 steps, then a resumed run of 2 more (masks included)."""
    straight = loop.train_and_evaluate(_config(text_cfg, tmp_path), str(tmp_path / "a"))
    loop.train_and_evaluate(_config(text_cfg, tmp_path, **{"train.stop_after": 2}),
                            str(tmp_path / "b"))  # fmt: skip
    loop.train_and_evaluate(_config(text_cfg, tmp_path), str(tmp_path / "b"))
    a, b = _losses(tmp_path / "a"), _losses(tmp_path / "b")
    assert sorted(a) == sorted(b) == [1, 2, 3, 4]
    for s in a:
        assert b[s] == a[s], (s, a[s], b[s])
    test = straight["test"]
    assert {"loss", "accuracy", "perplexity"} <= set(test)
    np.testing.assert_allclose(test["perplexity"], np.exp(test["loss"]), rtol=1e-6)
