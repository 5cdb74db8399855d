"""Workdir paths exactly as users write them: relative, ``~``, symlinks, or cloud URIs.

Every piece of workdir I/O (Orbax checkpoints, ``metrics.jsonl``, TensorBoard events,
``config.json``, run info, ``result.json``, sweeps) goes through ``etils.epath``, so a
``gs://bucket/run`` workdir is written to the bucket (``pip install "seqjax[gcs]"`` installs
``gcsfs`` for it) and a local one through the same calls. The config file a ``--config``
value names is found (``config_file``) and loaded as a module (``load_file``) here too.
"""

from __future__ import annotations

import importlib.util
import io
import os
import pathlib
import sys
import time
import types

from etils import epath

from seqjax.train import lines

#: URI schemes ``etils.epath`` reads and writes through fsspec (gcsfs, s3fs, adlfs...).
REMOTE_PREFIXES = ("gs://", "s3://", "az://")


def is_remote(path) -> bool:
    return os.fspath(path).startswith(REMOTE_PREFIXES)


def workdir_path(workdir) -> epath.Path:
    """``workdir`` as an absolute ``epath.Path``.

    Local paths get ``~`` expanded and are made absolute against the current directory with
    symlinks resolved (Orbax rejects relative checkpoint paths); ``gs://``-style URIs are
    kept as written. A ``file://`` URI is the local path it names.
    """
    text = os.fspath(workdir)
    if not text:
        raise ValueError("--workdir must not be empty")
    if is_remote(text):
        return epath.Path(text)
    if text.startswith("file://"):
        text = text[len("file://") :]
    elif "://" in text:
        scheme = text.split("://", 1)[0]
        raise ValueError(
            f"--workdir {workdir!r}: unsupported scheme {scheme!r}; use a local path or one of "
            + ", ".join(REMOTE_PREFIXES)
        )
    return epath.Path(os.path.realpath(os.path.expanduser(text)))


class _EpathRecordFile:
    """A TensorBoard event file written through epath (rewritten whole on every flush).

    Object stores cannot append, so the writer keeps the bytes and uploads them on flush,
    as tensorboardX's own GCS writer does, but through epath/fsspec (no extra client).
    """

    def __init__(self, path: str):
        self.path = epath.Path(path)
        self.buffer = io.BytesIO()

    def write(self, data: bytes) -> None:
        self.buffer.write(data)

    def flush(self) -> None:
        self.path.write_bytes(self.buffer.getvalue())

    def close(self) -> None:
        self.flush()


class _EpathRecordFactory:
    def open(self, path: str) -> _EpathRecordFile:
        return _EpathRecordFile(path)

    def directory_check(self, path: str) -> None:
        epath.Path(path).mkdir(parents=True, exist_ok=True)


def register_tensorboard_schemes() -> None:
    """Routes tensorboardX's cloud event files through epath (gcsfs, not google-cloud-storage)."""
    from tensorboardX import record_writer

    for prefix in REMOTE_PREFIXES:
        record_writer.register_writer_factory(prefix.split(":")[0], _EpathRecordFactory())


class _RewrittenTextFile:
    """Append-only text for object stores (no append there): the whole file is rewritten,
    at most every ``every_s`` seconds and on ``flush``/``close``; existing lines are kept."""

    def __init__(self, path: epath.Path, every_s: float = 30.0):
        self.path = path
        self.text = path.read_text() if path.exists() else ""
        self.every_s = every_s
        self._written = 0.0

    def write(self, text: str) -> None:
        self.text += text
        if time.monotonic() - self._written >= self.every_s:
            self.flush()

    def flush(self) -> None:
        self.path.write_text(self.text)
        self._written = time.monotonic()

    def close(self) -> None:
        self.flush()


def open_append(path: epath.Path):
    """A text file for appending whole lines (rewritten whole on object stores).

    Locally each line is written whole or not at all, and a torn last line left by an
    earlier process is removed first (``seqjax.train.lines``).
    """
    if is_remote(path):
        return _RewrittenTextFile(path)
    return lines.LineFile(os.fspath(path))


def config_file(spec: str) -> str:
    """``--config`` value -> ``file.py[:variant]``.

    Accepts a file path (``configs/char_lm.py:smoke``, ``~`` expanded) or, for an installed
    package with no checkout at hand, a module name (``seqjax.configs.char_lm:smoke``).
    """
    import importlib.util

    name, sep, variant = spec.partition(":")
    if not name.endswith(".py") and name.replace(".", "").replace("_", "").isalnum():
        try:
            found = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            found = None
        if found is not None and found.origin and found.origin.endswith(".py"):
            return found.origin + sep + variant
    return os.path.expanduser(name) + sep + variant


def load_file(path, name: str | None = None, register: bool = False) -> types.ModuleType:
    """Imports the Python file ``path`` as a fresh module (``name``: default from the stem).

    ``register`` puts it in ``sys.modules`` under ``name`` first, which dataclasses and
    pickling need to find their module again. (Config files, experiments and tests load
    files through ``seqjax.configs.common.load_file``, this function.)
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} does not exist")
    name = name or f"_seqjax_config_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def resolve_config_flag(argv: list[str]) -> list[str]:
    """``argv`` with its ``--config`` value passed through ``config_file``."""
    out = list(argv)
    for i, arg in enumerate(out):
        if arg.startswith("--config="):
            out[i] = "--config=" + config_file(arg.split("=", 1)[1])
        elif arg == "--config" and i + 1 < len(out):
            out[i + 1] = config_file(out[i + 1])
    return out
