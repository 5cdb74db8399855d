"""Append-only line files written whole or not at all (``metrics.jsonl``).

A line is one ``os.write`` to a file opened with ``O_APPEND``; when the write fails part of
the way (``ENOSPC``: the disk filled up mid-line), the file is truncated back to where the
line began before the error goes on, so a reader never meets half a line. A process killed
inside that one write can still leave a torn last line: ``repair_torn_tail`` (run when the
file is opened again, i.e. on a resume) removes it before anything is appended after it. A
last line that lacks only its newline (it parses: a JSON object whole) is complete, not
torn: it is kept and gets its newline.
"""

from __future__ import annotations

import json
import logging
import os

_write = os.write  # the one system call a line goes out by (fault tests replace it)


def _complete(tail: bytes) -> bool:
    """Whether a last line without its newline is whole: a JSON object that parses."""
    try:
        return isinstance(json.loads(tail.decode("utf-8")), dict)
    except ValueError:  # UnicodeDecodeError and JSONDecodeError both
        return False


def repair_torn_tail(path: str) -> int:
    """Truncates ``path`` after its last newline, unless what follows it is a complete line
    (``_complete``), which gets its newline instead; returns the bytes removed (0: intact)."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return 0
    if size == 0:
        return 0
    with open(path, "rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return 0
        # Find the last newline, reading backwards a block at a time.
        end, block, cut = size, 1 << 16, 0
        while end > 0:
            start = max(0, end - block)
            f.seek(start)
            chunk = f.read(end - start)
            i = chunk.rfind(b"\n")
            if i >= 0:
                cut = start + i + 1
                break
            end = start
        f.seek(cut)
        if _complete(f.read(size - cut)):
            f.seek(0, os.SEEK_END)
            f.write(b"\n")
            logging.info("%s: its last line lacked only its newline; added it", path)
            return 0
        f.truncate(cut)
    logging.warning(
        "%s ended in a torn line (%d bytes, from a run stopped while writing it); removed it",
        path,
        size - cut,
    )
    return size - cut


class LineFile:
    """``write(text)`` appends whole lines (``text`` ends in a newline) to a local file."""

    def __init__(self, path: str):
        self.path = os.fspath(path)
        repair_torn_tail(self.path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def fileno(self) -> int:
        return self._fd

    def write(self, text: str) -> int:
        data = text.encode("utf-8")
        before = os.fstat(self._fd).st_size
        written = 0
        try:
            while written < len(data):
                written += _write(self._fd, data[written:])
        except OSError as e:
            if written:
                try:  # take the partial line back out; freeing bytes cannot need space
                    os.ftruncate(self._fd, before)
                except OSError:  # pragma: no cover - the next open repairs it
                    pass
            if e.filename is None:  # os.write names no file: the message should
                e.filename = self.path
            raise
        return len(text)

    def flush(self) -> None:
        pass  # every line is written by the time ``write`` returns

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
