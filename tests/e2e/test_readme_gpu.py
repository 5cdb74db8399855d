"""The README's GPU section: one section with the install, the GPU test command and what it
needs (the test extra, and the CPU torch it should keep), the kernel tests and benchmarks,
and the compile-only checks; the compilation cache documented where runs are (it is on on
every backend) with the directory, variable and threshold the code uses."""

from __future__ import annotations

import re
import shlex

from seqjax import compile_cache
from tests.conftest import REPO

README = (REPO / "README.md").read_text()


def _section(title: str) -> str:
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_one_gpu_section_gathers_the_gpu_commands():
    assert README.count("\n## GPU\n") == 1 and "\n### GPU\n" not in README
    gpu = _section("GPU")
    assert 'pip install -e ".[cuda12,test]"' in gpu
    assert "torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in gpu
    assert "python experiments/accelerator/run.py --scale gpu" in gpu
    assert "\n### Compile-only checks\n" in gpu
    # every GPU command outside it is a pointer to it
    outside = README.replace(gpu, "")
    assert "JAX_PLATFORMS=cuda python -m pytest" not in outside
    # the test commands name test paths that exist and deselect the slow ones as CI does
    for line in gpu.splitlines():
        if line.startswith("JAX_PLATFORMS=cuda python -m pytest"):
            paths = [a for a in shlex.split(line) if a.startswith("tests/")]
            assert paths and all((REPO / p).exists() for p in paths), line


def test_torch_pin_is_the_one_the_gpu_section_names():
    pin = re.search(r'"torch==([0-9.]+)"', (REPO / "pyproject.toml").read_text()).group(1)
    assert f"torch=={pin} --index-url" in _section("GPU")


def test_compilation_cache_is_documented_with_the_code_values(monkeypatch):
    for env in (compile_cache.ENV_DIR, "JAX_COMPILATION_CACHE_DIR", "SEQJAX_TFDS_DIR"):
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setenv("HOME", "/home/u")
    default = compile_cache.resolve("auto")
    assert default == "/home/u/seqjax_data/jax_cache"
    training = _section("Training")
    bullet = training.split("**Compilation cache**", 1)[1].split("\n- **", 1)[0]
    assert "`~/seqjax_data/jax_cache`" in bullet and "every backend" in bullet
    assert f"`{compile_cache.ENV_DIR}=/path`" in bullet
    assert f"{compile_cache.MIN_COMPILE_SECONDS} s" in bullet
    assert "--config.train.compilation_cache=off" in bullet
    assert "SEQJAX_COMPILATION_CACHE" not in _section("GPU")
