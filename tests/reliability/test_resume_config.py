"""Resuming with a different config (issue 16, item 5): compared with the workdir's
``config.json`` before restoring; fields that make the checkpoint unusable (model shape,
vocabulary, data, data fingerprint) stop the job with one message, allowed ones are logged."""

from __future__ import annotations

import json
import logging
import shutil

import jax.numpy as jnp
import pytest

from seqjax import data as data_lib
from seqjax.train import checkpoint, errors, resume_check


@pytest.fixture
def trained(helpers, corpus, tmp_path):
    """A workdir as a run leaves it: config.json and one checkpoint whose data state
    carries the data fingerprint (of a private copy of the corpus)."""
    text = tmp_path / "corpus.txt"
    shutil.copy(corpus["path"], text)
    extra = {"data.path": str(text)}
    config = helpers.tiny_config(corpus, **extra)
    work = tmp_path / "work"
    work.mkdir()
    (work / "config.json").write_text(config.to_json_best_effort(indent=2))
    fp = data_lib.info(config.data).fingerprint
    ckpt = checkpoint.Checkpointer(str(work), max_to_keep=2, async_save=False)
    ckpt.save(5, {"step": jnp.int32(5)}, {"spec": {"fingerprint": fp}}, {})
    ckpt.wait()
    ckpt.close()
    return {"work": work, "text": text, "config": lambda **kw: helpers.tiny_config(
        corpus, **extra, **kw)}  # fmt: skip


def _refused(trained, config, expected: list[str]) -> str:
    with pytest.raises(resume_check.ResumeConfigError) as e:
        resume_check.check(config, str(trained["work"]))
    msg, code = errors.message(e.value)
    assert code == 2
    for text in expected:
        assert text in msg, msg
    return msg


@pytest.mark.parametrize(
    "override,expected",
    [
        ({"model.d_model": 64}, ["config.model.d_model: 32 -> 64 (model shape)"]),
        ({"model.num_layers": 3}, ["config.model.num_layers: 2 -> 3 (model shape)"]),
        ({"data.seq_len": 16}, ["config.data.seq_len: 32 -> 16 (data"]),
        ({"data.vocab": "bytes"}, ["config.data.vocab: 'chars' -> 'bytes' (vocabulary)"]),
        ({"data.name": "pystdlib"}, ["config.data.name: 'text_file' -> 'pystdlib'"]),
    ],
)
def test_unusable_change_is_refused(trained, override, expected):
    msg = _refused(trained, trained["config"](**override), expected + ["--workdir"])
    assert "config.json" in msg


def test_changed_training_file_is_refused(trained):
    with open(trained["text"], "a") as f:
        f.write("alpha = beta * 9\n" * 50)
    _refused(trained, trained["config"](), ["data fingerprint", "checkpoint 5", "data changed"])


def test_allowed_changes_are_logged(trained, caplog):
    config = trained["config"](**{"optimizer.learning_rate": 1e-3, "train.num_steps": 80})
    with caplog.at_level(logging.WARNING):
        resume_check.check(config, str(trained["work"]))
    assert "config.optimizer.learning_rate: 0.003 -> 0.001 (allowed)" in caplog.text
    assert "config.train.num_steps: 40 -> 80 (allowed)" in caplog.text


def test_same_config_and_fresh_workdir_pass(trained, tmp_path):
    resume_check.check(trained["config"](), str(trained["work"]))
    resume_check.check(trained["config"](**{"model.d_model": 64}), str(tmp_path / "new"))


def test_compare_lists_both_kinds():
    saved = {"model": {"d_model": 32}, "optimizer": {"learning_rate": 0.1}}
    new = json.loads(json.dumps({"model": {"d_model": 64}, "optimizer": {"learning_rate": 0.2}}))
    blocking, allowed = resume_check.compare(saved, new)
    assert blocking == ["config.model.d_model: 32 -> 64 (model shape)"]
    assert allowed == ["config.optimizer.learning_rate: 0.1 -> 0.2"]


def test_field_of_another_version_is_not_blocking():
    saved = {"model": {"d_model": 32}}
    new = {"model": {"d_model": 32, "kind": "transformer"}}
    assert resume_check.compare(saved, new) == (
        [],
        ["config.model.kind: '<unset>' -> 'transformer'"],
    )
