"""What the console shows: seqjax's own lines, the libraries' warnings, and complete --help.

A run should read as: the run header, the progress, the evaluations, the result. Orbax
logs ~40 INFO lines per checkpoint, JAX an INFO line per backend it cannot load (TPU on
every CPU machine), TFDS progress bars while it prepares data: ``quiet_libraries`` keeps
INFO lines only from seqjax's own files, and WARNING+ from everyone else.
"""

from __future__ import annotations

import logging as std_logging
import os
import sys

from absl import flags
from absl import logging as absl_logging

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
# Library warnings that are not a problem of the run (TFDS says it on every config).
_NOISE = ("Using custom data configuration",)


class QuietLibraries(std_logging.Filter):
    """INFO from files under ``seqjax/`` (this package); WARNING+ from libraries.

    Note: ``absl.logging.WARNING`` is absl's verbosity (-1), not the record level; the
    record levels are the standard library's.
    """

    def filter(self, record: std_logging.LogRecord) -> bool:
        if record.pathname.startswith(_PACKAGE_DIR):
            return True
        if record.levelno < std_logging.WARNING:
            return False
        return not any(n in str(record.msg) for n in _NOISE)


def quiet_libraries() -> None:
    """Installs ``QuietLibraries`` on absl's handler and turns TFDS progress bars off."""
    handler = absl_logging.get_absl_handler()
    if not any(isinstance(f, QuietLibraries) for f in handler.filters):
        handler.addFilter(QuietLibraries())
    try:
        import tensorflow_datasets as tfds

        tfds.disable_progress_bar()
    except ImportError:  # pragma: no cover - tfds is a dependency
        pass


def show_flags_in_help(module_name: str) -> None:
    """Makes ``--help`` list ``module_name``'s flags when run as a console script.

    absl's ``--help`` shows the flags of the module named by ``sys.argv[0]``; for
    ``seqjax-train`` that is the script file, not ``seqjax.main`` where they are defined.
    """
    fv = flags.FLAGS
    for flag in fv.flags_by_module_dict().get(module_name, []):
        fv.register_key_flag_for_module(sys.argv[0], flag)
    main = sys.modules.get("__main__")
    module = sys.modules.get(module_name)
    if main is not None and module is not None and not main.__doc__:
        main.__doc__ = module.__doc__  # the usage text absl prints above the flags
