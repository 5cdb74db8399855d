"""``config.init_from``: a masked-LM checkpoint's encoder initialises a classifier (sharded
over 8 fake devices), new heads keep their fresh initialisation, the [MASK] row is dropped,
and a missing / foreign / mismatched / damaged checkpoint is one error naming the field."""

from __future__ import annotations

import json
import shutil

import jax
import numpy as np
import pytest
from flax import traverse_util

from seqjax.train import errors, init_from, loop, setup

_DATA = {
    "data.name": "listops",
    "data.vocab": "bytes",  # the base config is a char LM; ListOps has its own tokens
    "data.max_len": 48,
    "data.listops_train_size": 64,
    "data.listops_validation_size": 16,
    "data.listops_test_size": 16,
    "data.listops_min_length": 4,
    "data.listops_max_length": 48,
    "data.listops_max_depth": 3,
    "data.listops_max_args": 4,
    "data.listops_num_procs": 1,
    "data.batch_size": 8,
    "model.num_layers": 1,
    "model.d_model": 32,
    "model.num_heads": 2,
    "model.max_len": 64,
    "train.num_steps": 2,
    "train.eval_every": 0,
    "train.final_eval": False,
    "train.checkpoint_every": 0,
    "train.sample_length": 0,
    "optimizer.warmup_steps": 1,
}


