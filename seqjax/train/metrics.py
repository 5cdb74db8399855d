"""What the job shows and records: metrics.jsonl, TensorBoard events, a progress bar, and a
description of the run (config, git commit, package versions, devices) written at start.

What an evaluation reports is its task's (``seqjax.tasks.Task.eval_summary``).
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import os
import socket
import sys
import time

import jax
import numpy as np
import tqdm

from seqjax import environment
from seqjax.console import BOOKKEEPING
from seqjax.train import paths


class MetricWriter:
    """Appends ``{"step": s, ...}`` lines to ``metrics.jsonl`` and scalars to TensorBoard.

    TensorBoard also gets the config (text and hparams, ``write_config``) and the samples
    (``write_text``); the sums the metrics are divided by (``count``, ``weight_sum``:
    ``seqjax.console.BOOKKEEPING``) go there under ``bookkeeping/``, apart from the metrics
    (``metrics.jsonl`` keeps them with the metrics).

    Only the primary process writes; other processes get a no-op writer.
    """

    def __init__(self, workdir: str, *, enabled: bool = True):
        self.enabled = enabled
        self._tb = None
        if enabled:
            SummaryWriter = _summary_writer_class()  # noqa: N806 - a class

            work = paths.workdir_path(workdir)
            paths.register_tensorboard_schemes()
            self._path = work / "metrics.jsonl"
            self._file = paths.open_append(self._path)
            self._tb = SummaryWriter(os.fspath(work / "tensorboard"))

    def _reopen_if_moved(self) -> None:
        """Reopens ``metrics.jsonl`` when it was deleted or rotated (renamed) since opened.

        Otherwise every later line would go to the unlinked (or renamed) file and the run
        would end without a metrics file under its name.
        """
        if paths.is_remote(self._path):
            return  # object stores: the file is rewritten whole on every flush
        try:
            same = os.stat(self._path).st_ino == os.fstat(self._file.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            logging.warning("%s was deleted or moved during the run; writing a new one",
                            self._path)  # fmt: skip
            self._file.close()
            self._file = paths.open_append(self._path)

    def write(self, step: int, metrics: dict, prefix: str = "") -> None:
        if not self.enabled:
            return
        # Numbers only: text such as sacreBLEU's signature goes to result.json, not here.
        clean = {prefix + k: float(v) for k, v in metrics.items() if not isinstance(v, str)}
        self._reopen_if_moved()
        self._file.write(json.dumps({"step": int(step), "time": time.time(), **clean}) + "\n")
        for k, v in clean.items():
            bookkeeping = k[len(prefix) :] in BOOKKEEPING
            self._tb.add_scalar(f"bookkeeping/{k}" if bookkeeping else k, v, step)

    def write_text(self, tag: str, text: str, step: int) -> None:
        """A text (a sample, a translation) at ``step`` (TensorBoard's Text tab)."""
        if self.enabled:
            self._tb.add_text(tag, _markdown_code(text), step)

    def write_image(self, tag: str, picture_HWC, step: int) -> None:
        """A uint8 ``[H, W, C]`` picture at ``step`` (TensorBoard's Images tab)."""
        if self.enabled:
            self._tb.add_image(tag, np.asarray(picture_HWC, np.uint8), step, dataformats="HWC")

    def write_config(self, config) -> None:
        """The config as text (``config``) and its scalar fields as hparams (HParams tab,
        against the validation and test loss and accuracy)."""
        if not self.enabled:
            return
        from tensorboardX.summary import hparams

        self._tb.add_text("config", _markdown_code(config.to_json_best_effort(indent=2)), 0)
        flat = _flatten(json.loads(config.to_json_best_effort()))
        hp = {k: v if isinstance(v, bool | int | float | str) else json.dumps(v)
              for k, v in flat.items()}  # fmt: skip
        metric_tags = [f"{split}/{m}" for split in ("validation", "test")
                       for m in ("loss", "accuracy")]  # fmt: skip
        file_writer = self._tb._get_file_writer()
        for summary in hparams(hp, {tag: float("nan") for tag in metric_tags}):
            file_writer.add_summary(summary)

    def close(self) -> None:
        if self.enabled:
            self._file.close()
            self._tb.close()


def _summary_writer_class():
    """``tensorboardX.SummaryWriter``, imported without torch: tensorboardX imports torch
    when it is installed (to accept its tensors, which seqjax never passes), which made
    every run's start-up 1.6 s longer and put a C++ import in its first seconds, where a
    signal used to abort the process (issue 50, item 1). A torch imported already is kept."""
    if "tensorboardX.writer" not in sys.modules and "torch" not in sys.modules:
        sys.modules["torch"] = None  # ``import torch`` raises ImportError: tensorboardX's
        try:  # optional torch support stays off
            import tensorboardX.writer  # noqa: F401
        finally:
            del sys.modules["torch"]  # a later ``import torch`` (convert) works as ever
    from tensorboardX import SummaryWriter

    return SummaryWriter


def _markdown_code(text: str) -> str:
    """Text shown as is by TensorBoard's markdown renderer (indented code block)."""
    return "\n".join("    " + line for line in str(text).splitlines()) or "    (empty)"


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        elif v is not None:
            out[f"{prefix}{k}"] = v
    return out


def read_metrics(workdir: str) -> list[dict]:
    """All lines of ``metrics.jsonl`` (a resumed run appends; later lines win per step)."""
    path = paths.workdir_path(workdir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def git_commit() -> str:
    """``<sha>`` or ``<sha>-dirty`` of the repository holding seqjax, or 'unknown'."""
    return environment.git_commit()


def versions() -> dict:
    """Python's and the recorded packages' versions (``seqjax.environment.PACKAGES``)."""
    return environment.package_versions(python=True)


def write_run_info(workdir: str, config, extra: dict | None = None) -> dict:
    """Writes ``config.json`` and ``run_info.json`` (a new ``run_info.<n>.json`` per restart)."""
    info = {
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "argv": sys.argv,
        "host": socket.gethostname(),
        "git_commit": git_commit(),
        "versions": versions(),
        "backend": jax.default_backend(),
        "process_count": jax.process_count(),
        "devices": [str(d) for d in jax.devices()],
        "device_kind": jax.devices()[0].device_kind,
        "cpu_count": os.cpu_count(),
        **(extra or {}),
    }
    work = paths.workdir_path(workdir)
    (work / "config.json").write_text(config.to_json_best_effort(indent=2) + "\n")
    n = 0
    while (work / f"run_info.{n}.json").exists():
        n += 1
    (work / f"run_info.{n}.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


class Progress:
    """Training progress on process 0: loss, one rate (steps/s and the task's units per
    second: tokens/s, examples/s for classification) and the ETA from that rate.

    On a terminal it is a tqdm bar; elsewhere (SLURM logs, sweeps, CI: ``sys.stderr`` is not
    a TTY) it prints a plain line every ``plain_every_s`` seconds and at the end, with no
    carriage returns or escape codes. Rates are measured between successive ``update``
    calls on the host, i.e. on metrics that arrived one step late, so they include
    everything the loop does.
    """

    def __init__(
        self,
        total: int,
        initial: int,
        *,
        enabled: bool,
        tokens_per_step: int,
        unit: str = "tok",
        plain: bool | None = None,
        plain_every_s: float = 30.0,
        stream=None,
    ):
        self.stream = stream if stream is not None else sys.stderr
        self.plain = (not _isatty(self.stream)) if plain is None else plain
        self.enabled = enabled
        self.total = total
        self.bar = tqdm.tqdm(
            total=total,
            initial=initial,
            disable=not enabled or self.plain,
            desc="train",
            unit="step",
            dynamic_ncols=True,
            mininterval=1.0,
            file=self.stream,
            # One rate on screen: the loop's (in the postfix), not tqdm's own.
            bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]",
        )
        self.tokens_per_step = tokens_per_step
        self.unit = unit
        self.plain_every_s = plain_every_s
        self._last = (initial, time.perf_counter())
        self._printed = -math.inf
        self.steps_per_s = float("nan")
        self.step, self.loss = initial, float("nan")

    def eta_s(self) -> float:
        if not np.isfinite(self.steps_per_s) or self.steps_per_s <= 0:
            return float("nan")
        return (self.total - self.step) / self.steps_per_s

    def describe(self) -> str:
        """``loss=.. 2.31 steps/s 9,460 tok/s eta 0:01:05`` (the fields of one line)."""
        eta = self.eta_s()
        eta_text = "?" if not np.isfinite(eta) else str(datetime.timedelta(seconds=int(eta)))
        return (
            f"loss={self.loss:.4f} {self.steps_per_s:.2f} steps/s "
            f"{self.steps_per_s * self.tokens_per_step:,.0f} {self.unit}/s eta {eta_text}"
        )

    def update(self, step: int, loss: float) -> None:
        now = time.perf_counter()
        s0, t0 = self._last
        if step > s0 and now > t0:
            rate = (step - s0) / (now - t0)
            a = 0.3 if np.isfinite(self.steps_per_s) else 1.0
            self.steps_per_s = a * rate + (1 - a) * (self.steps_per_s if a < 1 else 0.0)
        self._last = (step, now)
        self.step, self.loss = step, loss
        if not self.enabled:
            return
        if self.plain:
            if now - self._printed >= self.plain_every_s or step >= self.total:
                self._printed = now
                self._print(f"step {step}/{self.total}: {self.describe()}")
            return
        self.bar.update(step - self.bar.n)
        self.bar.set_postfix_str(self.describe(), refresh=False)

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def write(self, text: str) -> None:
        if not self.enabled:
            return
        self._print(text) if self.plain else self.bar.write(text, file=self.stream)

    def close(self) -> None:
        self.bar.close()


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
