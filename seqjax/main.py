"""The main job: train (or resume), evaluate and sample, all from one config file.

    python -m seqjax.main --config configs/char_lm.py --workdir /tmp/char_lm
    python -m seqjax.main --config configs/char_lm.py:smoke --workdir /tmp/smoke \
        --config.model.num_layers=4 --config.data.name=text_file --config.data.path=in.txt

Rerunning the same command resumes from the newest complete checkpoint in ``--workdir``
(a damaged newest checkpoint is skipped and moved to ``damaged_checkpoints/``). One job at
a time holds a workdir (``seqjax.lock``).

Exit status: 0 done or stopped by SIGTERM (checkpoint saved); 2 a problem with the input
that one sentence explains (config, config file, data, workdir, resume with another
config, a full disk, a workdir that turned read-only); 3 non-finite loss (nothing saved
after the last good checkpoint);
130 Ctrl-C (the checkpoint is saved first; a second Ctrl-C abandons the save in flight);
143 SIGTERM before the first training step (from this file's first line on) or after the
last (one sentence: nothing saved);
1 a bug in seqjax (the only case with a traceback).
"""

from __future__ import annotations

import os
import signal
import sys
import threading

# ---- SIGTERM outside the training steps, handled from the first line (issue 50, item 1) ----


def _on_sigterm(signum, frame):
    """SIGTERM outside the training steps (the loop's own handler saves a checkpoint): one
    sentence, then exit 143 from the handler itself.

    Nothing is raised. An exception raised by a signal handler surfaces wherever the main
    thread happens to be, and there it can be lost or fatal: inside a garbage-collection
    callback of JAX it is swallowed (the run went on to the end with exit 0), inside a
    pybind11 callback (``import torch``) it aborts the process (``terminate called``).
    ``os._exit`` leaves at once: nothing was saved by this run before its first training
    step, the checkpoint is saved after its last one, the workdir lock is an ``flock``
    that the kernel drops, and the run's log file is line-buffered.
    """
    del signum
    if _ENDING:  # the run is exiting with its own sentence printed: no second one
        os._exit(_ENDING[0])
    workdir = _workdir_arg(sys.argv)
    try:
        text = terminated_message(_phase(frame), workdir)
    except Exception:  # noqa: BLE001 - the sentence must never stop the exit
        text = f"stopped by SIGTERM: nothing was saved by this run in {workdir}"
    _say(f"error: {text}\n")
    os._exit(143)  # 128 + SIGTERM


_ENDING: list[int] = []  # the exit status, once main() has reported how the run ends


def _say(text: str) -> None:
    """``text`` on stderr by one ``write(2)``: a handler that prints through ``sys.stderr``
    while the main thread is inside a print of its own raises a reentrancy error."""
    try:
        sys.stdout.flush()
    except Exception:  # noqa: BLE001, S110 - results already printed are best-effort here
        pass
    data = text.encode("utf-8", "replace")
    while data:
        try:
            data = data[os.write(2, data) :]
        except InterruptedError:
            continue
        except OSError:
            return


def _workdir_arg(argv: list[str]) -> str | None:
    """``--workdir``'s value on the command line (parsed by hand: the handler may run before
    the flags are)."""
    for i, arg in enumerate(argv):
        if arg.startswith(("--workdir=", "-workdir=")):
            return arg.split("=", 1)[1]
        if arg in ("--workdir", "-workdir") and i + 1 < len(argv):
            return argv[i + 1]
    return None


def _newest_step(workdir: str | None) -> int | None:
    """The newest complete checkpoint's step (a ``checkpoints/<step>`` folder), or None."""
    if not workdir:
        return None
    if "://" in workdir:  # a bucket: through the library (loaded by then)
        from seqjax.train import errors

        return errors.newest_checkpoint(workdir)
    d = os.path.join(os.path.expanduser(workdir), "checkpoints")
    try:
        steps = [int(n) for n in os.listdir(d) if n.isdigit() and os.path.isdir(f"{d}/{n}")]
    except OSError:
        return None
    return max(steps) if steps else None


def _phase(frame) -> str:
    """What SIGTERM stopped: start-up, or the end of a run (its final evaluation, sample)."""
    while frame is not None:
        if frame.f_code.co_name == "_finish" and "job" in frame.f_locals:  # loop's last stage
            return "after the training steps (final evaluation or sample)"
        frame = frame.f_back
    return "during start-up (data, model or compilation), before the first training step"


