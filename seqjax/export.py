"""A training workdir's checkpoint back to a Hugging Face folder (command line).

    python -m seqjax.export WORKDIR FOLDER [--arch gpt2] [--step N]

restores the newest complete checkpoint of ``WORKDIR`` (or ``--step``) and writes ``FOLDER``
with ``seqjax.convert.save`` in the layout of ``--arch``, by default the architecture of the
``hf:<folder>`` the run started from (``config.init_from``); the folder's tokenizer files are
copied beside the weights, so ``transformers``' ``from_pretrained(FOLDER)`` loads a model that
gives the run's logits. A model the layout cannot express (another attention mechanism, a
classifier head the layout has no tensors for) is one sentence naming the field.
"""

from __future__ import annotations

import dataclasses
import json

from absl import app, flags


def export(workdir: str, folder: str, *, arch: str | None = None, step: int | None = None):
    """Writes the checkpoint of ``workdir`` to ``folder`` (module docstring); returns the
    folder's path.

    Raises:
      ValueError: no architecture (a run that did not start from ``hf:`` needs ``arch``), or a
        model the layout cannot express.
    """
    from seqjax import convert
    from seqjax.train import hf_start, setup

    config = setup.load_config(workdir)
    source = config.get("init_from")
    if arch is None:
        if not hf_start.is_hf(source):
            raise ValueError(
                f"--arch is needed: the run in {workdir} did not start from a Hugging Face "
                f"folder (config.init_from={source!r}); valid: "
                f"{', '.join(convert.registry.names())}"
            )
        arch, _ = hf_start.imported_config(source)
    run, state, _ = setup.restore_latest(workdir, step=step)
    model_cfg = getattr(run.model, "cfg", None)
    if getattr(model_cfg, "pad_id", 0) is None and hf_start.is_hf(source):
        # an LM's data has no padding: the checkpoint's own pad id goes back unchanged
        pad = getattr(hf_start.imported_config(source)[1], "pad_id", None)
        model_cfg = dataclasses.replace(model_cfg, pad_id=pad)
    src = hf_start.folder_of(source) if hf_start.is_hf(source) else None
    # the source folder's special token ids, tokenizer files and generation config go along
    return convert.save(folder, arch, model_cfg, state["params"], source=src)


def main(argv):
    from seqjax.train import errors

    errors.run_cli(_main, argv, argv[1] if len(argv) > 1 else None)


def _main(argv):
    from seqjax.tasks import inputs

    if len(argv) != 3:
        raise inputs.InputError(
            "usage: python -m seqjax.export WORKDIR FOLDER [--arch NAME] [--step N]"
        )
    f = flags.FLAGS
    try:
        out = export(argv[1], argv[2], arch=f.arch, step=f.step)
    except ValueError as e:  # a layout that cannot express the model: the user's choice
        raise inputs.InputError(str(e)) from None
    print(json.dumps({"workdir": argv[1], "folder": str(out)}))


def cli():
    """``python -m seqjax.export WORKDIR FOLDER``."""
    flags.DEFINE_string("arch", None, "Hugging Face layout (default: the run's hf: folder's).")
    flags.DEFINE_integer("step", None, "Checkpoint step to export (default: the newest).")
    app.run(main)


if __name__ == "__main__":
    cli()
