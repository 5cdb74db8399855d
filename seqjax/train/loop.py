"""The training loop: ``train_and_evaluate(config, workdir)``, in stages (set-up and
restore, train, evaluate, finish).

It always resumes from the newest complete checkpoint in ``workdir`` (state, data-iterator
position and RNG), so rerunning the same command after a crash, a ``kill -9`` or a
preemption continues the same run: the losses after a resume equal an uninterrupted run's.
A recurrent model's state includes its memory (``seqjax.models.memory``), so a resumed
Transformer-XL run continues each stream with the memory it had (Dai et al. 2019, §3.2).

The loop runs under ``jax.transfer_guard("disallow")`` (as big_vision's does): the only
host <-> device transfers are the explicit ones (the batches, the metrics fetched every
``train.log_every`` steps, checkpoints, evaluation results).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from jax._src import distributed
from jax.experimental import multihost_utils

from seqjax import console
from seqjax import data as data_lib
from seqjax.models import flops
from seqjax.train import checkpoint, extensions, paths, setup, sharding, step_metrics
from seqjax.train import evaluator as evaluator_lib
from seqjax.train import metrics as metrics_lib
from seqjax.train import step as step_lib
from seqjax.train.step_metrics import NonFiniteLossError  # noqa: F401 (loop.NonFiniteLossError)


class _StopFlag:
    """SIGTERM (preemption, ``kill``): every process stops at the same step, saves and returns.

    With ``jax.distributed`` and its preemption service (the default), JAX's own notifier
    owns SIGTERM: it tells every process, and ``reached_preemption_sync_point`` turns True
    at the same step on all of them; this class then installs no handler (replacing JAX's
    would hide the signal from the other processes). Otherwise (one process, or the service
    off) a Python handler sets a flag, and with several processes the flags are agreed on
    at every step boundary by a small all-gather, so a process that saw the signal a step
    early does not enter the collective save while the others run the next step.
    """

    def __init__(self):
        self.local = False
        self._previous = None
        multi = jax.process_count() > 1
        self._jax_notifier = multi and distributed.global_state.preemption_sync_manager is not None
        self._agree = multi and not self._jax_notifier
        if not self._jax_notifier and threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame):
        del frame
        logging.warning("signal %d received: saving a checkpoint, then exiting", signum)
        self.local = True

    def requested(self, step: int) -> bool:
        """Whether every process stops before ``step + 1`` (the same answer on all)."""
        if self._jax_notifier:
            return multihost_utils.reached_preemption_sync_point(step)
        if self._agree:
            flags = multihost_utils.process_allgather(np.asarray(self.local, np.int32))
            return bool(np.any(flags))
        return self.local

    def restore(self):
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)


def _config_dict(config) -> dict:
    return json.loads(config.to_json_best_effort())


def _data_state_for_this_process(saved: dict) -> dict:
    """The saved data state is process 0's; the pipelines differ only by process index."""
    state = dict(saved)
    state["spec"] = {**saved["spec"], "process_index": jax.process_index()}
    return state


def _restore_or_init(run, ckpt, train_iter, workdir):
    """The newest complete checkpoint (skipping damaged ones), else a new state."""
    latest, state, data_state = ckpt.restore_newest(run.abstract)
    if latest is None:
        if run.config.get("init_from"):  # a seqjax run's encoder or a Hugging Face folder
            from seqjax.train import init_from

            return init_from.start(run, run.config.init_from, workdir), None
        logging.info("starting from scratch in %s", workdir)
        return run.init(), None
    train_iter.set_state(_data_state_for_this_process(data_state))
    logging.info("resumed from the checkpoint of step %d in %s", latest, workdir)
    return state, latest


def _log_start(config, run, state, workdir, latest, primary: bool) -> None:
    """The run header (stderr, once), one sharding line (the per-parameter table goes to
    ``sharding.txt``), ``config.json`` and ``run_info.json`` (with where the run's
    mechanisms and task came from: ``seqjax.train.extensions.provenance``)."""
    text = sharding.describe(state, run.shardings, run.mesh, config.data.batch_size)
    if not primary:
        return
    num_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(state["params"]))
    try:
        header = console.run_header(
            config, run, workdir, start_step=latest or 0, num_params=num_params
        )
    except Exception as e:  # noqa: BLE001 - a description must never stop a run
        header = f"seqjax run in {workdir} (the header could not be made: {e!r})"
    print(header, file=sys.stderr, flush=True)
    (workdir / "sharding.txt").write_text(text + "\n")
    logging.info("%s; per-parameter shardings in %s", text.splitlines()[0],
                 workdir / "sharding.txt")  # fmt: skip
    metrics_lib.write_run_info(
        workdir,
        config,
        {
            "resumed_from_step": latest,
            "mesh": dict(run.mesh.shape),
            "sharding": text,
            "extensions": extensions.provenance(config, run.task, run.model),
        },
    )


