"""A launcher's worker that hangs (``launch/local.py --module``; test_issue50_faults.py):
it writes its pid to ``<--workdir>/worker_<JAX_PROCESS_ID>.pid``, ignores SIGTERM and SIGINT
(a process stuck in a collective never gets to its handler) and sleeps."""

from __future__ import annotations

import os
import signal
import sys
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGINT, signal.SIG_IGN)
workdir = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--workdir="))
path = os.path.join(workdir, f"worker_{os.environ['JAX_PROCESS_ID']}.pid")
with open(path + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.replace(path + ".tmp", path)
while True:
    time.sleep(60)
