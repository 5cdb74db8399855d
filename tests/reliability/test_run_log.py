"""Issue 38, items 1 and 2 (fast part): library noise goes to ``<workdir>/seqjax.log``, never
to the console, and the error sentence names that file (the end-to-end runs are in
test_issue38_disk_full.py)."""

from __future__ import annotations

import errno
import logging
import os
import sys
import threading

import pytest

from seqjax.train import run_log


def _record(name: str, pathname: str, level=logging.WARNING, exc=False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise RuntimeError("Event loop is closed")
        except RuntimeError:
            exc_info = sys.exc_info()
    return logging.LogRecord(name, level, pathname, 1, "msg", (), exc_info)


def test_noise_is_told_from_seqjax_and_plain_library_warnings():
    lib = "/venv/site-packages"
    assert run_log.is_noise(_record("absl", f"{lib}/orbax/checkpoint/_src/futures/future.py"))
    assert run_log.is_noise(_record("asyncio", "/usr/lib/python3.11/asyncio/base_events.py"))
    assert run_log.is_noise(_record("jax", f"{lib}/jax/_src/x.py", exc=True))  # a traceback
    assert not run_log.is_noise(_record("jax", f"{lib}/jax/_src/x.py"))  # a plain warning
    seqjax_file = os.path.join(os.path.dirname(run_log.__file__), "checkpoint.py")
    assert not run_log.is_noise(_record("absl", seqjax_file, exc=True))  # seqjax's own lines


@pytest.fixture
def log(tmp_path):
    opened = run_log.RunLog.open(str(tmp_path))
    yield opened
    opened.close()


def test_thread_and_unraisable_exceptions_go_to_the_file(log, tmp_path, capfd):
    def fail():
        raise RuntimeError("Event loop is closed")

    t = threading.Thread(target=fail, name="array_type_handler")
    t.start()
    t.join()
    sys.unraisablehook(
        type(
            "U",
            (),
            {
                "exc_type": OSError,
                "exc_value": OSError(28, "full"),
                "exc_traceback": None,
                "err_msg": "Exception ignored in",
                "object": "a callback",
            },
        )()  # fmt: skip
    )
    logging.getLogger("asyncio").error("Task exception was never retrieved")
    out, err = capfd.readouterr()
    assert "Event loop is closed" not in out + err and "Traceback" not in out + err
    text = (tmp_path / "seqjax.log").read_text()
    assert "exception in thread array_type_handler" in text and "Event loop is closed" in text
    assert "Exception ignored in" in text and "Task exception was never retrieved" in text


def test_report_names_the_log_and_keeps_the_traceback(log, tmp_path, capfd):
    try:
        raise OSError(errno.ENOSPC, "No space left on device")
    except OSError as e:
        status = run_log.report(e, str(tmp_path))
    assert status == 2
    err = capfd.readouterr().err
    (line,) = err.strip().splitlines()
    assert line.startswith("error: the disk is full") and f"{tmp_path}/seqjax.log" in line
    assert "OSError: [Errno 28]" in (tmp_path / "seqjax.log").read_text()


def test_close_puts_the_hooks_back(tmp_path):
    before = (sys.excepthook, threading.excepthook, sys.unraisablehook)
    run_log.RunLog.open(str(tmp_path)).close()
    assert (sys.excepthook, threading.excepthook, sys.unraisablehook) == before
    assert run_log.RunLog.current is None
