"""Translation with a sequence-to-sequence workdir's checkpoint (command line).

    python -m seqjax.translate --workdir DIR --source "File not found"
    python -m seqjax.translate --workdir DIR --input_file sources.txt --beam_size 4 --alpha 0.6

restores the newest complete checkpoint of a training workdir whose task translates
(``seqjax.tasks``: the encoder-decoder of ``configs/translation.py``) and prints one
translation per source line: beam search with the GNMT length penalty (Vaswani et al.
2017, §6.1: beam 4, alpha 0.6; the workdir's ``config.eval`` unless given), decoded with
the SentencePiece model the run trained with.
"""

from __future__ import annotations

import sys

from absl import app, flags

from seqjax import console


def main(argv):
    """Runs ``_main`` with one-sentence errors (exit 2) and tracebacks only for bugs."""
    from seqjax.train import errors

    errors.run_cli(_main, argv, flags.FLAGS.workdir)


def _sources(f) -> list[str]:
    from seqjax.tasks import inputs

    if (f.source is None) == (f.input_file is None):
        raise inputs.InputError(
            "give exactly one of --source (a sentence) or --input_file (one sentence a line, "
            "'-' for standard input)"
        )
    if f.source is not None:
        return [f.source]
    if f.input_file == "-":
        return sys.stdin.read().splitlines()
    try:
        with open(f.input_file, encoding="utf-8") as fh:
            return fh.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise inputs.InputError(f"--input_file={f.input_file} cannot be read: {e}") from None


def _main(argv):
    del argv
    from seqjax import decoding
    from seqjax.tasks import inputs
    from seqjax.train import cli_inputs, setup

    f = flags.FLAGS
    try:  # beam/alpha before anything is restored or compiled
        decoding.check_beam(
            f.beam_size if f.beam_size is not None else 1, f.alpha if f.alpha is not None else 0.0
        )
    except ValueError as e:
        raise inputs.InputError(str(e)) from None
    sources = _sources(f)
    run, state, _ = cli_inputs.restore(
        lambda s: setup.restore_latest(f.workdir, step=s), f.workdir, f.step, f["import"].value
    )
    translate = getattr(run.task, "translate", None)
    if translate is None:
        raise inputs.InputError(
            f"--workdir={f.workdir} trained a {run.task.name} model, which does not translate; "
            "give the workdir of a sequence-to-sequence run (configs/translation.py)"
        )
    for line in translate(run, state["params"], sources, beam_size=f.beam_size, alpha=f.alpha):
        print(line, flush=True)


def cli():
    """``python -m seqjax.translate --workdir DIR --source TEXT [--beam_size K --alpha A]``."""
    flags.DEFINE_string("workdir", None, "Training workdir of a sequence-to-sequence run.")
    flags.DEFINE_string("source", None, "One sentence to translate.")
    flags.DEFINE_string("input_file", None, "A file of sentences, one a line ('-': stdin).")
    flags.DEFINE_integer("beam_size", None, "Beams (1 = greedy; default: config.eval.beam_size).")
    flags.DEFINE_float("alpha", None, "GNMT length penalty (default: config.eval.length_penalty).")
    flags.DEFINE_integer("step", None, "Checkpoint step to use (default: the newest).")
    from seqjax.train import cli_inputs

    flags.DEFINE_multi_string("import", [], cli_inputs.IMPORT_HELP)
    flags.mark_flag_as_required("workdir")
    from seqjax.train import errors

    console.show_flags_in_help(__name__)
    console.quiet_tool()
    app.run(main, flags_parser=errors.parse_flags)


if __name__ == "__main__":
    cli()