def train_and_evaluate(config, workdir: str) -> dict:
    """Trains (or resumes) the job described by ``config`` in ``workdir``, in stages:
    ``_set_up`` (validate, build, restore or init; a finished run returns its result),
    ``_train`` (step, fetch metrics one step late, save, ``_evaluate`` every
    ``train.eval_every``) and ``_finish`` (test split, sample, ``result.json``).

    Returns:
      ``{'step', 'stopped', 'test': {...} or None, 'sample': str or None}``; ``stopped`` is
      'done', 'preempted' (SIGTERM) or 'stop_after' (``config.train.stop_after`` reached).

    Raises:
      ConfigError: an invalid config (before anything compiles).
      NonFiniteLossError: the loss became NaN/Inf; the last good checkpoint is kept.
    """
    job = _set_up(config, workdir)
    if isinstance(job, dict):  # the run had finished already: its recorded result
        return job
    stopped = _train(job)
    return _finish(job, stopped)


@dataclasses.dataclass
class _Job:
    """What the stages share: the built run, its checkpointer, data, state and writers."""

    config: Any
    workdir: Any
    run: Any
    ckpt: Any
    train_iter: Any
    state: Any
    step: int
    last_saved: int | None
    primary: bool
    train_step: Any = None
    evaluator: Any = None
    writer: Any = None
    progress: Any = None
    metrics: Any = None
    t_start: float = 0.0

    def save(self, s: int) -> None:
        """Checkpoint step ``s`` (once; fetches the pending metrics first, so nothing is
        saved after a non-finite step)."""
        self.metrics.flush()
        if s != self.last_saved:
            with jax.transfer_guard("allow"):  # Orbax copies the state to the host
                self.ckpt.save(s, self.state, self.train_iter.get_state(),
                               _config_dict(self.config))  # fmt: skip
            self.last_saved = s


def _set_up(config, workdir: str) -> _Job | dict:
    """Validates and builds the run, restores the newest checkpoint (or initialises), makes
    the compile-once step, the evaluator and the writers; a finished run's result instead."""
    t_cfg = config.train
    workdir = paths.workdir_path(workdir)  # relative, ~, symlink or gs:// -> absolute
    workdir.mkdir(parents=True, exist_ok=True)
    primary = jax.process_index() == 0
    with _banners_to_stderr():
        run = setup.build(config)  # validates first
    ckpt = checkpoint.Checkpointer(
        workdir, max_to_keep=t_cfg.max_to_keep, async_save=t_cfg.async_checkpointing
    )
    finished = _finished_result(workdir, ckpt, t_cfg.num_steps)
    if finished is not None:
        ckpt.close()
        return finished
    with _banners_to_stderr():
        train_iter = data_lib.make(config.data, split="train", process_index=jax.process_index(),
                                   process_count=jax.process_count(), train=True)  # fmt: skip
    state, latest = _restore_or_init(run, ckpt, train_iter, workdir)
    _log_start(config, run, state, workdir, latest, primary)
    job = _Job(config, workdir, run, ckpt, train_iter, state,
               step=int(jax.device_get(state["step"])), last_saved=latest,
               primary=primary)  # fmt: skip
    job.train_step = step_lib.jit_train_step(
        step_lib.make_train_step(run.model, run.task, run.tx, run.schedule,
                                 accum_steps=config.optimizer.grad_accum_steps, mesh=run.mesh,
                                 epoch_steps=run.epoch_steps),
        run.shardings,
        run.mesh,
    )  # fmt: skip
    job.evaluator = evaluator_lib.Evaluator(run)
    job.writer = metrics_lib.MetricWriter(workdir, enabled=primary)
    job.writer.write_config(config)
    job.t_start = time.perf_counter()
    tokens_per_step, throughput = step_metrics.throughput(config, run, job.t_start)
    job.progress = metrics_lib.Progress(
        t_cfg.num_steps,
        job.step,
        enabled=primary,
        tokens_per_step=tokens_per_step,
        unit=run.task.unit,  # tokens (LM) or examples (classification) per second
    )
    job.metrics = step_metrics.StepMetrics(
        job.writer,
        job.progress,
        ckpt,
        log_every=t_cfg.log_every,
        num_steps=t_cfg.num_steps,
        extra=throughput,
    )
    if jax.process_count() > 1:
        # The primary's start-up work above (git, run info, TensorBoard) can take a while on
        # a loaded machine, and gloo waits only 30 s at a first collective: line the
        # processes up on the coordination service first (no device collective).
        ocp.multihost.get_barrier_sync_fn()(key="seqjax_run_start", timeout_ms=600_000)
    return job


