"""The training loop's step metrics: ``StepMetrics`` (the one-step-late fetch, the
non-finite check before any save, the log writes) and ``throughput`` (tokens, model FLOPs
and MFU per second from the task's units per step; PaLM App. B)."""

from __future__ import annotations

import logging
import time

import jax

from seqjax.models import flops


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN/Inf loss, gradient or parameter; nothing was saved after it."""


class StepMetrics:
    """The one-step-late metrics fetch: a step's metrics stay on the devices while the next
    step runs, and are fetched to the host only at a log step (``train.log_every``), before a
    save or an evaluation, and at the end (as big_vision logs).

    Every fetched step is checked for a non-finite value; a save fetches first, so nothing
    is saved after a non-finite step.
    """

    def __init__(self, writer, progress, ckpt, *, log_every, num_steps, extra):
        self.pending: list = []  # [(step, device metrics)] not yet fetched
        self.writer, self.progress, self.ckpt = writer, progress, ckpt
        self.log_every, self.num_steps, self.extra = log_every, num_steps, extra

    def _is_log_step(self, s: int) -> bool:
        return s % self.log_every == 0 or s == self.num_steps

    def add(self, s: int, m) -> None:
        """Queues step ``s``; fetches the queue (one step late) once it holds a log step."""
        if any(self._is_log_step(p) for p, _ in self.pending):
            self.flush()
        self.pending.append((s, m))

    def flush(self) -> None:
        """Fetches pending metrics; stops on a non-finite value before anything is saved."""
        if not self.pending:
            return
        pending, self.pending = self.pending, []
        fetched = jax.device_get([m for _, m in pending])
        for (s, _), m in zip(pending, fetched):
            if not m["finite"]:
                self.ckpt.wait()  # finish any save of an earlier, good state; save nothing else
                good = self.ckpt.latest_step()
                raise NonFiniteLossError(
                    f"non-finite training value at step {s}: loss={float(m['loss'])}, "
                    f"grad_norm={float(m['grad_norm'])}, param_norm={float(m['param_norm'])}. "
                    f"Stopped without saving; the last good checkpoint (step {good}) in "
                    f"{self.ckpt.directory} is untouched. Lower config.optimizer.learning_rate, "
                    "raise warmup_steps or set grad_clip_norm, then rerun to resume from it."
                )
            if self._is_log_step(s):
                self.progress.update(s, float(m["loss"]))
                m = {k: v for k, v in m.items() if k != "finite"}
                self.writer.write(s, {**m, **self.extra(self.progress)}, prefix="train/")
        s, m = pending[-1][0], fetched[-1]
        if not self._is_log_step(s):
            self.progress.update(s, float(m["loss"]))


def throughput(config, run, t_start: float):
    """``progress -> {steps_per_s, tokens_per_s, elapsed_s, model_tflops_per_s[, mfu]}``:
    the task's units per step (tokens, examples) and model FLOPs per step (analytic, PaLM
    App. B), and MFU against the devices' bf16 peak."""
    tokens_per_step = run.task.tokens_per_step(config)
    flops_per_step = run.task.flops_per_step(run)
    peak = flops.peak_flops()
    logging.info(
        "model FLOPs per step: %.4g (analytic 6NT + 12LT^2d); device peak %s",
        flops_per_step,
        f"{peak:.4g} FLOP/s bf16 x {jax.device_count()}" if peak else "unknown (no MFU)",
    )

    def extra(progress) -> dict:
        out = {
            "steps_per_s": progress.steps_per_s,
            "tokens_per_s": progress.steps_per_s * tokens_per_step,
            "elapsed_s": time.perf_counter() - t_start,
            "model_tflops_per_s": progress.steps_per_s * flops_per_step / 1e12,
        }
        if peak:
            out["mfu"] = progress.steps_per_s * flops_per_step / (peak * jax.device_count())
        return out

    return tokens_per_step, extra
