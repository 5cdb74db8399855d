"""In-context (zero-, one- and few-shot) evaluation of a causal LM (command line).

    python -m seqjax.evaluate_icl --model hf:path/to/gpt2 --task cloze.jsonl --kind cloze \\
        --train train.jsonl --num_fewshot 0,1,8
    python -m seqjax.evaluate_icl --model path/to/workdir --task mc.jsonl \\
        --kind multiple_choice --num_fewshot 0

``--model`` is a seqjax training workdir (its newest checkpoint, its data's tokenizer) or
``hf:<folder>`` (a Hugging Face causal LM, e.g. GPT-2 or GPT-Neo, and its
``tokenizer.json``). The task is a local JSONL file of one kind (``seqjax.tasks.icl.fewshot``:
multiple_choice, cloze, translation); few-shot examples are drawn with ``--seed`` from
``--train`` (default: the task file itself, never the document being scored). Prints one JSON
line per ``--num_fewshot`` value: the metrics and their standard errors. The requests are
lm-evaluation-harness's (``seqjax.tasks.icl.requests``), batched longest first and split
over every device (``--batch_size`` rows per batch).
"""

from __future__ import annotations

import json

from absl import app, flags

from seqjax import console

HF_PREFIX = "hf:"


def load_model(model: str, *, max_length: int = 0, step: int | None = None):
    """The ``CausalLM`` of ``--model`` (``hf:<folder>`` or a seqjax workdir)."""
    from seqjax.tasks import inputs
    from seqjax.tasks.icl import models

    if model.startswith(HF_PREFIX):
        try:
            return models.from_hf_folder(model[len(HF_PREFIX) :], max_length=max_length or None)
        except ValueError as e:
            raise inputs.InputError(f"--model={model}: {e}") from None
    from seqjax.train import setup

    run, state, _ = setup.restore_latest(model, step=step)
    causal_lm = run.task.causal and run.task.generates  # asked of the task, not its name
    if not causal_lm or run.recurrence is not None:
        raise inputs.InputError(
            f"--model={model} trained a {run.info.task} model"
            + (" with a recurrent memory" if run.recurrence is not None else "")
            + "; in-context evaluation needs a causal LM workdir (a causal task that "
            "generates) or hf:<folder>"
        )
    info = run.info
    prefix = info.bos_id if info.bos_id is not None else info.eos_id
    if prefix is None:
        prefix = int(info.encode("\n")[0])  # character/byte LMs: a newline starts a document
    return models.from_module(
        run.model, state["params"], info.encode, info.decode,
        max_length=max_length or int(run.config.data.seq_len), prefix_id=prefix,
        eot_id=info.eos_id,
    )  # fmt: skip


def evaluate(lm, task: str, kind: str, *, train: str | None = None, shots=(0,), seed=1234,
             batch_size: int = 8, limit: int = 0, **spec) -> list[dict]:  # fmt: skip
    """The metrics of ``lm`` on the JSONL ``task`` for each number of examples in ``shots``."""
    from seqjax.tasks import icl

    docs = icl.load_jsonl(task, kind)
    docs = docs[:limit] if limit else docs
    train_docs = icl.load_jsonl(train, kind) if train else docs
    task_spec = icl.TaskSpec(kind, **spec)
    scorer = icl.Scorer(lm, batch_size=batch_size)
    return [icl.evaluate(scorer, task_spec, docs, train_docs, k, seed) for k in shots]


def parse_shots(text: str) -> tuple[int, ...]:
    from seqjax.tasks import inputs

    try:
        shots = tuple(int(s) for s in str(text).split(",") if s.strip())
    except ValueError:
        shots = ()
    if not shots or min(shots) < 0:
        raise inputs.InputError(
            f"--num_fewshot={text!r}; valid: a number of examples >= 0 or a comma list (0,1,8)"
        )
    return shots


def main(argv):
    from seqjax.train import errors

    errors.run_cli(_main, argv, None)


def _main(argv):
    del argv
    f = flags.FLAGS
    shots = parse_shots(f.num_fewshot)
    spec = dict(template=f.template, target_delimiter=f.target_delimiter,
                fewshot_delimiter=f.fewshot_delimiter, description=f.description,
                max_gen_toks=f.max_gen_toks)  # fmt: skip
    from seqjax.tasks import icl, inputs

    try:  # the task files before the model: a bad file is an error in seconds
        icl.load_jsonl(f.task, f.kind)
        if f.train:
            icl.load_jsonl(f.train, f.kind)
    except ValueError as e:
        raise inputs.InputError(f"--task/--train: {e}") from None
    lm = load_model(f.model, max_length=f.max_length, step=f.step)
    results = evaluate(lm, f.task, f.kind, train=f.train, shots=shots, seed=f.seed,
                       batch_size=f.batch_size, limit=f.limit, **spec)  # fmt: skip
    for r in results:
        r.pop("predictions", None)
        print(json.dumps({"model": f.model, "task": f.task, "kind": f.kind, **r}))


def cli():
    """``python -m seqjax.evaluate_icl --model M --task FILE --kind KIND --num_fewshot K``."""
    from seqjax.tasks.icl import fewshot

    flags.DEFINE_string("model", None, "A seqjax workdir, or hf:<folder> (a causal LM).")
    flags.DEFINE_string("task", None, "JSONL file of the task's documents.")
    flags.DEFINE_enum("kind", None, list(fewshot.KINDS), "The task's kind (its fields).")
    flags.DEFINE_string("train", None, "JSONL file the few-shot examples come from.")
    flags.DEFINE_string("num_fewshot", "0", "Examples per prompt: k, or a comma list (0,1,8).")
    flags.DEFINE_integer("seed", 1234, "Seed of the few-shot draws (and of BLEU's bootstrap).")
    flags.DEFINE_string("template", "", "str.format template of a document (default per kind).")
    flags.DEFINE_string("target_delimiter", " ", "Between a prompt and its answer.")
    flags.DEFINE_string("fewshot_delimiter", "\n\n", "After each example.")
    flags.DEFINE_string("description", "", "Text in front of every prompt.")
    flags.DEFINE_integer("max_gen_toks", 32, "translation: tokens generated at most.")
    flags.DEFINE_integer("batch_size", 8, "Rows per batch (rounded up to the devices).")
    flags.DEFINE_integer("max_length", 0, "Longest input (0: the model's / the run's seq_len).")
    flags.DEFINE_integer("limit", 0, "Evaluate the first N documents only (0 = all).")
    flags.DEFINE_integer("step", None, "Workdir: checkpoint step (default: the newest).")
    flags.mark_flags_as_required(["model", "task", "kind"])
    from seqjax.train import errors

    console.show_flags_in_help(__name__)
    console.quiet_tool()
    app.run(main, flags_parser=errors.parse_flags)


if __name__ == "__main__":
    cli()
