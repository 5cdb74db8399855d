"""The main job: train (or resume), evaluate and sample, all from one config file.

    python -m seqjax.main --config configs/char_lm.py --workdir /tmp/char_lm
    python -m seqjax.main --config configs/char_lm.py:smoke --workdir /tmp/smoke \
        --config.model.num_layers=4 --config.data.name=text_file --config.data.path=in.txt

Rerunning the same command resumes from the newest complete checkpoint in ``--workdir``
(a damaged newest checkpoint is skipped and moved to ``damaged_checkpoints/``). One job at
a time holds a workdir (``seqjax.lock``).

Exit status: 0 done or stopped by SIGTERM (checkpoint saved); 2 a problem with the input
that one sentence explains (config, config file, data, workdir, resume with another
config, disk full); 3 non-finite loss (nothing saved after the last good checkpoint);
130 Ctrl-C (the checkpoint is saved first; a second Ctrl-C abandons the save in flight);
1 a bug in seqjax (the only case with a traceback).
"""

from __future__ import annotations

import os
import signal
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from seqjax import console
from seqjax.train import errors, paths, sharding

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
        if self.count > 1 or term in (signal.SIG_DFL, signal.SIG_IGN, None):
            raise KeyboardInterrupt
        print("\ninterrupted: saving a checkpoint (Ctrl-C again to abandon it)", file=sys.stderr)
        os.kill(os.getpid(), signal.SIGTERM)


def train(config, workdir: str) -> dict:
    """Validates, checks the workdir, locks it, checks a resume, then trains."""
    from seqjax import compile_cache
    from seqjax.train import config_validation, extensions, loop, resume_check
    from seqjax.train import workdir as workdir_lib

    workdir = str(paths.workdir_path(workdir))  # relative, ~, symlinks: as the loop sees it
    extensions.prepare_training(config, workdir)  # config.imports (and a resumed run's)
    config_validation.validate(config)  # exit 2 before anything is created or compiled
    compile_cache.enable_for(config)  # reuse compiled steps across runs (off: "off")
    workdir_lib.check_usable(workdir)
    lock = workdir_lib.acquire_for_job(workdir)
    try:
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
        sharding.maybe_initialize_distributed()
        result = train(config, workdir)
    except KeyboardInterrupt:  # before the loop could save, or a second Ctrl-C
        print(f"error: {errors.interrupted_message(workdir)}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(130)  # abandon a save in flight without waiting for (or noise from) it
    except Exception as e:  # every failure ends in one sentence, or a traceback for bugs
        sys.exit(errors.report(e, workdir))
    if interrupt.count and result.get("stopped") == "preempted":
        print(
            f"interrupted at step {result['step']}: checkpoint saved in {workdir}; rerun the "
            "same command to resume",
            file=sys.stderr,
        )
        sys.exit(130)


def run():
    """Console script ``seqjax-train`` (same flags as ``python -m seqjax.main``)."""
    # --config accepts a module name too (seqjax.configs.char_lm:smoke: installed package).
    from seqjax.train import extensions

    sys.argv = paths.resolve_config_flag(sys.argv)
    try:  # --import modules register mechanisms before the config and its overrides load
        extensions.import_modules(extensions.imports_in_argv(sys.argv), field="--import")
        problem = errors.config_file_problem(sys.argv)
    except extensions.ExtensionError as e:
        problem = str(e)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    sys.argv, _OPTION_OVERRIDES[:] = extensions.split_option_overrides(sys.argv)
    flags.mark_flags_as_required(["config", "workdir"])
    console.show_flags_in_help(__name__)
    logging.set_verbosity(logging.INFO)
    console.quiet_libraries()
    app.run(main, flags_parser=errors.parse_flags)


if __name__ == "__main__":
    run()