def _train(job: _Job) -> str:
    """Steps until ``train.num_steps`` (or SIGTERM / ``train.stop_after``), saving every
    ``checkpoint_every`` and at the end, evaluating every ``eval_every``; returns how it
    stopped ('done', 'preempted', 'stop_after')."""
    t_cfg, mesh = job.config.train, job.run.mesh
    profile = flops.parse_profile_steps(t_cfg.get("profile_steps", ""))
    profile_dir = os.fspath(job.workdir / "profile")
    tracing = False
    flag = _StopFlag()
    stopped = "done"
    try:
        with (
            console.logs_above_bar(job.progress),
            sharding.rules_and_mesh(mesh),
            jax.transfer_guard("disallow"),
        ):
            while job.step < t_cfg.num_steps:
                with jax.transfer_guard("allow"):  # a small all-gather when agreed by hand
                    preempted = flag.requested(job.step)
                if preempted:
                    stopped = "preempted"
                    break
                if t_cfg.stop_after and job.step >= t_cfg.stop_after:
                    stopped = "stop_after"
                    break
                with jax.transfer_guard_host_to_device("allow"):  # the batch, on purpose
                    batch = sharding.global_batch(next(job.train_iter), mesh)
                if profile and job.step + 1 == profile[0]:
                    jax.profiler.start_trace(profile_dir)
                    tracing = True
                job.state, m = sharding.settle(job.train_step(job.state, batch))  # see there
                job.step += 1
                if tracing and job.step + 1 == profile[1]:
                    jax.block_until_ready(m)
                    jax.profiler.stop_trace()
                    tracing = False
                    logging.info("profile of steps %d-%d written to %s", *profile, profile_dir)
                job.metrics.add(job.step, m)  # fetches the previous steps' while this one runs
                if t_cfg.checkpoint_every and job.step % t_cfg.checkpoint_every == 0:
                    job.save(job.step)
                if (t_cfg.eval_every and job.step % t_cfg.eval_every == 0
                        and job.step < t_cfg.num_steps):  # fmt: skip
                    _evaluate(job)
            job.save(job.step)
        job.ckpt.wait()
        stopped = "preempted" if flag.local else stopped  # SIGTERM in the last save: no eval
    finally:
        if tracing:  # the run stopped inside the traced steps
            jax.profiler.stop_trace()
        flag.restore()
        job.progress.close()
        job.train_iter.close()  # grain's threads and worker processes
    return stopped


def _evaluate(job: _Job) -> None:
    """The validation split (``train.eval_max_batches``), its pictures and a sample."""
    t_cfg, params = job.config.train, job.state["params"]
    job.metrics.flush()
    res = job.evaluator(params, "validation", max_batches=t_cfg.eval_max_batches)
    job.writer.write(job.step, res, prefix="validation/")
    job.progress.write(f"step {job.step}: validation {_fmt(res)}")
    _eval_pictures(job.config, job.run, params, "validation", job.step, job.writer, job.workdir)
    if job.run.task.generates and t_cfg.sample_length:
        with jax.transfer_guard("allow"):  # the sample at this evaluation
            text = _sample(job.config, job.run, params, False)
        job.writer.write_text("sample", _describe(job.run, t_cfg, text), job.step)


