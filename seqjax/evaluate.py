"""Evaluation of a training workdir's checkpoint over a full split (command line).

    python -m seqjax.evaluate --workdir DIR --split test

restores the newest complete checkpoint of a training workdir and prints one JSON line: its
task's summary (``seqjax.tasks``; an LM: loss, bits per character/byte, perplexity, accuracy;
a classifier: loss, accuracy, count) and any decoding metrics the task adds (translation:
BLEU/chrF, and with ``--bleu_by_length=0,10,20,30,40`` BLEU per source-length bucket in
words, Bahdanau et al. 2015 Figure 2). The evaluation itself is
``seqjax.train.evaluator.Evaluator``, which the training loop also runs.

Transformer-XL runs are evaluated with ``config.eval``'s lengths (Dai et al. 2019, §4);
override them with ``--tgt_len/--mem_len/--clamp_len/--same_length``.
"""

from __future__ import annotations

import json

from absl import app, flags

from seqjax import console
from seqjax import data as data_lib
from seqjax.train.evaluator import Evaluator  # noqa: F401 (the library's entry point)


def main(argv):
    """Runs ``_main`` with one-sentence errors (exit 2) and tracebacks only for bugs."""
    from seqjax.train import errors

    errors.run_cli(_main, argv, flags.FLAGS.workdir)


def _main(argv):
    del argv
    from seqjax.tasks import inputs
    from seqjax.train import cli_inputs, setup

    f = flags.FLAGS
    overrides = {
        "tgt_len": f.tgt_len,
        "mem_len": f.mem_len,
        "clamp_len": f.clamp_len,
        "same_length": None if f.same_length is None else f.same_length == "true",
    }
    if f.max_batches < 0:
        raise inputs.InputError(f"--max_batches={f.max_batches}; valid: >= 0 (0 = all)")
    if f.bleu_by_length is not None:
        overrides["bleu_length_edges"] = _length_edges(f.bleu_by_length)
    run, state, step = cli_inputs.restore(
        lambda s: setup.restore_latest(f.workdir, eval_overrides=overrides, step=s),
        f.workdir,
        f.step,
        f["import"].value,
    )
    if f.bleu_by_length is not None and getattr(run.task, "translate_fn", None) is None:
        raise inputs.InputError(
            f"--bleu_by_length: --workdir={f.workdir} trained a {run.task.name} model, which "
            "does not translate; give the workdir of a sequence-to-sequence run"
        )
    result = Evaluator(run)(state["params"], f.split, max_batches=f.max_batches)
    result = {k: int(round(v)) if k in console.BOOKKEEPING else v for k, v in result.items()}
    rec = run.recurrence
    extra = {"eval_lengths": rec.eval_lengths(run.config)} if rec else {}
    print(json.dumps({"step": step, "split": f.split, **result, **extra}))


def _length_edges(text: str) -> tuple[int, ...]:
    """``--bleu_by_length`` ("0,10,20,30,40") as bucket edges, checked before any restore."""
    from seqjax.tasks import inputs, text_metrics

    try:
        edges = tuple(int(e) for e in text.split(","))
        text_metrics.bleu_by_length([], [], [], edges)
    except ValueError:
        raise inputs.InputError(
            f"--bleu_by_length={text}; valid: comma-separated, strictly increasing word counts "
            ">= 0, e.g. 0,10,20,30,40"
        ) from None
    return edges


def cli():
    """``python -m seqjax.evaluate --workdir DIR --split test [--max_batches N]``."""
    flags.DEFINE_string("workdir", None, "Training workdir with checkpoints.")
    flags.DEFINE_enum("split", "test", list(data_lib.SPLITS), "Split to evaluate.")
    flags.DEFINE_integer("max_batches", 0, "Stop after this many batches (0 = all).")
    # Transformer-XL evaluation lengths (default: the workdir's config.eval).
    flags.DEFINE_integer("tgt_len", None, "Transformer-XL: tokens per evaluated segment.")
    flags.DEFINE_integer("mem_len", None, "Transformer-XL: memory length at evaluation.")
    flags.DEFINE_integer("clamp_len", None, "Transformer-XL: clamp relative distances (-1 off).")
    flags.DEFINE_enum("same_length", None, ["true", "false"], "Transformer-XL: same_length.")
    flags.DEFINE_integer("step", None, "Checkpoint step to evaluate (default: the newest).")
    flags.DEFINE_string(
        "bleu_by_length", None,
        "Translation: also BLEU per source-length bucket, edges in words (e.g. 0,10,20,30,40).",
    )  # fmt: skip
    from seqjax.train import cli_inputs

    flags.DEFINE_multi_string("import", [], cli_inputs.IMPORT_HELP)
    flags.mark_flag_as_required("workdir")
    from seqjax.train import errors

    console.show_flags_in_help(__name__)
    console.quiet_tool()
    app.run(main, flags_parser=errors.parse_flags)


if __name__ == "__main__":
    cli()
