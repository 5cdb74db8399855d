"""Every study in ``experiments/`` runs end to end at ``--scale smoke`` (so scripts cannot rot).

Each script's ``main`` is run in this process (JAX is imported once) with its output folder
redirected to a temporary directory, then the files it wrote are checked: a JSON payload
with the environment, a markdown table and, where the study plots, a PNG. The three
end-to-end training studies (LRA accuracy, character LM quality, and the LRA speed table)
also get property checks on the numbers they report.

Studies whose smoke run trains a model (compile-dominated, 20-60 s each on a loaded 2-core
machine) are marked ``slow``; the rest run in the default CI suite.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from seqjax.configs import common

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def load_script(relpath: str):
    """Imports ``experiments/<relpath>`` as a module (experiments/ is not a package)."""
    path = EXPERIMENTS / relpath
    name = "study_" + relpath.replace("/", "_").removesuffix(".py")
    return common.load_file(path, name, register=True)


def run_main(module, argv, monkeypatch):
    """``main(argv)`` where supported, else ``main()`` with ``sys.argv`` patched."""
    try:
        return module.main(argv)
    except TypeError as e:
        if "positional argument" not in str(e):
            raise
    monkeypatch.setattr(sys, "argv", ["run.py", *argv])
    return module.main()


def payloads(out: Path) -> list[dict]:
    files = sorted(out.rglob("*.json"))
    assert files, f"no JSON written under {out}"
    return [json.loads(f.read_text()) for f in files]


def markdown_tables(md: str) -> list[list[list[str]]]:
    """The GitHub tables of ``md``: each a list of rows of stripped cells (no separator)."""
    tables, current = [], None
    for line in md.splitlines():
        if not line.startswith("|"):
            current = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if all(set(c) <= set("-:") and c for c in cells):
            continue  # the |---|---| separator
        if current is None:
            current = []
            tables.append(current)
        current.append(cells)
    return tables


# (script, extra arguments); each gets --out <tmp>.
FAST = [
    ("dense_attention/run.py", ["--scale", "smoke"]),
    ("transformer_xl/eval_speed.py", ["--scale", "smoke"]),
    ("linformer/run.py", ["--scale", "smoke"]),
    ("sparse_transformer/run.py", ["--scale", "smoke"]),
    ("reformer/speed_memory.py", ["--scale", "smoke"]),
]
SLOW = [
    ("reformer/duplication.py", ["--scale", "smoke"]),
    ("data_throughput/run.py", ["--seconds", "0.2"]),
    ("train_throughput/run.py", ["--scale", "smoke"]),
    ("transformer_xl/profile_eval.py", ["--scale", "smoke", "--lengths", "64", "--calls", "1"]),
]


@pytest.mark.parametrize("script,args", FAST, ids=[s for s, _ in FAST])
def test_study_smoke(script, args, tmp_path, monkeypatch):
    if not (EXPERIMENTS / script).exists():
        pytest.fail(f"experiments/{script} is listed here but missing")
    run_main(load_script(script), [*args, "--out", str(tmp_path)], monkeypatch)
    assert all(isinstance(p, dict) and p for p in payloads(tmp_path))
    assert list(tmp_path.rglob("*.md")), "no markdown table written"


@pytest.mark.slow
@pytest.mark.parametrize("script,args", SLOW, ids=[s for s, _ in SLOW])
def test_study_smoke_slow(script, args, tmp_path, monkeypatch):
    run_main(load_script(script), [*args, "--out", str(tmp_path)], monkeypatch)
    assert payloads(tmp_path)


def test_lra_speed_smoke(tmp_path):
    """Every smoke configuration runs; the ratios to dense reference are the ratios of the
    measured step times and predicted peaks, and the table has one row per variant."""
    payload = load_script("lra_speed/run.py").main(["--scale", "smoke", "--out", str(tmp_path)])
    rows = payload["rows"]
    assert {r["variant"] for r in rows} == {"dense-reference", "linformer"}
    for r in rows:
        assert r["status"] == "ok" and r["steps_per_s"] > 0 and r["peak_gb"] > 0
        assert r["steps_per_s"] == pytest.approx(1.0 / r["step_s"])
    ref = next(r for r in rows if r["variant"] == "dense-reference")
    lin = next(r for r in rows if r["variant"] == "linformer")
    # Timed interleaved in one run: one load record for the whole length, in the table.
    assert ref["load"] == lin["load"] and isinstance(ref["noisy"], bool)
    md = (tmp_path / "lra_speed_smoke.md").read_text()
    assert "timed interleaved" in md and str(ref["load"]["loadavg_before"]) in md
    assert lin["speedup_vs_reference"] == pytest.approx(ref["step_s"] / lin["step_s"])
    assert lin["memory_vs_reference"] == pytest.approx(lin["peak_gb"] / ref["peak_gb"])
    for ext in ("json", "md", "png"):
        assert (tmp_path / f"lra_speed_smoke.{ext}").exists()


def test_lra_speed_does_not_fit(tmp_path):
    """A configuration above the memory budget is reported, not run."""
    module = load_script("lra_speed/run.py")
    payload = module.main(
        ["--scale", "smoke", "--out", str(tmp_path), "--mechanisms", "dense-reference",
         "--memory-budget-gb", "1e-6"]
    )  # fmt: skip
    (row,) = payload["rows"]
    assert row["status"] == "does not fit" and "step_s" not in row


@pytest.mark.slow
def test_lra_accuracy_smoke(tmp_path):
    payload = load_script("lra_accuracy/run.py").main(
        ["--scale", "smoke", "--out", str(tmp_path), "--tfds-dir", str(tmp_path / "tfds")]
    )
    (row,) = payload["rows"]
    assert row["steps"] == 10 and row["test_examples"] == 32
    # Accuracy is a count of correct examples out of test_examples (no padding counted).
    correct = row["test_accuracy"] / 100.0 * row["test_examples"]
    assert correct == pytest.approx(round(correct), abs=1e-3)
    assert math.isfinite(row["test_loss"]) and row["test_loss"] > 0
    assert (tmp_path / "lra_accuracy_smoke.png").exists()


@pytest.mark.slow
def test_char_lm_quality_smoke(tmp_path, shared_data):
    del shared_data  # tiny shakespeare must be present
    payload = load_script("char_lm_quality/run.py").main(
        ["--scale", "smoke", "--out", str(tmp_path), "--tfds-dir", str(tmp_path / "tfds")]
    )
    (row,) = payload["rows"]
    assert row["steps"] == 20 and row["tokens_per_s"] > 0
    # Better than the uniform guess over tiny shakespeare's 65 characters after 20 steps
    # is not guaranteed at smoke size; a finite loss and a finished run are.
    assert math.isfinite(row["val_loss"]) and row["loadavg_before"] >= 0
    table = markdown_tables((tmp_path / "char_lm_smoke.md").read_text())[0]
    header, *body = table
    assert header[:2] == ["variant", "val loss (nats/char)"]
    assert [r[:2] for r in body] == [[row["variant"], f"{row['val_loss']:.3g}"]]
    assert all(len(r) == len(header) for r in body)


@pytest.mark.parametrize(
    "script,args,match",
    [
        ("lra_speed/run.py", ["--scale", "huge"], "--scale"),
        ("lra_speed/run.py", ["--scale", "smoke", "--mechanisms", "flash"], "--mechanisms"),
        ("lra_accuracy/run.py", ["--scale", "smoke", "--tasks", "cifar"], "--tasks"),
        ("char_lm_quality/run.py", ["--scale", "smoke", "--mechanisms", "x"], "--mechanisms"),
    ],
)
def test_bad_arguments_name_the_flag(script, args, match, tmp_path):
    with pytest.raises(ValueError, match=match):
        load_script(script).main([*args, "--out", str(tmp_path)])
