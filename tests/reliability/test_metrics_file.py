"""metrics.jsonl deleted or rotated mid-run (issue 16, item 3): later lines still land in
``<workdir>/metrics.jsonl``."""

from __future__ import annotations

from seqjax.train import metrics as metrics_lib


def test_deleted_metrics_file_is_recreated(tmp_path):
    w = metrics_lib.MetricWriter(str(tmp_path))
    w.write(1, {"loss": 1.0}, prefix="train/")
    (tmp_path / "metrics.jsonl").unlink()
    w.write(2, {"loss": 2.0}, prefix="train/")
    w.write(3, {"loss": 3.0}, prefix="train/")
    w.close()
    rows = metrics_lib.read_metrics(str(tmp_path))
    assert [r["step"] for r in rows] == [2, 3]
    assert rows[0]["train/loss"] == 2.0


def test_rotated_metrics_file_keeps_old_and_starts_new(tmp_path):
    w = metrics_lib.MetricWriter(str(tmp_path))
    w.write(1, {"loss": 1.0})
    (tmp_path / "metrics.jsonl").rename(tmp_path / "metrics.jsonl.1")
    w.write(2, {"loss": 2.0})
    w.close()
    assert [r["step"] for r in metrics_lib.read_metrics(str(tmp_path))] == [2]
    old = (tmp_path / "metrics.jsonl.1").read_text().splitlines()
    assert len(old) == 1 and '"step": 1' in old[0]


def test_untouched_metrics_file_is_appended(tmp_path):
    w = metrics_lib.MetricWriter(str(tmp_path))
    for s in range(1, 4):
        w.write(s, {"loss": float(s)})
    w.close()
    assert [r["step"] for r in metrics_lib.read_metrics(str(tmp_path))] == [1, 2, 3]
