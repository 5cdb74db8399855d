"""The job's working directory: checks before a job starts, and an exclusive lock.

Two jobs writing one workdir (a repeated launch, a requeue while the old job still runs)
corrupt each other's checkpoints, so a training job holds ``<workdir>/seqjax.lock`` for
its whole life. The lock is an ``flock`` on that file: the kernel drops it when the holder
exits in any way (``kill -9`` included), so a lock left by a dead process is stale by
construction and the next job takes it over (logging whose it was). The file names the
holder (host, pid, start time) so that a refused job can say who has the workdir.

In a multi-process job process 0 takes the lock and the other processes learn the outcome
from it (``acquire_for_job``), so every process either runs or stops with the same message.
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import json
import logging
import os
import socket
import tempfile
from pathlib import Path

LOCK_NAME = "seqjax.lock"


class WorkdirError(RuntimeError):
    """The workdir cannot be used (busy, not a folder, not writable, disk full)."""


def _describe(holder: dict) -> str:
    return (
        f"host {holder.get('host', '?')}, pid {holder.get('pid', '?')}, "
        f"started {holder.get('started', '?')}"
    )


def is_remote(workdir: str) -> bool:
    """A ``gs://``-style path (no local permissions, no ``flock``)."""
    return "://" in str(workdir)


def check_usable(workdir: str, *, create: bool = True):
    """Raises ``WorkdirError`` unless ``workdir`` is (or can be made) a writable folder.

    Remote paths (``gs://...``) are only checked for being a folder (made if missing).
    """
    if is_remote(workdir):
        from etils import epath

        remote = epath.Path(workdir)
        if remote.exists() and not remote.is_dir():
            raise WorkdirError(f"--workdir={workdir} is a file, not a folder; give a folder path")
        remote.mkdir(parents=True, exist_ok=True)
        return remote
    path = Path(workdir).expanduser()
    if path.exists() and not path.is_dir():
        raise WorkdirError(f"--workdir={workdir} is a file, not a folder; give a folder path")
    if not path.exists():
        if not create:
            raise WorkdirError(f"--workdir={workdir} does not exist")
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise WorkdirError(
                f"--workdir={workdir} cannot be created ({e.strerror}); "
                "choose a folder you can write to"
            ) from None
    try:
        with tempfile.NamedTemporaryFile(dir=path, prefix=".seqjax_write_test_"):
            pass
    except OSError as e:
        hint = disk_full_hint(e) or "choose a folder you can write to, or fix its permissions"
        raise WorkdirError(f"--workdir={workdir} is not writable ({e.strerror}); {hint}") from None
    return path


def disk_full_hint(e: BaseException) -> str | None:
    """A sentence for ``No space left on device`` / quota errors, else None."""
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return "the disk is full (or the quota is reached): free space, then rerun to resume"
    return None


class WorkdirLock:
    """An exclusive lock on a workdir (``<workdir>/seqjax.lock``), held until ``release``.

    Raises ``WorkdirError`` naming the holder when another live process holds it.
    """

    def __init__(self, workdir: str):
        self.path = Path(workdir) / LOCK_NAME
        self._fd: int | None = None
        self.took_over: dict | None = None

    def _read_holder(self) -> dict:
        try:
            text = self.path.read_text().strip()
            return json.loads(text) if text else {}
        except (OSError, ValueError):
            return {}

    def acquire(self) -> WorkdirLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = self._read_holder()
            raise WorkdirError(
                f"workdir {self.path.parent} is in use by another job ({_describe(holder)}); "
                f"wait for it to end or stop it. Two jobs on one workdir would corrupt its "
                f"checkpoints. If no such job runs, delete {self.path} and rerun."
            ) from None
        except OSError as e:  # a filesystem without locks: fall back to a pid check
            if not self._pid_fallback_ok():
                os.close(fd)
                raise WorkdirError(
                    f"workdir {self.path.parent} is in use by another job "
                    f"({_describe(self._read_holder())}); locks are unsupported here "
                    f"({e.strerror}). If no such job runs, delete {self.path} and rerun."
                ) from None
        previous = self._read_holder()
        if previous:  # the lock was free, so its last holder died without releasing it
            self.took_over = previous
            logging.warning(
                "workdir lock %s was left by a process that no longer runs (%s); taking it over",
                self.path,
                _describe(previous),
            )
        me = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(me) + "\n").encode(), 0)
        self._fd = fd
        return self

    def _pid_fallback_ok(self) -> bool:
        """Without flock: free unless a live process on this host (or another host) holds it."""
        holder = self._read_holder()
        if not holder:
            return True
        if holder.get("host") != socket.gethostname():
            return False
        try:
            os.kill(int(holder.get("pid", -1)), 0)
        except ProcessLookupError:
            return True
        except (PermissionError, ValueError, OverflowError):
            return False
        return False

    def release(self) -> None:
        """Empties the file (no holder) and unlocks; the file stays (see ``acquire``)."""
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)
        except OSError:
            pass
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> WorkdirLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def acquire_for_job(workdir: str) -> WorkdirLock | None:
    """Process 0 locks ``workdir``; the others learn whether it succeeded.

    Returns the held lock on process 0 (None elsewhere). Raises ``WorkdirError`` on every
    process when process 0 could not take the lock.
    """
    import jax

    if is_remote(workdir):
        logging.warning(
            "workdir %s is remote: no lock against a second job on it (flock needs a local "
            "or NFS path); make sure only one job uses it",
            workdir,
        )
        return None
    lock, message = None, ""
    if jax.process_index() == 0:
        try:
            lock = WorkdirLock(workdir).acquire()
        except WorkdirError as e:
            message = str(e)
    if jax.process_count() > 1:
        import numpy as np
        from jax.experimental import multihost_utils

        ok = multihost_utils.broadcast_one_to_all(np.int32(0 if message else 1))
        if not int(ok) and jax.process_index() != 0:
            message = f"process 0 could not lock workdir {workdir} (see its log)"
    if message:
        raise WorkdirError(message)
    return lock
