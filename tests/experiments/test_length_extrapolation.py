"""The length-extrapolation study (``experiments/length_extrapolation/run.py``) runs."""

from __future__ import annotations

import json
import math

import pytest

from tests.experiments.test_studies_smoke import load_script


@pytest.mark.slow
def test_length_extrapolation_smoke(tmp_path, shared_data):
    module = load_script("length_extrapolation/run.py")
    payload = module.main(
        ["--scale", "smoke", "--out", str(tmp_path), "--tfds-dir", str(tmp_path / "tfds"),
         "--data", str(shared_data / "tinyshakespeare" / "input.txt"),
         "--schemes", "sinusoidal,alibi,relative"]
    )  # fmt: skip
    assert [r["scheme"] for r in payload["rows"]] == ["sinusoidal", "alibi", "relative"]
    for r in payload["rows"]:
        for f in module.FACTORS:
            assert math.isfinite(r[f"ppl_{f}L"]) and r[f"ppl_{f}L"] > 1
    for ext in ("json", "md", "png"):
        assert (tmp_path / f"length_extrapolation_smoke.{ext}").exists()
    assert json.loads((tmp_path / "length_extrapolation_smoke.json").read_text())["rows"]


@pytest.mark.parametrize(
    "args,match", [(["--scale", "huge"], "--scale"), (["--schemes", "x"], "--schemes")]
)
def test_bad_arguments_name_the_flag(args, match, tmp_path):
    with pytest.raises(ValueError, match=match):
        load_script("length_extrapolation/run.py").main([*args, "--out", str(tmp_path)])
