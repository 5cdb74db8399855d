"""The LRA baselines' rows of ``experiments/lra_speed`` (Performer, linear, local,
Longformer- and BigBird-style flex rows): registered mechanisms with valid options at every
length of every scale (no compilation), and one smoke run of the two kernelized rows timed
interleaved with dense."""

from __future__ import annotations

from pathlib import Path

import pytest

from seqjax import attention
from seqjax.configs import common

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "lra_speed" / "run.py"
NEW_ROWS = ("performer", "linear", "local", "longformer", "bigbird")


def _module():
    return common.load_file(SCRIPT, "study_lra_speed_run", register=True)


def test_new_rows_are_valid_mechanisms_at_every_length():
    run = _module()
    for scale in run.SCALES.values():
        for t in scale.lengths:
            rows = run.variants(scale, t)
            assert set(NEW_ROWS) <= set(rows)
            for mech, opts in rows.values():
                attention.check_options(mech, opts)
                spec = attention.spec(mech)
                if spec.validate is not None:
                    spec.validate(dict(opts), t)


def test_smoke_run_of_kernelized_rows(tmp_path):
    payload = _module().main(
        ["--scale", "smoke", "--out", str(tmp_path), "--mechanisms",
         "dense-reference,performer,linear"]
    )  # fmt: skip
    rows = {r["variant"]: r for r in payload["rows"]}
    assert set(rows) == {"dense-reference", "performer", "linear"}
    for name in ("performer", "linear"):
        r = rows[name]
        assert r["status"] == "ok" and r["load"] == rows["dense-reference"]["load"]
        assert r["speedup_vs_reference"] == pytest.approx(
            rows["dense-reference"]["step_s"] / r["step_s"]
        )
