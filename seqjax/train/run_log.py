"""The run's log file: library noise goes there, never to the console of a run.

A failing save on a full disk makes Orbax log its thread's traceback, TensorStore's
callbacks print ``RuntimeError: Event loop is closed`` tracebacks from dying event loops,
and a damaged checkpoint makes Orbax log its reader's errors: dozens of lines around the one
sentence that says what happened. ``RunLog.open(workdir)`` sends all of it to
``<workdir>/seqjax.log`` instead:

* every ``logging`` record (seqjax's and the libraries', INFO and up) is appended to the file;
* on the console, library records that are noise (Orbax, asyncio, absl, TensorStore, or any
  record carrying a traceback) are dropped; seqjax's own lines and other libraries' plain
  warnings stay (``seqjax.console.QuietLibraries`` still applies on top);
* exceptions that reach Python's hooks from library threads (``threading.excepthook``,
  ``sys.unraisablehook``, and ``sys.excepthook``, which pybind11 callbacks of TensorStore
  end in) are written to the file only.

``report(e, workdir)`` is ``seqjax.train.errors.report`` plus the file: the sentence names
it, and the exception's traceback is kept in it (a bug's traceback still goes to stderr).
"""

from __future__ import annotations

import datetime
import logging
import os
import sys
import threading
import traceback

from absl import logging as absl_logging

from seqjax.train import errors, paths

LOG_NAME = "seqjax.log"
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# Loggers and source folders whose records are noise on a run's console.
_NOISY_LOGGERS = ("asyncio", "orbax", "tensorstore", "concurrent")
_NOISY_PATHS = (f"{os.sep}orbax{os.sep}", f"{os.sep}absl{os.sep}", f"{os.sep}asyncio{os.sep}")


def is_noise(record: logging.LogRecord) -> bool:
    """Whether a library ``record`` stays off the console (it still reaches the log file)."""
    if record.pathname.startswith(_PACKAGE_DIR):
        return False
    if record.exc_info or record.exc_text or "Traceback (most recent call last)" in str(record.msg):
        return True
    if record.name.split(".")[0] in _NOISY_LOGGERS:
        return True
    return any(p in record.pathname for p in _NOISY_PATHS)


class _NoiseFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not is_noise(record)


class _FileHandler(logging.StreamHandler):
    """A handler that drops a record it cannot write (a full disk) without a word."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        del record


class RunLog:
    """``<workdir>/seqjax.log`` while a run is going (``open``/``close``; one at a time)."""

    current: RunLog | None = None

    def __init__(self, path: str, stream):
        self.path = path
        self.stream = stream
        self.handler = _FileHandler(stream)
        self.handler.setLevel(logging.INFO)
        self.handler.setFormatter(absl_logging.PythonFormatter())
        self.filter = _NoiseFilter()
        self._hooks = (sys.excepthook, threading.excepthook, sys.unraisablehook)

    @classmethod
    def open(cls, workdir: str | None) -> RunLog | None:
        """Starts the run's log in ``workdir`` (a local folder); None where none can be made."""
        if cls.current is not None:
            return cls.current
        if not workdir or paths.is_remote(workdir):
            return None  # object stores cannot append; the console keeps everything
        try:
            import jax

            i = jax.process_index()  # one file per process
            name = LOG_NAME if i == 0 else LOG_NAME.replace(".log", f".process_{i}.log")
            path = os.fspath(paths.workdir_path(workdir) / name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            stream = open(path, "a", buffering=1, encoding="utf-8", errors="replace")  # noqa: SIM115
        except (OSError, ValueError):
            return None  # the workdir checks say why, in one sentence
        log = cls(path, stream)
        log._install()
        cls.current = log
        now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        log.write(f"==== {now} pid {os.getpid()}: {' '.join(sys.argv)}\n")
        return log

    def _install(self) -> None:
        logging.getLogger().addHandler(self.handler)
        absl_logging.get_absl_handler().addFilter(self.filter)
        sys.excepthook = self._excepthook
        threading.excepthook = self._thread_excepthook
        sys.unraisablehook = self._unraisable

    def write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass  # a full disk: the console sentence says so already

    def _excepthook(self, exc_type, exc, tb) -> None:
        self.write("".join(traceback.format_exception(exc_type, exc, tb)))

    def _thread_excepthook(self, args) -> None:
        name = getattr(args.thread, "name", "?")
        self.write(f"exception in thread {name}:\n")
        self._excepthook(args.exc_type, args.exc_value, args.exc_traceback)

    def _unraisable(self, unraisable) -> None:
        self.write(f"{unraisable.err_msg or 'exception ignored'}: {unraisable.object!r}\n")
        if unraisable.exc_type is not None:
            self._excepthook(unraisable.exc_type, unraisable.exc_value, unraisable.exc_traceback)

    def close(self) -> None:
        """Puts the hooks and handlers back (library threads still running keep writing
        to the file until they are done: the hooks stay installed for them)."""
        logging.getLogger().removeHandler(self.handler)
        absl_logging.get_absl_handler().removeFilter(self.filter)
        sys.excepthook, threading.excepthook, sys.unraisablehook = self._hooks
        self.stream.close()
        RunLog.current = None


def report(e: BaseException, workdir: str | None) -> int:
    """``errors.report`` with the run's log: the sentence names the file, which keeps the
    exception's traceback. Returns the exit status."""
    log = RunLog.current
    if log is None:
        return errors.report(e, workdir)
    log.write("".join(traceback.format_exception(e)))
    known = errors.message(e, workdir)
    if known is None:
        return errors.report(e, workdir)  # a bug: its traceback on the console too
    print(f"error: {known[0]} (details in {log.path})", file=sys.stderr, flush=True)
    return known[1]
