"""``experiments/decoding_speed/run.py`` runs end to end at ``--scale smoke`` and reports
what it measured: tokens/s of both contenders, their ratio, the load, and the files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from seqjax.configs import common

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "decoding_speed" / "run.py"


def _script():
    return common.load_file(SCRIPT, "study_decoding_speed", register=True)


def test_decoding_speed_smoke(tmp_path):
    payload = _script().main(
        ["--scale", "smoke", "--mechanisms", "sliding_window", "--out", str(tmp_path)]
    )
    (row,) = payload["rows"]
    assert row["mechanism"] == "sliding_window" and row["auto_mode"] == "cache"
    assert row["cache_tokens_per_s"] > 0 and row["recompute_tokens_per_s"] > 0
    assert row["speedup"] == pytest.approx(
        row["cache_tokens_per_s"] / row["recompute_tokens_per_s"]
    )
    assert row["cache_tokens_per_s"] == pytest.approx(
        row["cache_tokens_per_call"] / row["cache_call_s"]
    )
    assert isinstance(row["loadavg_before"], float) and isinstance(row["noisy"], bool)
    # The ring buffer, not a max_len KV cache: [B, window, H, D] keys and values.
    shapes = [s for k, s in row["cache_leaves_layer0"].items() if "buffers" in k]
    assert shapes == [[1, 16, 2, 16], [1, 16, 2, 16]]
    stem = tmp_path / "decoding_speed_smoke"
    for ext in ("json", "md", "png"):
        assert stem.with_suffix(f".{ext}").exists()
    assert json.loads(stem.with_suffix(".json").read_text())["environment"]
    assert "cache / recompute" in stem.with_suffix(".md").read_text()


@pytest.mark.parametrize("args,match", [(["--scale", "huge"], "--scale"),
                                        (["--mechanisms", "flash"], "--mechanisms")])  # fmt: skip
def test_decoding_speed_bad_arguments_name_the_flag(args, match, tmp_path):
    with pytest.raises(ValueError, match=match):
        _script().main([*args, "--out", str(tmp_path)])
