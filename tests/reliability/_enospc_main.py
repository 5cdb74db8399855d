"""``python -m seqjax.main`` with a disk that fills up: from the metrics line of step
``$SEQJAX_TEST_ENOSPC_AT_STEP`` on, every line is cut in half by ``ENOSPC`` (a simulated full
disk where a tmpfs cannot be mounted; tests/reliability/test_issue38_disk_full.py)."""

from __future__ import annotations

import errno
import json
import os
import sys

from seqjax import main
from seqjax.train import lines

_AT = int(os.environ["SEQJAX_TEST_ENOSPC_AT_STEP"])
_real = lines._write


_full = [False]


def _full_disk_write(fd, data):
    try:
        step = json.loads(bytes(data).decode())["step"]
    except (ValueError, KeyError, TypeError):
        step = -1  # the rest of a line cut short
    if not _full[0] and 0 <= step < _AT:
        return _real(fd, data)
    if not _full[0] and len(data) > 1:
        _full[0] = True
        return _real(fd, data[: len(data) // 2])  # half the line fits, then the disk is full
    raise OSError(errno.ENOSPC, "No space left on device")


lines._write = _full_disk_write

if __name__ == "__main__":
    sys.argv[0] = "seqjax.main"
    main.run()
