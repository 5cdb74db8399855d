"""``experiments/lra_accuracy``: the six-task table (Avg, standard errors, chance, not-run
reasons) from results files, and the Retrieval stand-in's smoke run."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from seqjax.configs import _lra as lra
from tests.experiments.test_studies_smoke import load_script


def _result(path, rows, recipe="lra"):
    path.write_text(json.dumps({"scale": "cpu", "recipe": recipe, "rows": rows}))


def _row(task, mech, acc, n):
    return {"task": task, "mechanism": mech, "test_accuracy": acc, "test_examples": n,
            "data": task}  # fmt: skip


def test_table_from_results_files(tmp_path):
    run = load_script("lra_accuracy/run.py")
    _result(
        tmp_path / "lra_accuracy_cpu.json",
        [_row("listops", "dense", 30.0, 500), _row("retrieval", "dense", 52.0, 400)],
    )
    _result(tmp_path / "lra_accuracy_cpu_adamw.json",
            [_row("listops", "dense", 99.0, 500), _row("text", "dense", 60.0, 25_000)],
            recipe="adamw")  # fmt: skip
    payload = run.main(["--out", str(tmp_path)])
    dense = next(r for r in payload["rows"] if r["mechanism"] == "dense")
    # LRA's recipe wins a cell both files have; SE = sqrt(p(1-p)/n)
    se = 100 * math.sqrt(0.3 * 0.7 / 500)
    assert dense["listops"] == f"30.0 ± {se:.1f}"
    # 52 % of 400: SE 2.5, not 2 SE above 50 % chance -> marked
    assert dense["retrieval"] == "52.0 ± 2.5 (chance)"
    assert dense["text"].startswith("60.0 ± 0.3") and "(chance)" not in dense["text"]
    assert dense["avg"] == f"{(30 + 52 + 60) / 3:.1f} (3/6)"
    assert dense["avg_paper_same_tasks"] == pytest.approx((36.37 + 64.27 + 57.46) / 3, abs=0.01)
    assert dense["avg_paper"] == 54.39 and dense["pathx"] == "not run"
    # every Table 1 row is listed, in the paper's order; the paper's Avg is its 5-task mean
    assert [r["row"] for r in payload["rows"]] == [r.paper_name for r in lra.ROWS]
    for name, values in lra.PAPER_TABLE1.items():
        assert sum(values[:5]) / 5 == pytest.approx(values[6], abs=0.006), name
    md = (tmp_path / "lra_table.md").read_text()
    assert "Avg" in md and "30.0 ± 2.0 / 36.37" in md and "FAIL" in md
    # reasons: missing tasks and unregistered mechanisms are named, not silently dropped
    for task in ("image", "pathfinder", "pathx"):
        why = run.task_unavailable(task)
        assert (why is None) or (why in md or why.rstrip(".") in md)


def test_unknown_task_and_row_name_the_flag(tmp_path):
    run = load_script("lra_accuracy/run.py")
    with pytest.raises(ValueError, match="--tasks entry 'aan'"):
        run.main(["--scale", "smoke", "--tasks", "aan", "--out", str(tmp_path)])
    with pytest.raises(ValueError, match="--mechanisms entry 'sinkhorn'"):
        run.main(["--scale", "smoke", "--mechanisms", "sinkhorn", "--out", str(tmp_path)])


@pytest.mark.slow
def test_retrieval_standin_smoke(tmp_path, shared_data):
    del shared_data  # the stand-in reads software_l10n
    run = load_script("lra_accuracy/run.py")
    payload = run.main(
        ["--scale", "smoke", "--tasks", "retrieval", "--out", str(tmp_path),
         "--tfds-dir", str(tmp_path / "tfds")]
    )  # fmt: skip
    (row,) = payload["rows"]
    assert row["task"] == "retrieval" and "not AAN" in row["data"] and row["steps"] == 10
    n = row["test_examples"]
    smoke = run.job_config("retrieval", "dense", "smoke", None)
    # the smoke's test slice (``train.test_max_batches`` batches), not the whole split
    assert n == int(smoke.train.test_max_batches) * int(smoke.data.batch_size)
    correct = row["test_accuracy"] / 100 * n
    assert correct == pytest.approx(round(correct), abs=1e-3)
    assert row["test_se"] == pytest.approx(
        100 * math.sqrt(row["test_accuracy"] / 100 * (1 - row["test_accuracy"] / 100) / n)
    )
    assert (tmp_path / "lra_accuracy_smoke_retrieval.json").exists()


def test_standin_length_baseline(tmp_path):
    """The length-only floor of the stand-in, on a small JSONL file of software_l10n's form."""
    rng = np.random.default_rng(0)
    lines = []
    for i in range(400):
        en = "".join(chr(c) for c in rng.integers(97, 123, size=int(rng.integers(3, 60))))
        lines.append(json.dumps({"domain": "d", "en": f"{en} {i}", "de": f"{en.upper()} {i}"}))
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    payload = load_script("lra_accuracy/standin_baseline.py").main(
        ["--path", str(path), "--heldout-fraction", "0.2", "--out", str(tmp_path)]
    )
    (row,) = payload["rows"]
    # equal lengths for true pairs: the length rule is far above chance but not perfect
    assert 60 < row["test_accuracy"] <= 100 and row["test_examples"] > 40
    assert (tmp_path / "standin_baseline.md").exists()


@pytest.mark.parametrize("task", ["listops", "text", "retrieval", "image", "pathfinder"])
def test_cpu_rows_test_the_whole_split(task):
    """A cpu row loads its task's smoke variant, whose test evaluation is a two-batch slice:
    the row must evaluate the whole test split (``train.test_max_batches = 0``)."""
    run = load_script("lra_accuracy/run.py")
    assert int(run.job_config(task, "bigbird", "cpu", None).train.test_max_batches) == 0
    assert int(run.job_config(task, "bigbird", "smoke", None).train.test_max_batches) > 0
