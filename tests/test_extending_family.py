"""The "A new model family" recipe of ``docs/extending.md``, run as printed: the two code
blocks are written to files, ``python -m seqjax.main`` trains the family through the whole
loop (validation, training, test, checkpoint), and the validator composes its own check and
names the registered families."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _blocks(heading: str) -> list[str]:
    """The ```python blocks of the section under ``heading`` in docs/extending.md."""
    text = (ROOT / "docs" / "extending.md").read_text()
    section = text[text.index(heading) :]
    section = section[: section.index("\n## ", 1)]
    out, rest = [], section
    while "```python\n" in rest:
        start = rest.index("```python\n") + len("```python\n")
        end = rest.index("```", start)
        out.append(rest[start:end])
        rest = rest[end + 3 :]
    return out


@pytest.fixture(scope="module")
def recipe(tmp_path_factory):
    folder = tmp_path_factory.mktemp("recipe")
    family, config = _blocks("## A new model family")
    (folder / "my_family.py").write_text(family)
    (folder / "my_config.py").write_text(config)
    return folder


def _run(recipe, tmp_path, *flags):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(recipe)]),
           "XLA_FLAGS": os.environ.get("XLA_FLAGS", "")}  # fmt: skip
    cmd = [sys.executable, "-m", "seqjax.main", f"--config={recipe / 'my_config.py'}",
           f"--workdir={tmp_path / 'work'}", "--config.mesh.data=1", *flags]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900)


def test_the_recipe_trains_through_seqjax_main(recipe, tmp_path):
    out = _run(recipe, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "conv_lm: d_model 64, kernel 4, num_layers 2" in out.stderr
    result = json.loads((tmp_path / "work" / "result.json").read_text())
    assert result["step"] == 30 and result["test"]["loss"] < 4.0  # from ln(V) ~ 4.6
    saved = json.loads((tmp_path / "work" / "config.json").read_text())
    assert saved["model"]["family"] == "conv_lm" and saved["imports"] == ["my_family"]


def test_the_validator_composes_the_family_check(recipe, tmp_path):
    out = _run(recipe, tmp_path, "--config.model.kernel=0")
    assert out.returncode == 2
    assert "config.model.kernel=0 is invalid; valid: an integer >= 1" in out.stderr
    out = _run(recipe, tmp_path, "--config.model.family=nope")
    assert out.returncode == 2
    assert "config.model.family='nope' is invalid; valid: auto, conv_lm, encoder_decoder" in (
        out.stderr
    )
    assert not (tmp_path / "work" / "checkpoints").exists()
