"""JAX's persistent compilation cache, on by default for training runs (issue 36).

A run's compiled programs (the train step, evaluation, sampling) are written to a cache
directory and reused by the next run with the same program, so a restarted or repeated
run skips most of its start-up compilation. ``config.train.compilation_cache``:

* ``"auto"`` (default): ``$SEQJAX_COMPILATION_CACHE`` (or JAX's own
  ``$JAX_COMPILATION_CACHE_DIR``) if set, else ``jax_cache`` beside the
  TFDS data directory (``config.data.data_dir``, default ``~/seqjax_data/tfds`` ->
  ``~/seqjax_data/jax_cache``);
* a path: that directory;
* ``""`` or ``"off"``: no persistent cache (``--config.train.compilation_cache=off``).
"""

from __future__ import annotations

import logging
import os

import jax

log = logging.getLogger(__name__)

ENV_DIR = "SEQJAX_COMPILATION_CACHE"
OFF = ("", "off", "none")
# Programs that compile faster than this are not worth a disk entry.
MIN_COMPILE_SECONDS = 0.5


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


def enable(directory: str | None) -> str | None:
    """Points JAX's persistent compilation cache at ``directory`` (None: leaves it off).
    Returns the directory in use."""
    if directory is None:
        return None
    os.makedirs(directory, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", directory)
    if not os.environ.get("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"):  # else JAX's own
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    log.info("persistent compilation cache: %s", directory)
    return directory


def enable_for(config) -> str | None:
    """``enable(resolve(...))`` from a run config (``train.compilation_cache``,
    ``data.data_dir``)."""
    setting = config.train.get("compilation_cache", "auto")
    return enable(resolve(setting, config.data.get("data_dir")))
