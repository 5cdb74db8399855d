"""JAX's persistent compilation cache, on by default for training runs (issue 36).

A run's compiled programs (the train step, evaluation, sampling) are written to a cache
directory and reused by the next run with the same program, so a restarted or repeated
run skips most of its start-up compilation. ``config.train.compilation_cache``:

* ``"auto"`` (default): ``$SEQJAX_COMPILATION_CACHE`` (or JAX's own
  ``$JAX_COMPILATION_CACHE_DIR``) if set, else ``jax_cache`` beside the
  TFDS data directory (``config.data.data_dir``, default ``~/seqjax_data/tfds`` ->
  ``~/seqjax_data/jax_cache``);
* a path: that directory; it must look like one (absolute, ``~/...``, ``./...`` or with a
  ``/`` in it): ``compilation_cache=5`` is refused by config validation, not made ``./5``;
* ``""`` or ``"off"``: no persistent cache (``--config.train.compilation_cache=off``).

A cache is an optimisation, never a reason to stop a run: a directory that cannot be used
(a file, a path below a file, ``/proc``, a read-only mount, ``$SEQJAX_COMPILATION_CACHE``
naming a file) gives one warning that names it and why, and the run goes on without a
persistent cache (``enable``).
"""

from __future__ import annotations

import logging
import os
import tempfile

import jax

log = logging.getLogger(__name__)

ENV_DIR = "SEQJAX_COMPILATION_CACHE"
OFF = ("", "off", "none")
# Programs that compile faster than this are not worth a disk entry.
MIN_COMPILE_SECONDS = 0.5


def setting_problem(setting) -> str | None:
    """What is wrong with a ``train.compilation_cache`` value (config validation), as the
    valid values; None for ``auto``, ``off`` or a path-looking string."""
    valid = "'auto', 'off' or a directory path (absolute, ~/..., ./... or containing a /)"
    if setting is None:
        return None
    if not isinstance(setting, str):
        return valid
    s = setting.strip()
    if s.lower() in OFF or s == "auto":
        return None
    if s.startswith(("~", ".")) or os.sep in s or "/" in s:
        return None
    return valid


def resolve(setting, data_dir: str | None = None) -> str | None:
    """The cache directory of ``config.train.compilation_cache`` (None: off).

    Raises:
      ValueError: for a setting that is not a string.
    """
    if setting is None or (isinstance(setting, str) and setting.strip().lower() in OFF):
        return None
    if not isinstance(setting, str):
        raise ValueError(
            f"train.compilation_cache must be 'auto', 'off' or a directory; got {setting!r}"
        )
    if setting != "auto":
        return os.path.expanduser(setting)
    for env in (ENV_DIR, "JAX_COMPILATION_CACHE_DIR"):  # JAX's own setting is kept
        if os.environ.get(env):
            return os.path.expanduser(os.environ[env])
    tfds = data_dir or os.environ.get("SEQJAX_TFDS_DIR") or "~/seqjax_data/tfds"
    parent = os.path.dirname(os.path.abspath(os.path.expanduser(tfds).rstrip("/")))
    return os.path.join(parent, "jax_cache")


def unusable(directory: str) -> str | None:
    """Why ``directory`` cannot hold the cache (created if missing, then a file written and
    removed in it), or None when it can. Remote paths (``gs://``) are JAX's to check."""
    if "://" in directory:
        return None
    if os.path.exists(directory) and not os.path.isdir(directory):
        return "it is a file, not a folder"
    try:
        os.makedirs(directory, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".seqjax_probe_", dir=directory)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        return e.strerror or str(e)
    return None


def enable(directory: str | None, source: str = "train.compilation_cache") -> str | None:
    """Points JAX's persistent compilation cache at ``directory`` (None: leaves it off).
    Returns the directory in use; None, after one warning naming ``source`` (the setting it
    came from), when the directory cannot be used (``unusable``): the run goes on without."""
    if directory is None:
        return None
    why = unusable(directory)
    if why is not None:
        log.warning(
            "the compilation cache %s (from %s) cannot be used (%s); running without a "
            "persistent compilation cache", directory, source, why
        )  # fmt: skip
        if jax.config.jax_compilation_cache_dir == directory:  # $JAX_COMPILATION_CACHE_DIR
            jax.config.update("jax_compilation_cache_dir", None)
        return None
    jax.config.update("jax_compilation_cache_dir", directory)
    if not os.environ.get("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"):  # else JAX's own
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    log.info("persistent compilation cache: %s", directory)
    return directory


def source(setting) -> str:
    """Where ``resolve(setting)``'s directory comes from (for the warning of ``enable``)."""
    if setting != "auto":
        return "train.compilation_cache"
    for env in (ENV_DIR, "JAX_COMPILATION_CACHE_DIR"):
        if os.environ.get(env):
            return f"${env}"
    return "train.compilation_cache='auto', beside data.data_dir"


def enable_for(config) -> str | None:
    """``enable(resolve(...))`` from a run config (``train.compilation_cache``,
    ``data.data_dir``)."""
    setting = config.train.get("compilation_cache", "auto")
    return enable(resolve(setting, config.data.get("data_dir")), source(setting))
