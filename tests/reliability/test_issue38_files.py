"""Issue 38, files a fault leaves behind: metrics lines written whole (item 6), a torn last
line repaired on resume, an unfinished Orbax save removed on the next start, a damaged
SentencePiece model (item 3), ``seqjax.sample --out`` naming a folder (item 4)."""

from __future__ import annotations

import errno
import json
import subprocess
import sys

import pytest

from seqjax.train import checkpoint, lines
from seqjax.train import metrics as metrics_lib


def _parsable(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]  # strict: every line


def test_a_full_disk_mid_line_leaves_no_half_line(tmp_path, monkeypatch):
    w = metrics_lib.MetricWriter(str(tmp_path))
    w.write(1, {"loss": 1.0}, prefix="train/")
    real = lines._write

    def half_then_full(fd, data):  # the disk fills up in the middle of the line
        if len(data) > 20:
            real(fd, data[: len(data) // 2])
            return len(data) // 2
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(lines, "_write", half_then_full)
    with pytest.raises(OSError) as e:
        w.write(2, {"loss": 2.0}, prefix="train/")
    assert e.value.errno == errno.ENOSPC
    monkeypatch.setattr(lines, "_write", real)
    assert [r["step"] for r in _parsable(tmp_path / "metrics.jsonl")] == [1]
    w.write(3, {"loss": 3.0}, prefix="train/")  # space again: the next line is whole
    w.close()
    assert [r["step"] for r in _parsable(tmp_path / "metrics.jsonl")] == [1, 3]


def test_a_resume_repairs_a_torn_last_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    whole = json.dumps({"step": 1, "train/loss": 1.0}) + "\n"
    path.write_text(whole + '{"step": 2, "train/lo')  # a run killed mid-write
    w = metrics_lib.MetricWriter(str(tmp_path))  # the resumed run
    w.write(2, {"loss": 2.0}, prefix="train/")
    w.close()
    rows = _parsable(path)
    assert [r["step"] for r in rows] == [1, 2] and rows[1]["train/loss"] == 2.0
    assert lines.repair_torn_tail(str(path)) == 0  # intact now: nothing removed


def test_an_unfinished_save_is_removed_on_the_next_start(tmp_path):
    d = tmp_path / "checkpoints"
    (d / "4" / "state").mkdir(parents=True)
    (d / "6.orbax-checkpoint-tmp" / "state.orbax-checkpoint-tmp").mkdir(parents=True)
    (d / "6.orbax-checkpoint-tmp" / "state.orbax-checkpoint-tmp" / "x").write_bytes(b"1")
    assert checkpoint.remove_partial_saves(str(tmp_path)) == ["6.orbax-checkpoint-tmp"]
    assert sorted(p.name for p in d.iterdir()) == ["4"]  # the complete one is kept


def test_a_damaged_sentencepiece_model_is_retrained_to_the_same_bytes(tmp_path):
    from seqjax.data import subword
    from seqjax.data.sources import DataError

    sentences = [f"line {i} of the text, word{i % 7} and word{i % 11}" for i in range(300)]
    opts = subword.SpmOptions(vocab_size=300)
    path = str(tmp_path / "m.model")
    subword.ensure_model(path, lambda: sentences, opts)
    good = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(b"not a model" * 10)
    subword._processor.cache_clear()
    with pytest.raises(DataError, match="SentencePiece model .*m.model"):
        _ = subword.SentencePieceVocab(path).size  # read directly: one sentence naming the file
    subword._processor.cache_clear()
    assert subword.ensure_model(path, lambda: sentences, opts) == path
    assert open(path, "rb").read() == good
    assert subword.SentencePieceVocab(path).size == 300


def test_sample_out_naming_a_folder_is_refused_before_restoring(tmp_path):
    work = tmp_path / "work"
    (work / "checkpoints" / "5").mkdir(parents=True)
    (work / "config.json").write_text("{}")
    folder = tmp_path / "grid.png"
    folder.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "seqjax.sample", f"--workdir={work}", f"--out={folder}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert f"--out={folder} is a folder" in line
