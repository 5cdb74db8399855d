"""``docs/extending.md``, "A new data set", run as printed: the module registers a data set
whose batches equal their definition, whose own field is a config field and a flag, whose bad
value is one sentence before anything is built, and whose commands train and evaluate."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from seqjax import data as data_lib
from seqjax.data import registry

REPO = Path(__file__).resolve().parents[1]
HEADING = "## A new data set"


def _doc_block(language: str) -> str:
    text = (REPO / "docs" / "extending.md").read_text()
    section = text[text.index(HEADING) :]
    start = section.index(f"```{language}\n") + len(f"```{language}\n")
    return section[start : section.index("```", start)]


MODULE_BLOCK = _doc_block("python")
COMMANDS = _doc_block("bash")


@pytest.fixture
def counting(monkeypatch):
    """The doc's module executed as ``my_counting`` (it registers "counting")."""
    module = types.ModuleType("my_counting")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    registry.unregister("counting")
    exec(compile(MODULE_BLOCK, "docs/extending.md", "exec"), module.__dict__)  # noqa: S102
    yield module
    registry.unregister("counting")


def _cfg(**overrides):
    cfg = data_lib.default_config()
    with cfg.unlocked():
        cfg.name, cfg.seq_len, cfg.batch_size = "counting", 12, 4
        cfg.update(overrides)
    return cfg


def test_registered_data_set_batches_count_and_resume(counting):
    cfg = _cfg(counting_vocab=7)
    assert "counting" in data_lib.names() and cfg.counting_vocab == 7  # its field, registered
    info = data_lib.info(cfg)
    assert (info.task, info.vocab_size) == ("lm", 7)
    it = data_lib.make(cfg, split="train")
    first = next(it)
    assert first["inputs"].shape == (4, 12)
    assert (first["targets"] == (first["inputs"] + 1) % 7).all()  # counting up mod 7
    assert (np.diff(first["inputs"], axis=1) % 7 == 1).all()
    saved = it.get_state()
    second = next(it)
    again = data_lib.make(cfg, split="train")
    again.set_state(saved)
    np.testing.assert_array_equal(next(again)["inputs"], second["inputs"])  # resumes exactly
    ev = data_lib.make(cfg, split="validation", train=False)
    assert ev.num_steps == 1024 // 4


def test_bad_field_is_one_sentence_naming_it(counting):
    from seqjax.data import api

    problems = api.config_problems(_cfg(counting_vocab=1))
    assert ("counting_vocab", 1, "an integer >= 2") in problems
    with pytest.raises(ValueError, match=r"config\.data\.counting_vocab=1 is invalid"):
        data_lib.info(_cfg(counting_vocab=1))


def test_the_task_comes_from_the_data_set(counting):
    from seqjax import tasks

    assert tasks.for_data_config(_cfg()).name == "lm"


def _commands(project: Path) -> list[str]:
    """The bash block as printed, one command a line (continuations joined), with the doc's
    placeholder project folder made real."""
    text = COMMANDS.replace("/path/to/your/project", str(project)).replace("\\\n", " ")
    return [line.strip() for line in text.splitlines() if line.strip()]


def _run_commands(tmp_path: Path, extra: str = "") -> list[subprocess.CompletedProcess]:
    project = tmp_path / "project"
    project.mkdir()
    (project / "my_counting.py").write_text(MODULE_BLOCK)
    lines = [c.replace("/tmp/counting", str(tmp_path / "counting")) for c in _commands(project)]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("PYTHONPATH", None)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    out = []
    exports = [line for line in lines if line.startswith("export ")]
    for line in (x for x in lines if not x.startswith("export ")):
        if line.startswith("python -m seqjax.main") and extra:
            line = f"{line} {extra}"
        script = "\n".join([*exports, line])  # each command in a process of its own
        out.append(subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True,
                                  text=True, timeout=600))  # fmt: skip
        assert out[-1].returncode == 0, f"{shlex.quote(line)}:\n{out[-1].stderr[-3000:]}"
    return out


def _check_run(tmp_path: Path, procs, steps: int = 60) -> None:
    saved = json.loads((tmp_path / "counting" / "config.json").read_text())
    assert saved["imports"] == ["my_counting"]
    assert saved["data"]["name"] == "counting" and saved["data"]["counting_vocab"] == 16
    line = json.loads(procs[-1].stdout)  # seqjax.evaluate's result line
    assert line["split"] == "test" and line["step"] == steps
    assert all(np.isfinite(v) for v in line.values() if isinstance(v, float))


def test_recipe_commands_train_and_evaluate(tmp_path):
    """The printed commands, each in its own process, with a 4-step run."""
    extra = ("--config.train.num_steps=4 --config.optimizer.warmup_steps=0 "
             "--config.train.eval_every=0 --config.train.checkpoint_every=0")  # fmt: skip
    _check_run(tmp_path, _run_commands(tmp_path, extra=extra), steps=4)


@pytest.mark.slow
def test_recipe_commands_as_printed(tmp_path):
    """The printed commands exactly (the smoke config's 60 steps)."""
    _check_run(tmp_path, _run_commands(tmp_path), steps=60)
