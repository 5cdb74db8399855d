"""The console a user sees: ``--help`` of every console script lists its flags, library
INFO lines are filtered out, and logs that are not a terminal get plain progress lines."""

import io
import logging
import subprocess
import sys

import pytest
import tomllib

from seqjax import console
from seqjax.train import metrics
from tests.conftest import REPO

SCRIPTS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
FLAGS = {
    "seqjax-train": ["--config", "--workdir"],
    "seqjax-eval": ["--workdir", "--split", "--max_batches", "--tgt_len", "--mem_len"],
    "seqjax-sample": ["--workdir", "--prompt", "--length", "--temperature", "--seed"],
}


@pytest.mark.parametrize("name", sorted(FLAGS))
def test_console_script_help_lists_its_flags(name, tmp_path):
    # The wrapper pip writes for a [project.scripts] entry point.
    module, func = SCRIPTS[name].split(":")
    script = tmp_path / name
    script.write_text(f"import sys\nfrom {module} import {func}\nsys.exit({func}())\n")
    proc = subprocess.run(
        [sys.executable, str(script), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"},
    )
    # absl's --help exits with status 1 after printing the usage (HelpFlag.parse).
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    for flag in FLAGS[name]:
        assert f"  {flag}:" in proc.stdout, (flag, proc.stdout)
    assert (
        proc.stdout.lstrip().splitlines()[0]
        == sys.modules.get(module, __import__(module, fromlist=["_"])).__doc__.splitlines()[0]
    )


def _record(path: str, level: int, msg: str = "m") -> logging.LogRecord:
    return logging.LogRecord("absl", level, path, 1, msg, None, None)


def test_quiet_libraries_keeps_seqjax_info_and_library_warnings():
    f = console.QuietLibraries()
    own = str(REPO / "seqjax" / "train" / "loop.py")
    lib = "/venv/lib/python3.11/site-packages/orbax/checkpoint/checkpoint_manager.py"
    under_seqjax_checkout = "/home/u/seqjax/.venv/lib/site-packages/jax/_src/xla_bridge.py"
    assert f.filter(_record(own, logging.INFO))
    assert not f.filter(_record(lib, logging.INFO))
    assert not f.filter(_record(under_seqjax_checkout, logging.INFO))
    assert f.filter(_record(lib, logging.WARNING))
    assert not f.filter(_record(lib, logging.WARNING, "Using custom data configuration: x"))


@pytest.mark.parametrize("unit", ["tok", "ex"])
def test_plain_progress_lines_when_not_a_terminal(unit):
    out = io.StringIO()  # not a TTY
    p = metrics.Progress(4, 0, enabled=True, tokens_per_step=8, unit=unit, stream=out)
    assert p.plain
    for s in range(1, 5):
        p.update(s, 2.0 / s)
    p.write("step 4: validation loss=1.0")
    p.close()
    text = out.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert lines[0].startswith("step 1/4: loss=2.0000 ") and f" {unit}/s eta " in lines[0]
    assert lines[-2].startswith("step 4/4: loss=0.5000 ") and lines[-2].endswith("eta 0:00:00")
    assert lines[-1] == "step 4: validation loss=1.0"
    assert len(lines) == 3  # periodic (30 s): the first and the last step only


def test_progress_disabled_prints_nothing():
    out = io.StringIO()
    p = metrics.Progress(2, 0, enabled=False, tokens_per_step=1, stream=out)
    p.update(1, 1.0)
    p.write("x")
    p.close()
    assert out.getvalue() == ""


def test_shipped_configs_reachable_as_package_modules(tmp_path, monkeypatch):
    """``--config seqjax.configs.<name>[:variant]`` names the same files as ``configs/``
    (the wheel ships them as the ``seqjax.configs`` package), from any directory."""
    import importlib

    from seqjax.train import paths

    monkeypatch.chdir(tmp_path)  # no checkout here
    names = sorted(p.stem for p in (REPO / "configs").glob("*.py") if p.stem[0].isalpha())
    names.remove("common")  # shared helpers of the configs, not a job config
    assert names
    for name in names:
        spec = paths.config_file(f"seqjax.configs.{name}:smoke")
        file, _, variant = spec.partition(":")
        assert variant == "smoke"
        assert open(file).read() == (REPO / "configs" / f"{name}.py").read_text()
        assert callable(importlib.import_module(f"seqjax.configs.{name}").get_config)
    argv = paths.resolve_config_flag(["seqjax-train", "--config", "seqjax.configs.char_lm"])
    assert argv[2].endswith("char_lm.py") and argv[2].startswith("/")
    assert paths.config_file("configs/char_lm.py:smoke") == "configs/char_lm.py:smoke"
