"""Issue 50, faults at the new edges (no process started here; the real-process ones are in
``test_issue50_faults.py``): an unusable compilation cache (item 3), a complete last
metrics line without its newline (item 6), ``train.xent_chunk`` of every task (item 7)."""

from __future__ import annotations

import json
import logging
import os

import jax
import pytest

from seqjax import compile_cache
from seqjax.configs import common
from seqjax.train import config_validation, lines

CONFIGS = common.__file__.replace("seqjax/configs/common.py", "configs")


def _config(name: str, variant: str):
    return common.load_file(f"{CONFIGS}/{name}.py").get_config(variant)


def _problems(config) -> str:
    with pytest.raises(config_validation.ConfigError) as e:
        config_validation.validate(config, num_devices=1, process_count=1)
    return str(e.value)


@pytest.mark.parametrize("name,variant", [("translation", "copy"), ("mlm", "smoke"),
                                          ("char_lm", "smoke")])  # fmt: skip
def test_a_negative_xent_chunk_is_refused_for_every_task(name, variant):
    config = _config(name, variant)
    config.train.xent_chunk = -3
    problems = _problems(config)
    assert "config.train.xent_chunk=-3 is invalid; valid: None (auto)" in problems
    assert problems.count("xent_chunk") == 1  # once, not once per stage


@pytest.mark.parametrize("value", ["5", "cache"])
def test_a_compilation_cache_that_is_no_path_is_refused(value, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = _config("char_lm", "smoke")
    config.train.compilation_cache = value
    assert f"config.train.compilation_cache={value!r} is invalid; valid: 'auto', 'off'" in (
        _problems(config)
    )
    assert not os.listdir(tmp_path)  # no ./5 made
    for fine in ("auto", "off", "", "./5", "~/cache", "/tmp/c", "caches/jax", None):
        assert compile_cache.setting_problem(fine) is None
    assert compile_cache.setting_problem(5) and compile_cache.setting_problem(True)


def _unusable_dirs(tmp_path) -> dict:
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    out = {"a file": str(a_file), "below a file": str(a_file / "cache"), "/proc": "/proc"}
    return out


def test_an_unusable_compilation_cache_warns_once_and_runs_without(tmp_path, caplog):
    for what, directory in _unusable_dirs(tmp_path).items():
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger=compile_cache.__name__):
            assert compile_cache.enable(directory) is None, what
        [record] = caplog.records
        assert directory in record.getMessage() and "running without" in record.getMessage()


def test_the_environment_naming_a_file_is_named_in_the_warning(tmp_path, monkeypatch, caplog):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    monkeypatch.setenv(compile_cache.ENV_DIR, str(a_file))
    config = _config("char_lm", "smoke")
    with caplog.at_level(logging.WARNING, logger=compile_cache.__name__):
        assert compile_cache.enable_for(config) is None
    [record] = caplog.records
    assert f"${compile_cache.ENV_DIR}" in record.getMessage()
    assert "(it is a file, not a folder)" in record.getMessage()


def _rows(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]  # strict: every line


def test_a_complete_last_line_without_newline_is_kept(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "train/loss": 1.0}\n{"step": 2, "train/loss": 2.0}')
    f = lines.LineFile(path)  # the resumed run opens the file
    f.write('{"step": 3, "train/loss": 3.0}\n')
    f.close()
    assert [r["step"] for r in _rows(path)] == [1, 2, 3]