def _finish(job: _Job, stopped: str) -> dict:
    """The result: after a full run the test split (``train.final_eval``), its pictures and
    the sample, written to ``result.json``; after a stop, only what resumes it."""
    t_cfg, run, step, writer = job.config.train, job.run, job.step, job.writer
    result = {"step": step, "stopped": stopped, "test": None, "sample": None}
    if getattr(job.train_iter, "packing_efficiency", None) is not None:  # seqjax.data.packing
        result["packing_efficiency"] = job.train_iter.packing_efficiency
    if stopped != "done":
        logging.info("stopped (%s) at step %d; checkpoint saved, rerun to resume", stopped, step)
        writer.close()
        job.ckpt.close()
        return result
    params = job.state["params"]
    if t_cfg.final_eval:
        res = job.evaluator(params, "test", max_batches=t_cfg.get("test_max_batches", 0))
        writer.write(step, res, prefix="test/")
        # Beside the figure, how much of the split it is (all of it unless test_max_batches).
        res = {**res, **getattr(job.evaluator, "last_batches", {})}
        result["test"] = res
        with sharding.rules_and_mesh(run.mesh):
            _eval_pictures(job.config, run, params, "test", step, writer, job.workdir)
        if job.primary:  # the result once, on stdout
            print(f"test ({step} steps): {_fmt(res)}", flush=True)
    if run.task.generates and t_cfg.sample_length:
        result["sample"] = _sample(job.config, run, params, job.primary)
        writer.write_text("sample", _describe(run, t_cfg, result["sample"]), step)
    result["train_seconds"] = time.perf_counter() - job.t_start
    if job.primary:
        (job.workdir / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    writer.close()
    job.ckpt.close()
    return result


def _sample(config, run, params, primary: bool) -> str:
    """``config.train.sample_length`` tokens after ``sample_prompt`` (printed on process 0),
    generated by the task (``seqjax.tasks.Task.sample``)."""
    t_cfg = config.train
    if jax.process_count() > 1:
        # Every process samples the same text on its own host from the full parameters
        # (one all-gather on every process, then no collective at all).
        params = multihost_utils.process_allgather(params, tiled=True)
    text = run.task.sample(
        run,
        params,
        t_cfg.sample_prompt,
        t_cfg.sample_length,
        temperature=t_cfg.sample_temperature,
        seed=config.seed,
    )
    if primary:
        print(f"sample:\n{run.task.describe_sample(t_cfg.sample_prompt, text)}", flush=True)
    return text


def _eval_pictures(config, run, params, split: str, step: int, writer, workdir) -> None:
    """The task's pictures of this evaluation (``Task.eval_pictures``, when
    ``config.eval.pictures``): ``<workdir>/<name>/step_XXXXXX.png`` and a TensorBoard image
    tagged ``name`` each, written by process 0 (every process draws them, from the full
    parameters, as ``_sample`` does)."""
    e = config.get("eval") or {}
    if not e.get("pictures", True):
        return
    with jax.transfer_guard("allow"):  # the parameters, a few inputs and the pictures
        if jax.process_count() > 1:
            params = multihost_utils.process_allgather(params, tiled=True)
        pictures = run.task.eval_pictures(
            run, params, split, num=int(e.get("num_pictures", 8)), seed=config.seed
        )
    if not writer.enabled:
        return
    from seqjax.tasks import image_grid

    for name, picture in pictures.items():
        image_grid.write_png(workdir / name / f"step_{step:06d}.png", picture)
        writer.write_image(name, picture, step)


def _describe(run, t_cfg, text: str) -> str:
    return run.task.describe_sample(t_cfg.sample_prompt, text)


def _fmt(res: dict) -> str:
    return console.format_metrics(res)


def _banners_to_stderr():
    """TFDS prints its "Downloading and preparing dataset" banners to stdout, which is for
    results: while data are prepared they become log lines (stderr)."""
    return console.library_prints_to_log()


def _finished_result(workdir, ckpt, num_steps: int) -> dict | None:
    """The recorded result of a run that already finished (``result.json`` of step
    ``num_steps`` and its checkpoint), else None: a rerun of a finished run reports it
    instead of evaluating again (and writing a second ``test/*`` point)."""
    path = workdir / "result.json"
    if ckpt.latest_step() != num_steps or not path.exists():
        return None
    try:
        result = json.loads(path.read_text())
    except ValueError:
        return None
    if result.get("step") != num_steps or result.get("stopped") != "done":
        return None
    logging.info(
        "the run in %s already finished (step %d); its result is in %s (delete it to evaluate "
        "again, or raise config.train.num_steps to train on)", workdir, num_steps, path
    )  # fmt: skip
    if jax.process_index() == 0 and result.get("test"):
        print(f"test ({num_steps} steps): {_fmt(result['test'])}", flush=True)
    return result