def terminated_message(phase: str, workdir: str | None) -> str:
    """The sentence for SIGTERM outside the training steps (``_phase``'s ``phase``)."""
    step = _newest_step(workdir)
    if phase.startswith("after"):
        return (
            f"stopped by SIGTERM {phase}: the checkpoint of step {step} in {workdir} is saved; "
            "rerun the same command to evaluate it"
        )
    kept = "there is no checkpoint yet" if step is None else f"checkpoint {step} is untouched"
    return (
        f"stopped by SIGTERM {phase}: nothing was saved by this run ({kept} in {workdir}); "
        "rerun the same command to start again"
    )


def own_sigterm() -> None:
    """Installs ``_on_sigterm`` (the entry points call it first, before their imports)."""
    signal.signal(signal.SIGTERM, _on_sigterm)


if __name__ == "__main__" or os.path.basename(sys.argv[0]) == "seqjax-train":
    own_sigterm()  # before the imports below: they take seconds, and so may start-up

from absl import app, flags, logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from seqjax import console  # noqa: E402
from seqjax.train import checkpoint, errors, field_checks, paths, run_log, sharding  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file(
    "config",
    None,
    "Job config: a file, e.g. configs/char_lm.py[:variant], or a module of the installed "
    "package, e.g. seqjax.configs.char_lm[:variant].",
    lock_config=True,
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where checkpoints and metrics go (resumed).")
_IMPORT = flags.DEFINE_multi_string(
    "import",
    [],
    "A module to import first (repeatable): it registers an attention mechanism or a task "
    "(docs/extending.md). Recorded in config.imports; evaluate/sample/translate import it too.",
)
_DRY_RUN = flags.DEFINE_string(
    "dry_run",
    None,
    "Compile the train step for a compile-only accelerator (h100, a100, h100x8, v5e, v5e-8; "
    "README: Compile-only checks), print its peak memory per device and "
    "exit (2 when it does not fit); nothing trains and --workdir is not needed.",
)
# --config.model.attention_options.<mechanism>.<option>=V of blocks the config lacks (run()).
_OPTION_OVERRIDES: list = []


class _Interrupt:
    """Ctrl-C as SIGTERM: the loop saves a checkpoint and returns; the job exits 130.

    Before the loop has its SIGTERM handler (data preparation, compilation) there is
    nothing to save, and a second Ctrl-C abandons a save in flight: both raise
    ``KeyboardInterrupt``.
    """

    def __init__(self):
        self.count = 0
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum, frame):
        del signum, frame
        self.count += 1
        term = signal.getsignal(signal.SIGTERM)
        if self.count > 1 or term in (signal.SIG_DFL, signal.SIG_IGN, None, _on_sigterm):
            raise KeyboardInterrupt
        print("\ninterrupted: saving a checkpoint (Ctrl-C again to abandon it)", file=sys.stderr)
        os.kill(os.getpid(), signal.SIGTERM)


def _own_sigterm_unless_jax() -> None:
    """Installs ``_on_sigterm`` again unless JAX's preemption notifier owns SIGTERM now
    (several processes with ``jax.distributed``'s preemption service: see
    ``loop._StopFlag``)."""
    import jax
    from jax._src import distributed

    multi = jax.process_count() > 1
    if not (multi and distributed.global_state.preemption_sync_manager is not None):
        own_sigterm()


def fit_attention_dropout(config, argv) -> bool:
    """Gives kernelized layers the attention dropout they take: when the model uses
    performer or linear attention (Choromanski et al. 2021; Katharopoulos et al. 2020),
    whose outputs have no attention matrix to drop, and ``--config.model.
    attention_dropout_rate`` is not on the command line, a config's default rate becomes 0
    (LRA's own code runs these mechanisms with the dense configs, its fast attention
    ignoring the rate). A rate given on the command line is kept, and validation refuses it.
    Returns True when it changed the config (logged)."""
    from seqjax.attention import registry as attention_registry
    from seqjax.train import extensions

    m = config.get("model")
    if m is None or not m.get("attention_dropout_rate"):
        return False
    if any(a.startswith("--config.model.attention_dropout_rate") for a in argv):
        return False
    kernelized = [
        n
        for n in extensions.mechanism_names(config)
        if attention_registry.capable(n, "attention_dropout", False)
    ]
    if not kernelized:
        return False
    logging.info(
        "model.attention_dropout_rate %s -> 0: model.attention %r has no attention matrix",
        m.attention_dropout_rate,
        kernelized[0],
    )
    m.attention_dropout_rate = 0.0
    return True


