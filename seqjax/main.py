"""The main job: train (or resume), evaluate and sample, all from one config file.

    python -m seqjax.main --config configs/char_lm.py --workdir /tmp/char_lm
    python -m seqjax.main --config configs/char_lm.py:smoke --workdir /tmp/smoke \
        --config.model.num_layers=4 --config.data.name=text_file --config.data.path=in.txt

Rerunning the same command resumes from the newest complete checkpoint in ``--workdir``.
Exit status: 0 done or stopped by SIGTERM (checkpoint saved), 2 invalid config,
3 non-finite loss (nothing saved after the last good checkpoint).
"""

from __future__ import annotations

import sys

from absl import app, flags, logging
from ml_collections import config_flags

from seqjax import console
from seqjax.train import config_validation, loop, paths, sharding

_CONFIG = config_flags.DEFINE_config_file(
    "config",
    None,
    "Job config: a file, e.g. configs/char_lm.py[:variant], or a module of the installed "
    "package, e.g. seqjax.configs.char_lm[:variant].",
    lock_config=True,
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where checkpoints and metrics go (resumed).")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    sharding.maybe_initialize_distributed()
    try:
        loop.train_and_evaluate(_CONFIG.value, _WORKDIR.value)
    except config_validation.ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except loop.NonFiniteLossError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(3)


def run():
    """Console script ``seqjax-train`` (same flags as ``python -m seqjax.main``)."""
    flags.mark_flags_as_required(["config", "workdir"])
    console.show_flags_in_help(__name__)
    logging.set_verbosity(logging.INFO)
    console.quiet_libraries()
    # --config accepts a module name too (seqjax.configs.char_lm:smoke: installed package).
    sys.argv = paths.resolve_config_flag(sys.argv)
    app.run(main)


if __name__ == "__main__":
    run()
