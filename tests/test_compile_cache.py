"""The persistent compilation cache (``seqjax.compile_cache``; issue 36)."""

import os
import subprocess
import sys

import pytest

from seqjax import compile_cache
from seqjax.train import defaults
from tests.conftest import REPO


def test_default_is_on_beside_the_tfds_data(monkeypatch):
    monkeypatch.delenv(compile_cache.ENV_DIR, raising=False)
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    monkeypatch.delenv("SEQJAX_TFDS_DIR", raising=False)
    assert defaults.train().compilation_cache == "auto"
    assert compile_cache.resolve("auto", "/data/tfds") == "/data/jax_cache"
    assert compile_cache.resolve("auto", "/data/tfds/") == "/data/jax_cache"
    home = os.path.expanduser("~/seqjax_data/jax_cache")
    assert compile_cache.resolve("auto", None) == home
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", "/tmp/jax_own")  # JAX's setting is kept
    assert compile_cache.resolve("auto", "/data/tfds") == "/tmp/jax_own"
    monkeypatch.setenv(compile_cache.ENV_DIR, "/tmp/elsewhere")
    assert compile_cache.resolve("auto", "/data/tfds") == "/tmp/elsewhere"


def test_off_with_one_flag_and_explicit_directories():
    for off in ("off", "", "none", None):
        assert compile_cache.resolve(off, "/data/tfds") is None
    assert compile_cache.enable(None) is None
    assert compile_cache.resolve("/x/cache") == "/x/cache"
    with pytest.raises(ValueError, match="train.compilation_cache must be"):
        compile_cache.resolve(3)


def test_a_compiled_program_is_written_to_the_cache(tmp_path):
    """In a fresh process (the cache is process-wide): ``enable_for`` a config, compile a
    program, and the cache directory holds its entry."""
    cache = tmp_path / "cache"
    code = f"""
import jax, jax.numpy as jnp, ml_collections
from seqjax import compile_cache
config = ml_collections.ConfigDict(
    {{"train": {{"compilation_cache": {str(cache)!r}}}, "data": {{"data_dir": None}}}}
)
assert compile_cache.enable_for(config) == {str(cache)!r}
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
print(jax.jit(lambda x: jnp.sin(x) @ x.T)(jnp.ones((64, 64))).sum())
"""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=300, cwd=REPO)
    assert cache.is_dir() and any(cache.iterdir())
