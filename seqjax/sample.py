"""Text generation from a training workdir's checkpoint (command line).

    python -m seqjax.sample --workdir DIR --prompt "def " --length 200 --temperature 0.8
    python -m seqjax.sample --workdir DIR --prompt "def " --top_k 20 --top_p 0.9
    python -m seqjax.sample --workdir IMAGE_RUN --length 16 --temperature 1 --out grid.png

restores the newest complete checkpoint of a training workdir and prints the prompt
followed by ``length`` generated characters (tokens). The decoding itself (the layers'
caches: KV cache, recurrent state, ring buffers and summary stores of the windowed and
sparse patterns, LSH's sorted-chunk cache; prefix recomputation; Transformer-XL memory as
the cache) is ``seqjax.tasks.sampling``, reached through the run's task
(``seqjax.tasks``): any task that ``generates`` can be sampled. ``--decoding`` picks
``auto`` (the caches where they reproduce the full forward, the default), ``cache`` or
``recompute`` (for checking); the line ``decoding: MODE (why)`` on stderr says which ran.
An image model draws ``length`` images and writes them as one PNG grid to ``--out``.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags

from seqjax import console
from seqjax.tasks import sampling
from seqjax.tasks.sampling import sample_text  # noqa: F401 (the LM's library entry point)


def main(argv):
    """Runs ``_main`` with one-sentence errors (exit 2) and tracebacks only for bugs."""
    from seqjax.train import errors

    errors.run_cli(_main, argv, flags.FLAGS.workdir)


def _main(argv):
    del argv
    from seqjax.tasks import inputs
    from seqjax.train import cli_inputs, setup

    f = flags.FLAGS
    inputs.check_sampling_flags(f.length, f.temperature, f.top_k, f.top_p)
    check_out(f.out)  # before the checkpoint is restored and anything is generated
    run, state, step = cli_inputs.restore(
        lambda s: setup.restore_latest(f.workdir, step=s), f.workdir, f.step, f["import"].value
    )
    task = run.task
    if not task.generates:
        from seqjax import tasks

        able = ", ".join(n for n in tasks.names() if tasks.get(n).generates)
        raise inputs.InputError(
            f"--workdir={f.workdir} trained a {task.name} model, which does not generate; "
            f"sampling needs a task that does: {able}"
        )
    length = f.length
    if task.sample_to_file:  # image models: --out is the grid's PNG; --length images (16)
        prompt = image_target(f.out)
        length = f.length if f["length"].present else 16
    else:
        prompt = inputs.usable_prompt(f.prompt, run.info.encode, run.info.decode) or "\n"
    task.check_sample_inputs(run, prompt, length)
    print(f"decoding: {_mode_line(run, f.decoding)}", file=sys.stderr)
    with sampling.forced_decoding(f.decoding):
        text = _sample(task, run, state, prompt, length, f)
    show(task, prompt, text, None if task.sample_to_file else f.out)


def show(task, prompt: str, text: str, out: str | None = None) -> str:
    """Prints (and writes to ``out``) the sample as the task describes it: an LM's prompt
    continued, a translation's source then ``=> translation`` on its own line, an image
    model's line naming its grid file. Returns the text."""
    shown = task.describe_sample(prompt, text)
    print(shown)
    if out:
        with open(out, "w", encoding="utf-8") as fh:
            fh.write(shown)
    return shown


def image_target(out: str | None) -> str:
    """The PNG an image model's grid is written to: ``--out`` (None: ``samples.png``).

    Raises:
      cli_inputs.InputError: naming ``--out`` when it does not end in ``.png``.
    """
    from seqjax.train import cli_inputs

    if not out:
        return "samples.png"
    if not out.strip().endswith(".png"):
        raise cli_inputs.InputError(
            f"--out={out!r}: an image model writes its sample grid as a PNG file; give a "
            "name ending in .png (e.g. --out grid.png)"
        )
    return out.strip()


def check_out(out: str | None) -> None:
    """``InputError`` when ``--out`` cannot be written: a folder, or in a missing folder."""
    if not out:
        return
    from seqjax.tasks import inputs

    path = os.path.expanduser(out)
    if os.path.isdir(path):
        example = os.path.join(out, "samples.png")
        raise inputs.InputError(
            f"--out={out} is a folder; give the file to write, e.g. --out={example}"
        )
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise inputs.InputError(
            f"--out={out}: its folder {folder} does not exist; create it or give another file"
        )
    if not os.access(folder, os.W_OK):
        raise inputs.InputError(f"--out={out}: the folder {folder} is not writable")


def _mode_line(run, decoding: str) -> str:
    """``MODE (why)`` of ``seqjax.tasks.sampling.decoding_mode`` for this run's model."""
    if run.recurrence is not None:
        return "memory (the recurrent model's memory is its cache)"
    try:
        mode, why = sampling.decoding_mode(run.model_cfg, decoding)
    except (AttributeError, TypeError):  # a generating task with another model kind
        return f"{decoding} (the task's own decoder)"
    return f"{mode} ({why})"


def _sample(task, run, state, prompt, length, f) -> str:
    return task.sample(
        run,
        state["params"],
        prompt,
        length,
        temperature=f.temperature,
        top_k=f.top_k,
        top_p=f.top_p,
        seed=f.seed,
    )


def cli():
    """``python -m seqjax.sample --workdir DIR --prompt ... --length N --temperature T``."""
    flags.DEFINE_string("workdir", None, "Training workdir with checkpoints.")
    flags.DEFINE_string("prompt", "\n", "Text to continue.")
    flags.DEFINE_integer(
        "length",
        200,
        "Number of characters/tokens to generate (image models: images in the grid, default 16).",
    )
    flags.DEFINE_float("temperature", 0.8, "Softmax temperature (0 = greedy).")
    flags.DEFINE_integer("top_k", 0, "Sample from the k most probable tokens (0 = all).")
    flags.DEFINE_float("top_p", 1.0, "Nucleus sampling: the smallest set of mass >= p (1 = all).")
    flags.DEFINE_integer("seed", 0, "Sampling seed.")
    flags.DEFINE_string(
        "out",
        None,
        "Image models: the PNG file of the sample grid (default "
        "samples.png); text models: a file the sample is also written to.",
    )
    flags.DEFINE_integer("step", None, "Checkpoint step to sample from (default: the newest).")
    flags.DEFINE_enum(
        "decoding",
        "auto",
        list(sampling.DECODING_MODES),
        "auto: the layers' decoding caches where they reproduce the full forward; cache: "
        "the caches wherever every layer has one; recompute: recompute the prefix per token.",
    )
    from seqjax.train import cli_inputs

    flags.DEFINE_multi_string("import", [], cli_inputs.IMPORT_HELP)
    flags.mark_flag_as_required("workdir")
    from seqjax.train import errors

    console.show_flags_in_help(__name__)
    console.quiet_tool()
    app.run(main, flags_parser=errors.parse_flags)


if __name__ == "__main__":
    cli()
