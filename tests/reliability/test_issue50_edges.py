"""Issue 50, faults at the new edges (no process started here; the real-process ones are in
``test_issue50_faults.py``): a complete last metrics line without its newline (item 6)."""

from __future__ import annotations

import json

from seqjax.train import lines


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
