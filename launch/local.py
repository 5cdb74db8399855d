"""Runs the main job as N JAX processes on this machine, each with M fake CPU devices.

    python launch/local.py --num-processes 2 --devices-per-process 4 -- \
        --config configs/char_lm.py:smoke --workdir workdirs/mp

Every process is a normal ``python -m seqjax.main`` joined through
``jax.distributed.initialize`` (coordinator on 127.0.0.1, gloo CPU collectives), exactly as
the processes of a multi-host TPU or GPU job are: the same code path, testable here. The
logs of process 0 stream to this terminal, the others go to ``WORKDIR/process_<i>.log``;
if any process fails, the rest are stopped and its exit status is returned.

Stopping the launcher stops its processes: a SIGTERM (a scheduler, ``timeout``) or SIGINT
(Ctrl-C) is forwarded to every process (which saves a checkpoint and exits, as one process
would), and a process still running ``--grace-s`` seconds later (default 30) is killed
(SIGKILL), so no worker outlives its launcher. A second signal kills them at once.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from launch import common  # noqa: E402

# Lines that libraries print on stdout: gloo's connection lines, absl/glog C++ log lines.
LIBRARY_LINE = re.compile(r"^(\[Gloo\]|[IWEF]\d{4} \d\d:\d\d:\d\d|\[libprotobuf )")


def route_output(stream, out=None, err=None) -> None:
    """Copies ``stream``'s lines to ``out`` (default: stdout), library chatter to ``err``
    (default: stderr), until it ends."""
    for line in iter(stream.readline, ""):
        target = (err or sys.stderr) if LIBRARY_LINE.match(line) else (out or sys.stdout)
        target.write(line)
        target.flush()
    stream.close()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_env(i: int, n: int, devices: int, port: int, base: dict | None = None) -> dict:
    env = dict(os.environ if base is None else base)
    env.update(
        {
            "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
            "JAX_NUM_PROCESSES": str(n),
            "JAX_PROCESS_ID": str(i),
            "JAX_PLATFORMS": "cpu",
            "JAX_CPU_COLLECTIVES_IMPLEMENTATION": "gloo",
        }
    )
    # The device count replaces any given one; the caller's other XLA flags are kept.
    kept = [
        flag
        for flag in env.get("XLA_FLAGS", "").split()
        if not flag.startswith("--xla_force_host_platform_device_count")
    ]
    env["XLA_FLAGS"] = " ".join([f"--xla_force_host_platform_device_count={devices}", *kept])
    return env


GRACE_S = 30.0  # seconds the processes have to save and exit once the launcher is stopped


class _Forwarder:
    """SIGTERM / SIGINT to the launcher, forwarded to every process's group.

    The processes run in their own sessions (a Ctrl-C in this terminal reaches only the
    launcher), so without this a stopped launcher leaves them running. The first signal is
    forwarded as it is (each process saves and exits); ``overdue()`` kills what still runs
    ``grace_s`` later; a second signal kills at once.
    """

    def __init__(self, procs: list, grace_s: float):
        self.procs, self.grace_s = procs, grace_s
        self.signum: int | None = None
        self._at = 0.0
        self._previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum, frame) -> None:
        del frame
        if self.signum is not None:  # the second signal: no more waiting
            self._at = -float("inf")
            self.overdue()
            return
        self.signum, self._at = signum, time.monotonic()
        _signal_all(self.procs, signum)
        _note(f"[local] {signal.Signals(signum).name}: forwarded to the {len(self.procs)} "
              f"processes; killing any still running in {self.grace_s:.0f} s")  # fmt: skip

    def overdue(self) -> bool:
        """Kills the processes still running once the grace period is over (True then)."""
        if time.monotonic() - self._at < self.grace_s:
            return False
        if any(p.poll() is None for p in self.procs):
            _note(f"[local] processes still running {self.grace_s:.0f} s after the signal: "
                  "killed")  # fmt: skip
        _signal_all(self.procs, signal.SIGKILL)
        return True

    def restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous = {}


def _note(text: str) -> None:
    """A line on stderr from a signal handler (one ``write(2)``: ``print`` could meet a
    print of the main thread and raise)."""
    try:
        os.write(2, (text + "\n").encode())
    except OSError:
        pass


def _signal_all(procs: list, signum: int) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signum)
            except ProcessLookupError:
                pass


def _workdir(main_args: list[str]) -> Path | None:
    """The local folder for the process logs: the job's ``--workdir`` (``~`` expanded), or
    None when there is none or it is a bucket (``gs://``)."""
    value = None
    for i, a in enumerate(main_args):
        if a.startswith("--workdir="):
            value = a.split("=", 1)[1]
        elif a == "--workdir" and i + 1 < len(main_args):
            value = main_args[i + 1]
    if value is None or "://" in value:
        return None
    return Path(os.path.expanduser(value))


def launch(
    num_processes: int,
    devices_per_process: int,
    main_args: list[str],
    module: str = "seqjax.main",
    poll_s: float = 0.2,
    env: dict | None = None,
    cwd: str | None = None,
    timeout_s: float | None = None,
    grace_s: float = GRACE_S,
) -> int:
    """Starts the processes and waits; returns 0 or the first failing exit status.

    Args:
      env: base environment of the processes (default: this process's).
      cwd: their working directory.
      timeout_s: stop every process and return 124 after this many seconds (a deadlock
        in a collective otherwise waits forever).
      grace_s: after a SIGTERM or SIGINT to the launcher (forwarded to every process), the
        seconds they have to save and exit before they are killed (``_Forwarder``).
    """
    port = free_port()
    workdir = _workdir(main_args)
    log_dir = workdir if workdir is not None else Path(".")
    log_dir.mkdir(parents=True, exist_ok=True)
    procs, logs, readers = [], [], []
    t0 = time.monotonic()
    forward = _Forwarder(procs, grace_s)
    try:
        for i in range(num_processes):
            if forward.signum is not None:  # stopped while starting them
                break
            out = None
            if i > 0:
                out = open(log_dir / f"process_{i}.log", "w")
                logs.append(out)
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", module, *main_args],
                    env=process_env(i, num_processes, devices_per_process, port, env),
                    stdout=out if out else subprocess.PIPE,
                    cwd=cwd,
                    stderr=subprocess.STDOUT if out else None,
                    start_new_session=True,
                    text=True,
                )
            )
            if out is None:  # process 0: results to stdout, library lines to stderr
                reader = threading.Thread(target=route_output, args=(procs[-1].stdout,))
                reader.start()
                readers.append(reader)
        while True:
            codes = [p.poll() for p in procs]
            if forward.signum is not None:  # stopped: the processes save and exit, or die
                if all(c is not None for c in codes):
                    return next((c for c in codes if c), 0)
                if forward.overdue():
                    return 128 + forward.signum
                time.sleep(poll_s)
                continue
            failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                i, code = failed[0]
                print(
                    f"[local] process {i} exited with status {code}; stopping the others "
                    f"(its log: {log_dir / f'process_{i}.log'})",
                    file=sys.stderr,
                )
                return code
            if all(c == 0 for c in codes):
                return 0
            if timeout_s is not None and time.monotonic() - t0 > timeout_s:
                print(f"[local] timed out after {timeout_s:.0f} s; stopping", file=sys.stderr)
                return 124
            time.sleep(poll_s)
    finally:
        forward.restore()
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.time() + 30
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        for reader in readers:
            reader.join(timeout=5)
        for f in logs:
            f.close()


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], usage="%(prog)s [options] -- MAIN_ARGS..."
    )
    parser.add_argument("--num-processes", type=int, default=2, help="(default: %(default)s)")
    parser.add_argument(
        "--devices-per-process", type=int, default=4, help="fake CPU devices (default: %(default)s)"
    )
    parser.add_argument(
        "--module",
        default="seqjax.main",
        help="python -m MODULE per process (default: %(default)s)",
    )
    parser.add_argument(
        "--grace-s",
        type=float,
        default=GRACE_S,
        help="seconds the processes have to save and exit after a SIGTERM or Ctrl-C to the "
        "launcher before they are killed (default: %(default)s)",
    )
    parser.add_argument("main_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    main_args = args.main_args[1:] if args.main_args[:1] == ["--"] else args.main_args
    if args.num_processes < 1 or args.devices_per_process < 1:
        parser.error("--num-processes and --devices-per-process must be >= 1")
    n, d = args.num_processes, args.devices_per_process
    if args.module == "seqjax.main":
        try:
            check_main_args(main_args, n, d)
        except common.LaunchError as e:
            return common.fail("local", e)
    workdir = _workdir(main_args)
    print(
        f"[local] {common.marked(n, 2)} processes x {common.marked(d, 4)} CPU devices; "
        f"process 0 logs here, the others to {workdir or Path('.')}/process_<i>.log",
        file=sys.stderr,
        flush=True,
    )
    return launch(n, d, main_args, args.module, grace_s=args.grace_s)


def check_main_args(main_args: list[str], num_processes: int, devices: int) -> None:
    """``--config`` and its ``--config.FIELD=VALUE`` overrides in the job's arguments,
    validated here for ``num_processes * devices`` devices (``LaunchError``)."""
    config, overrides = None, {}
    for i, arg in enumerate(main_args):
        if arg.startswith("--config="):
            config = arg.split("=", 1)[1]
        elif arg == "--config" and i + 1 < len(main_args):
            config = main_args[i + 1]
        elif arg.startswith("--config."):
            key, _, value = arg[2:].partition("=")
            overrides[key] = value
    if config is None:
        raise common.LaunchError("the job's arguments (after --) need --config=FILE[:variant]")
    if _workdir(main_args) is None and not any(a.startswith("--workdir") for a in main_args):
        raise common.LaunchError("the job's arguments (after --) need --workdir=DIR")
    common.check_job(
        config, overrides, num_devices=num_processes * devices, process_count=num_processes
    )


if __name__ == "__main__":
    sys.exit(main())