def train(config, workdir: str, *, log_file: bool = False) -> dict:
    """Validates, checks the workdir, locks it, checks a resume, then trains.

    ``log_file`` (the command line's runs): library noise goes to ``<workdir>/seqjax.log``
    from here on (``seqjax.train.run_log``), not to the console.
    """
    from seqjax import compile_cache
    from seqjax.train import config_validation, extensions, hf_start, loop, resume_check
    from seqjax.train import workdir as workdir_lib

    workdir = str(paths.workdir_path(workdir))  # relative, ~, symlinks: as the loop sees it
    extensions.prepare_training(config, workdir)  # config.imports (and a resumed run's)
    hf_start.fill(config)  # init_from=hf:<folder>: its family, shape, vocabulary (or exit 2)
    config_validation.validate(config)  # exit 2 before anything is created or compiled
    compile_cache.enable_for(config)  # reuse compiled steps across runs (off: "off")
    workdir_lib.check_usable(workdir)
    if log_file:
        run_log.RunLog.open(workdir)
    lock = workdir_lib.acquire_for_job(workdir)
    try:
        if lock is not None:  # process 0, holding the workdir: a stopped job's partial save
            checkpoint.remove_partial_saves(workdir)
        resume_check.check(config, workdir)
        return loop.train_and_evaluate(config, workdir)
    finally:
        if lock is not None:
            lock.release()


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    interrupt = _Interrupt()
    workdir = _WORKDIR.value
    try:
        from seqjax.train import extensions

        config = _CONFIG.value
        extensions.add_imports(config, _IMPORT.value)
        extensions.apply_option_overrides(config, _OPTION_OVERRIDES)
        fit_attention_dropout(config, sys.argv)
        if _DRY_RUN.value:  # memory before launch (seqjax.train.dry_run)
            from seqjax.train import dry_run

            print("\n".join(dry_run.check(config, _DRY_RUN.value).lines()), flush=True)
            return
        sharding.maybe_initialize_distributed()
        _own_sigterm_unless_jax()
        result = train(config, workdir, log_file=True)
    except KeyboardInterrupt:  # before the loop could save, or a second Ctrl-C
        print(f"error: {errors.interrupted_message(workdir)}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(130)  # abandon a save in flight without waiting for (or noise from) it
    except Exception as e:  # every failure ends in one sentence, or a traceback for bugs
        _exit(run_log.report(e, workdir))
    if interrupt.count and result.get("stopped") == "preempted":
        print(
            f"interrupted at step {result['step']}: checkpoint saved in {workdir}; rerun the "
            "same command to resume",
            file=sys.stderr,
        )
        sys.exit(130)


EXIT_WAIT_S = 10.0  # how long library threads may hold up an exit after an error


def _exit(status: int) -> None:
    """``sys.exit(status)``, bounded: a failed save can leave a library thread (Orbax's
    executor, a TensorStore write) that never ends, and the interpreter waits for such
    threads before it exits (a read-only workdir hung there for minutes: issue 50, item
    2). The sentence is out already; after ``EXIT_WAIT_S`` the process leaves anyway."""
    _ENDING.append(status)
    sys.stdout.flush()
    sys.stderr.flush()
    timer = threading.Timer(EXIT_WAIT_S, os._exit, (status,))
    timer.daemon = True
    timer.start()
    sys.exit(status)


def _file_config():
    """The ``--config`` file's config before the overrides (None when it does not load:
    ``errors.config_file_problem`` says why)."""
    spec = console.config_arg(sys.argv)
    if not spec:
        return None
    from seqjax.configs import common

    path, _, variant = spec.partition(":")
    try:
        return common.load_file(path, "_seqjax_config_types").get_config(
            *([variant] if variant else [])
        )
    except Exception:  # noqa: BLE001 - reported by errors.config_file_problem
        return None


def run():
    """Console script ``seqjax-train`` (same flags as ``python -m seqjax.main``)."""
    own_sigterm()  # (already, when run as a script: at the top of this file)
    # --config accepts a module name too (seqjax.configs.char_lm:smoke: installed package).
    from seqjax.train import extensions

    sys.argv = paths.resolve_config_flag(sys.argv)
    try:  # --import modules register mechanisms before the config and its overrides load
        extensions.import_modules(extensions.imports_in_argv(sys.argv), field="--import")
        problem = errors.config_file_problem(sys.argv)
        problem = problem or field_checks.override_type_problem(_file_config(), sys.argv)
    except extensions.ExtensionError as e:
        problem = str(e)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    console.set_command_line(sys.argv)  # the run header counts every override typed
    sys.argv, _OPTION_OVERRIDES[:] = extensions.split_option_overrides(sys.argv)
    dry = any(a.startswith("--dry_run") for a in sys.argv)
    flags.mark_flags_as_required(["config"] if dry else ["config", "workdir"])
    console.show_flags_in_help(__name__)
    logging.set_verbosity(logging.INFO)
    console.quiet_libraries()
    app.run(main, flags_parser=errors.parse_flags)


if __name__ == "__main__":
    run()
