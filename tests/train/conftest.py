"""Fixtures of the training-system tests: a tiny corpus, tiny configs, subprocess jobs.

Every job here trains a 2-layer, 32-wide character LM on a ~40 KB generated text through
the real ``seqjax.data`` ``text_file`` pipeline (prepared once per session in a temporary
TFDS directory). Subprocess jobs run on one CPU device and share a persistent compilation
cache, so each new process starts in a few seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import TEST_XLA_FLAGS

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "char_lm.py"


def _corpus_text(n_lines: int = 1200, seed: int = 0) -> str:
    """Deterministic pseudo-Python text: learnable structure, a few dozen characters."""
    rng = np.random.default_rng(seed)
    names = ["alpha", "beta", "gamma", "delta", "value", "index", "count", "total"]
    ops = ["+", "-", "*"]
    lines = []
    for _ in range(n_lines):
        a, b = rng.choice(names, 2)
        k = int(rng.integers(0, 10))
        kind = int(rng.integers(0, 3))
        if kind == 0:
            lines.append(f"def {a}_{b}(x):\n    return x {rng.choice(ops)} {k}\n")
        elif kind == 1:
            lines.append(f"{a} = {b} {rng.choice(ops)} {k}\n")
        else:
            lines.append(f"for {a} in range({k}):\n    {b} += {a}\n")
    return "".join(lines)


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> dict:
    """``{'path': text file, 'data_dir': TFDS dir, 'cache': compilation cache dir}``."""
    root = tmp_path_factory.mktemp("train_corpus")
    path = root / "tiny.py.txt"
    path.write_text(_corpus_text())
    return {"path": str(path), "data_dir": str(root / "tfds"), "cache": str(root / "jax_cache")}


# Field overrides of configs/char_lm.py:smoke that make the tiny job.
def tiny_overrides(corpus: dict, **extra) -> dict:
    o = {
        "data.name": "text_file",
        "data.path": corpus["path"],
        "data.data_dir": corpus["data_dir"],
        "data.vocab": "chars",
        "data.seq_len": 32,
        "data.batch_size": 8,
        "model.num_layers": 2,
        "model.d_model": 32,
        "model.num_heads": 2,
        "model.max_len": 64,
        "mesh.data": 1,
        "optimizer.learning_rate": 3e-3,
        "optimizer.warmup_steps": 2,
        "train.num_steps": 40,
        "train.log_every": 1,
        "train.eval_every": 0,
        "train.eval_batch_size": 64,
        "train.checkpoint_every": 0,
        "train.final_eval": False,
        "train.sample_length": 0,
    }
    o.update(extra)
    return o


def tiny_config(corpus: dict, **extra):
    """The tiny job's ConfigDict (in-process runs)."""
    from seqjax.configs import common

    config = common.load_file(CONFIG).get_config("smoke")
    for key, value in tiny_overrides(corpus, **extra).items():
        node = config
        *parents, leaf = key.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return config


def subprocess_env(corpus: dict) -> dict:
    env = dict(os.environ)
    env["XLA_FLAGS"] = TEST_XLA_FLAGS  # one CPU device; see tests/conftest.py
    env["JAX_PLATFORMS"] = "cpu"
    env["JAX_COMPILATION_CACHE_DIR"] = corpus["cache"]
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    env["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def main_command(workdir, corpus: dict, **extra) -> list[str]:
    """``python -m seqjax.main`` for the tiny job with overrides."""
    cmd = [sys.executable, "-m", "seqjax.main", f"--config={CONFIG}:smoke", f"--workdir={workdir}"]
    cmd += [f"--config.{k}={v}" for k, v in tiny_overrides(corpus, **extra).items()]
    return cmd


def run_main(workdir, corpus: dict, *, timeout=240, **extra) -> subprocess.CompletedProcess:
    return subprocess.run(
        main_command(workdir, corpus, **extra),
        env=subprocess_env(corpus),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def losses(workdir) -> dict[int, float]:
    """step -> train loss from metrics.jsonl (lines of every run; all must agree)."""
    out: dict[int, list[float]] = {}
    path = Path(workdir) / "metrics.jsonl"
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if "train/loss" in rec:
            out.setdefault(rec["step"], []).append(rec["train/loss"])
    return out


def complete_steps(workdir) -> list[int]:
    """Finalized checkpoint steps on disk (what Orbax's latest_step chooses from)."""
    d = Path(workdir) / "checkpoints"
    if not d.exists():
        return []
    return sorted(int(p.name) for p in d.iterdir() if p.is_dir() and p.name.isdigit())


def partial_checkpoints(workdir) -> list[str]:
    d = Path(workdir) / "checkpoints"
    if not d.exists():
        return []
    return sorted(p.name for p in d.iterdir() if "tmp" in p.name)


@pytest.fixture(scope="session")
def reference_losses(corpus, tmp_path_factory) -> dict[int, float]:
    """Per-step losses of the uninterrupted 40-step tiny job in a fresh process."""
    workdir = tmp_path_factory.mktemp("reference")
    proc = run_main(workdir, corpus)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ref = losses(workdir)
    assert sorted(ref) == list(range(1, 41))
    return {s: v[0] for s, v in ref.items()}


@pytest.fixture(scope="session")
def helpers():
    """The helpers above as one object (test modules cannot import conftest by name)."""
    import types

    return types.SimpleNamespace(
        tiny_config=tiny_config,
        tiny_overrides=tiny_overrides,
        main_command=main_command,
        run_main=run_main,
        subprocess_env=subprocess_env,
        losses=losses,
        complete_steps=complete_steps,
        partial_checkpoints=partial_checkpoints,
        repo=REPO,
    )