def test_an_unparseable_last_line_is_still_torn(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2, "train/loss": 2.')
    assert lines.repair_torn_tail(str(path)) == len('{"step": 2, "train/loss": 2.')
    assert path.read_text() == '{"step": 1}\n'
    path.write_text('{"step": 1}\n\xff\xfe')  # not even text
    assert lines.repair_torn_tail(str(path)) > 0 and path.read_text() == '{"step": 1}\n'


def _one_sentence(e) -> str:
    text = str(e.value)
    assert "\n" not in text and "Error while deserializing" not in text.split("(")[0]
    return text


def test_an_empty_truncated_or_missing_weights_file_is_named(tmp_path):
    import numpy as np

    from seqjax.convert import folder

    tensors = {"a": np.ones((8, 8), np.float32), "b": np.zeros((4,), np.float32)}
    good = folder.write_folder(tmp_path / "good", {"model_type": "gpt2"}, tensors)
    assert set(folder.read_tensors(good)) == {"a", "b"}
    data = (good / folder.WEIGHTS).read_bytes()
    for what, cut, says in [("empty", b"", "is empty (0 bytes)"),
                            ("truncated", data[: len(data) // 2], "is not a complete"),
                            ("header cut", data[:20], "is not a complete")]:  # fmt: skip
        bad = tmp_path / what
        folder.write_folder(bad, {"model_type": "gpt2"}, tensors)
        (bad / folder.WEIGHTS).write_bytes(cut)
        with pytest.raises(ValueError) as e:
            folder.read_tensors(bad)
        assert f"{bad / folder.WEIGHTS} {says}" in _one_sentence(e), what
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    (good / folder.WEIGHTS).rename(sharded / "model-00001-of-00002.safetensors")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors",
                            "b": "model-00002-of-00002.safetensors"}}  # fmt: skip
    (sharded / folder.INDEX).write_text(json.dumps(index))
    with pytest.raises(ValueError) as e:
        folder.read_tensors(sharded)
    assert f"{sharded / 'model-00002-of-00002.safetensors'} is missing" in _one_sentence(e)
    assert folder.INDEX in str(e.value)


def test_a_bad_dtype_in_the_saved_config_is_named_once(tmp_path):
    """evaluate / sample (``cli_inputs.restore``): a ``config.json`` edited by hand names its
    field and valid values once, not "no checkpoint restores" once per step."""
    from seqjax.tasks import inputs
    from seqjax.train import cli_inputs, setup

    config = _config("char_lm", "smoke")
    config.model.dtype = "float33"
    (tmp_path / "config.json").write_text(config.to_json_best_effort())
    for s in (5, 10):
        (tmp_path / "checkpoints" / str(s)).mkdir(parents=True)
    with pytest.raises(inputs.InputError) as e:
        cli_inputs.restore(lambda s: setup.restore_latest(str(tmp_path), step=s),
                           str(tmp_path), None)  # fmt: skip
    msg = str(e.value)
    assert f"{tmp_path / 'config.json'} (the run's config) is invalid" in msg
    assert "config.model.dtype='float33' is invalid; valid: auto, float32" in msg
    assert msg.count("float33") == 1 and "step 5" not in msg and "restores" not in msg


def test_one_line_per_field_in_the_translation_and_packing_headers():
    config = _config("translation", "copy")
    config.model.dtype = "float33"
    assert _problems(config).count("config.model.dtype=") == 1
    config = _config("mlm", "smoke")
    config.data.objective, config.data.packing = "bogus", True
    problems = _problems(config)
    assert "config.data.objective='bogus' is invalid" in problems
    assert "config.data.packing" not in problems
    config.data.objective = "span_corruption"  # valid, but not packable: still said
    assert "config.data.packing=True is invalid" in _problems(config)


def test_an_emptied_iterator_file_is_named_as_empty(tmp_path):
    import jax.numpy as jnp

    from seqjax.train import checkpoint

    ckpt = checkpoint.Checkpointer(str(tmp_path), max_to_keep=3, async_save=False)
    state = {"w": jnp.ones((4,), jnp.float32)}
    ckpt.save(1, state, {"spec": {}, "step": 1}, {"seed": 0})
    ckpt.wait()
    metadata = tmp_path / "checkpoints" / "1" / "data" / "metadata"
    metadata.write_text("")
    with pytest.raises(checkpoint.CheckpointError) as e:
        ckpt.restore_newest(jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), state))
    ckpt.close()
    assert f"step 1: {metadata} is empty (0 bytes)" in str(e.value)
    assert "StopIteration" not in str(e.value)
    try:  # without the file to name, the reason is the JSON error, not its hidden context
        json.loads("")
    except ValueError as err:
        assert checkpoint._reason(err).startswith("JSONDecodeError: Expecting value")


def test_a_read_only_workdir_is_one_sentence(tmp_path):
    """The unit half of item 2 (the real remount: test_issue50_faults.py, slow): a refused
    write into the workdir, from Python or from TensorStore's text, names the workdir, the
    file and the newest complete checkpoint; a refused write elsewhere stays a bug."""
    import errno

    from seqjax.train import errors

    work = str(tmp_path)
    (tmp_path / "checkpoints" / "10").mkdir(parents=True)
    path = tmp_path / "metrics.jsonl"
    path.write_text("")
    f = lines.LineFile(path)

    def refused(fd, data):
        raise OSError(errno.EROFS, "Read-only file system")

    real, lines._write = lines._write, refused
    try:
        with pytest.raises(OSError) as e:
            f.write('{"step": 11}\n')
    finally:
        lines._write = real
        f.close()
    tensorstore = ValueError(
        f'PERMISSION_DENIED: Error writing local file "{work}/checkpoints/20.tmp/state/x": '
        f'Failed to open: "{work}/checkpoints/20.tmp/state/x.__lock": Read-only file system '
        "[os_error_code='30']"
    )
    for err, file in [(e.value, path), (tensorstore, f"{work}/checkpoints/20.tmp/state/x.__lock")]:
        text, status = errors.message(err, work)
        assert status == 2 and f"the workdir {work} cannot be written any more" in text
        assert f"(Read-only file system: {file})" in text
        assert f"the newest complete checkpoint is step 10 in {work}/checkpoints" in text
    denied = OSError(errno.EACCES, "Permission denied", "/elsewhere/file")
    assert errors.message(denied, work) is None
    inside = OSError(errno.EACCES, "Permission denied", f"{work}/checkpoints")
    assert errors.message(inside, work)[1] == 2