def _config(tmp, **extra):
    from seqjax.configs import common
    from tests.train.conftest import CONFIG

    config = common.load_file(CONFIG).get_config("smoke")
    config.data.data_dir = str(tmp / "tfds")
    for key, value in {**_DATA, **extra}.items():
        node = config
        *parents, leaf = key.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return config


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A 2-step masked-LM run on the ListOps texts (one device)."""
    tmp = tmp_path_factory.mktemp("pre")
    config = _config(tmp, **{"data.objective": "mlm", "mesh.data": 1})
    loop.train_and_evaluate(config, str(tmp / "mlm"))
    return tmp


def _params(workdir):
    run, state, _ = setup.restore_latest(str(workdir))
    return traverse_util.flatten_dict(jax.device_get(state["params"]))


def test_classifier_from_mlm_checkpoint_sharded(pretrained, tmp_path):
    assert jax.device_count() == 8
    saved = _params(pretrained / "mlm")
    config = _config(pretrained, **{"mesh.data": 1, "mesh.fsdp": 8})
    config.init_from = str(pretrained / "mlm")
    run = setup.build(config)
    ckpt = loop.checkpoint.Checkpointer(tmp_path, max_to_keep=1, async_save=False)
    it = loop.data_lib.make(config.data, split="train")
    state, latest = loop._restore_or_init(run, ckpt, it, tmp_path)
    it.close()
    assert latest is None
    got = traverse_util.flatten_dict(jax.device_get(state["params"]))
    fresh = traverse_util.flatten_dict(jax.device_get(run.init()["params"]))
    for path, value in got.items():
        if path[0] == "encoder":
            want = saved[path]
            if path == init_from.EMBEDDING:
                assert want.shape[0] == value.shape[0] + 1  # [MASK] appended in pre-training
                want = want[: value.shape[0]]
            np.testing.assert_array_equal(value, want, err_msg="/".join(path))
        else:  # the classifier's pooling and head: fresh
            np.testing.assert_array_equal(value, fresh[path], err_msg="/".join(path))
    # the arrays carry the new run's shardings (fsdp over 8 devices)
    emb = state["params"]["encoder"]["embed"]["embedding"]
    assert emb.sharding == run.abstract["params"]["encoder"]["embed"]["embedding"].sharding
    record = json.loads((tmp_path / "init_from.json").read_text())
    assert "head/kernel" in record["new"]
    # BERT's MLM head (model.mlm_head_transform) is a pre-training head: not loaded
    assert record["unused"] and all(x.startswith("mlm_head/") for x in record["unused"])
    assert any(x.startswith("encoder/embed/embedding (first") for x in record["loaded"])


def test_bad_init_from_is_one_sentence(pretrained, tmp_path):
    config = _config(pretrained, **{"mesh.data": 1})
    with pytest.raises(init_from.InitFromError, match=r"config\.init_from=.* is neither"):
        init_from.apply(setup.build(config), str(tmp_path / "nothing"))
    # another width: the first encoder parameter that differs is named
    run = setup.build(_config(pretrained, **{"mesh.data": 1, "model.d_model": 16}))
    with pytest.raises(init_from.InitFromError, match=r"parameter encoder/\S+ of shape"):
        init_from.apply(run, str(pretrained / "mlm"))
    # damaged: the state's array files are gone
    bad = tmp_path / "bad"
    shutil.copytree(pretrained / "mlm" / "checkpoints", bad / "checkpoints")
    step = next(p for p in (bad / "checkpoints").iterdir() if p.name.isdigit())
    for f in (step / "state").iterdir():
        if f.is_dir():
            shutil.rmtree(f)
    with pytest.raises(init_from.InitFromError, match=r"damaged checkpoint"):
        init_from.apply(setup.build(config), str(step))
    # exit status 2 through the command lines' error report
    message, status = errors.message(init_from.InitFromError("config.init_from='x' is bad"))
    assert status == 2 and message.startswith("config.init_from")


def test_foreign_architecture():
    x = jax.ShapeDtypeStruct((2, 2), np.float32)
    abstract = {"encoder": {"embed": {"embedding": x}, "block_0": {"w": x, "v": x}}}
    # an encoder-decoder: encoder blocks, but its token table outside the encoder
    saved = {("encoder", "block_0", "w"): x, ("embed", "embedding"): x}
    with pytest.raises(init_from.InitFromError, match="another architecture: it has no enc"):
        init_from.plan(saved, abstract, "x")
    saved = {("encoder", "block_0", "w"): x, init_from.EMBEDDING: x}  # another mechanism
    with pytest.raises(init_from.InitFromError, match="lacks this model's encoder/block_0/v"):
        init_from.plan(saved, abstract, "x")


def test_another_vocabulary_is_refused(tmp_path):
    """A larger checkpoint table keeps its first rows ([MASK] dropped), so the vocabulary
    itself is compared: a subword pre-training must not load into a byte or other-size model."""
    import ml_collections

    data = {"name": "imdb_bytes", "vocab": "sentencepiece", "vocab_size": 8000,
            "spm_model_type": "bpe", "objective": "mlm"}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps({"data": data}))
    state = str(tmp_path / "checkpoints" / "7" / "state")
    same = ml_collections.ConfigDict({**data, "objective": None})  # the fine-tuning run
    init_from.check_vocabulary("w", state, same)
    for change, named in (({"vocab": "bytes"}, "vocab='sentencepiece'"),
                          ({"vocab_size": 4000}, "vocab_size=8000"),
                          ({"spm_model_type": "unigram"}, "spm_model_type='bpe'"),
                          ({"name": "wikitext2"}, "name='imdb_bytes'")):  # fmt: skip
        other = ml_collections.ConfigDict({**data, **change})
        with pytest.raises(init_from.InitFromError, match=rf"config\.init_from='w' .*{named}"):
            init_from.check_vocabulary("w", state, other)
    # byte runs of different data sets share the byte vocabulary
    data_b = {"name": "listops", "vocab": "bytes"}
    (tmp_path / "config.json").write_text(json.dumps({"data": data_b}))
    init_from.check_vocabulary("w", state, ml_collections.ConfigDict({"name": "imdb_bytes"}))
    (tmp_path / "config.json").unlink()  # a bare checkpoint: nothing to compare
    init_from.check_vocabulary("w", state, ml_collections.ConfigDict(data))


def test_init_from_logs_no_spurious_missing_metadata_warning(pretrained, caplog, monkeypatch):
    """Issue 40, item 3: Orbax's ``Metadata file does not exist: .../state/
    _CHECKPOINT_METADATA`` (the step's file, one folder up) is not logged by init_from; the
    same calls without the filter do log it (the check can fail)."""
    import contextlib
    import logging

    config = _config(pretrained, **{"mesh.data": 1})
    config.init_from = str(pretrained / "mlm")
    run = setup.build(config)

    def warnings():
        return [r for r in caplog.records if "Metadata file does not exist" in r.getMessage()]

    with caplog.at_level(logging.WARNING):
        init_from.apply(run, config.init_from)
    assert warnings() == []
    monkeypatch.setattr(init_from, "_quiet_item_metadata", contextlib.nullcontext)
    with caplog.at_level(logging.WARNING):
        init_from.apply(run, config.init_from)
    assert warnings()  # the message this filter exists for
