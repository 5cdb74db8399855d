"""Every bad input ends in one sentence naming the field, file or fix (issue 16, items 4-6).

In-process: ``seqjax.main.train`` raises, ``seqjax.train.errors.message`` turns the
exception into ``(sentence, exit status)`` exactly as the CLI does (None would mean a bug
with a traceback). A few cases go through ``python -m seqjax.main`` as a user would.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from seqjax import main as main_lib
from seqjax.train import errors


def _fails_with(config, workdir, expected: list[str], status: int = 2) -> str:
    with pytest.raises(Exception) as e:
        main_lib.train(config, str(workdir))
    known = errors.message(e.value, str(workdir))
    assert known is not None, f"reported as a bug: {e.value!r}"
    msg, code = known
    assert code == status
    for text in expected:
        assert text in msg, msg
    return msg


@pytest.fixture
def tiny(helpers, corpus):
    def make(**extra):
        return helpers.tiny_config(corpus, **extra)

    return make


# ------------------------------------------------------------------------------- data paths


def test_data_path_missing(tiny, tmp_path):
    missing = tmp_path / "nope.txt"
    _fails_with(tiny(**{"data.path": str(missing)}), tmp_path / "w", [str(missing), "not exist"])


def test_data_path_is_a_directory(tiny, tmp_path):
    _fails_with(tiny(**{"data.path": str(tmp_path)}), tmp_path / "w", ["is a folder, not a file"])


def test_data_path_empty(tiny, tmp_path):
    path = tmp_path / "empty.txt"
    path.write_text("")
    _fails_with(tiny(**{"data.path": str(path)}), tmp_path / "w", [str(path), "is empty"])


def test_data_shorter_than_one_sequence(tiny, tmp_path):
    path = tmp_path / "short.txt"
    path.write_text("def f(x):\n    return x\n")
    cfg = tiny(**{"data.path": str(path), "data.data_dir": str(tmp_path / "tfds")})
    _fails_with(cfg, tmp_path / "w", ["train split", "config.data.seq_len=32", str(path)])


def test_evaluation_split_without_a_target(tiny, tmp_path):
    """30 characters: train (27) fits seq_len=8, but validation (5%) has 1 token: fail before
    training, not at the first evaluation."""
    path = tmp_path / "tiny.txt"
    path.write_text("abcdefghij" * 3)
    cfg = tiny(**{"data.path": str(path), "data.data_dir": str(tmp_path / "tfds"),
                  "data.seq_len": 8})  # fmt: skip
    _fails_with(cfg, tmp_path / "w", ["validation split", "more text"])


def test_data_not_utf8_with_chars_vocab(tiny, tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes(("caf\xe9 au lait\n" * 400).encode("latin-1"))
    cfg = tiny(**{"data.path": str(path), "data.data_dir": str(tmp_path / "tfds")})
    _fails_with(cfg, tmp_path / "w", ["not valid UTF-8", "byte 3", "config.data.vocab=bytes"])
    cfg.data.vocab = "bytes"  # the suggested fix works
    from seqjax import data as data_lib

    assert data_lib.info(cfg.data).vocab_size == 256


def test_known_file_with_other_sha256(tiny, tmp_path):
    path = tmp_path / "tinyshakespeare" / "input.txt"
    path.parent.mkdir()
    path.write_text("First Citizen:\n" * 200)
    cfg = tiny(**{"data.path": str(path), "data.data_dir": str(tmp_path / "tfds")})
    _fails_with(cfg, tmp_path / "w", ["sha256", "accept_checksum_mismatch=True"])


def test_corrupt_prepared_cache_names_the_folder(tiny, tmp_path):
    from seqjax import data as data_lib
    from seqjax.data import store

    text = tmp_path / "t.txt"
    text.write_text("alpha = beta + 1\n" * 500)
    cfg = tiny(**{"data.path": str(text), "data.data_dir": str(tmp_path / "tfds")})
    data_lib.info(cfg.data)  # prepared
    store.builder.cache_clear()
    store.source.cache_clear()
    store.tokens.cache_clear()
    (record,) = (tmp_path / "tfds").rglob("*-train.array_record-*")
    data = bytearray(record.read_bytes())
    for i in range(100, len(data) - 100, 5):
        data[i] ^= 0x5A
    record.write_bytes(bytes(data))
    msg = _fails_with(cfg, tmp_path / "w", ["cannot be read", "delete that folder"])
    assert str(tmp_path / "tfds" / "seqjax_text_file") in msg


# ------------------------------------------------------------------------------- workdir


def test_workdir_is_a_file(tiny, tmp_path):
    path = tmp_path / "file"
    path.write_text("x")
    _fails_with(tiny(), path, ["is a file, not a folder"])


def test_workdir_not_writable(tiny, tmp_path, monkeypatch):
    """A folder the job cannot write to (read-only mount, other owner; simulated because
    root may write anywhere)."""
    from seqjax.train import workdir as workdir_lib

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(workdir_lib.tempfile, "NamedTemporaryFile", denied)
    _fails_with(tiny(), tmp_path, ["not writable", str(tmp_path), "permissions"])


def test_disk_full_is_one_sentence_keeping_checkpoints(tmp_path):
    (tmp_path / "checkpoints" / "20").mkdir(parents=True)
    inner = OSError(28, "No space left on device", str(tmp_path / "checkpoints" / "25"))
    try:
        try:
            raise inner
        except OSError as e:
            raise RuntimeError("async save failed") from e
    except RuntimeError as e:
        msg, code = errors.message(e, str(tmp_path))
    assert code == 2
    assert "disk is full" in msg and "step 20" in msg and "rerun" in msg


def test_genuine_bug_is_not_hidden():
    assert errors.message(ZeroDivisionError("x"), None) is None


# ------------------------------------------------------------------- through the CLI


def _cli(args: list[str], helpers, corpus, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "seqjax.main", *args],
        env=helpers.subprocess_env(corpus),
        cwd=helpers.repo,
        capture_output=True,
        text=True,
        timeout=120,
    )


CLI_CASES = {
    "config_file_missing": (["--config=configs/nope.py"], ["configs/nope.py does not exist"]),
    "unknown_variant": (["--config=configs/char_lm.py:bogus"], ["'bogus'", "default, smoke"]),
    "unknown_field": (
        ["--config=configs/char_lm.py:smoke", "--config.model.nope=1"],
        ["config.model has no field 'nope'", "num_layers"],
    ),
    "bad_value_type": (
        ["--config=configs/char_lm.py:smoke", "--config.train.num_steps=abc"],
        ["--config.train.num_steps=abc", "int"],
    ),
    "invalid_fields": (
        [
            "--config=configs/char_lm.py:smoke",
            "--config.data.batch_size=0",
            "--config.data.seed=-1",
        ],
        ["config.data.batch_size=0", "config.data.seed=-1"],
    ),
    "mechanism_option_value": (
        [
            "--config=configs/char_lm.py:smoke",
            "--config.model.attention_options.dense.implementation=magic",
        ],  # fmt: skip
        ["attention_options.dense", "'magic'", "chunked"],
    ),
}


# Two run in CI; the others (a few seconds each) with the slow suite.
QUICK = ("config_file_missing", "invalid_fields")


@pytest.mark.parametrize(
    "case", [c if c in QUICK else pytest.param(c, marks=pytest.mark.slow) for c in CLI_CASES]
)
def test_cli_bad_input_exits_2_in_one_message(case, helpers, corpus, tmp_path):
    args, expected = CLI_CASES[case]
    proc = _cli([*args, f"--workdir={tmp_path / 'w'}"], helpers, corpus, tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    for text in expected:
        assert text in out, out[-3000:]
    assert not (tmp_path / "w" / "checkpoints").exists()
