"""GPT-3's layer pattern in miniature: the same small character LM trained with every layer
dense and with dense and locally banded layers alternating (Brown et al. 2020 §2.1, after
Child et al. 2019), then evaluated zero-, one- and few-shot (Brown et al. 2020 §2, Fig. 2.1)
on a cloze and a multiple-choice task built from Tiny Shakespeare.

The tasks (built here from the corpus at run time, never committed):

* cloze: a line of verse of >= 4 words whose last word is alphabetic and >= 3 letters;
  ``context`` = the 64 characters before that word (the line's start and what precedes it),
  ``target`` = the word (LAMBADA's form, Paperno et al. 2016): accuracy = the word is the
  model's greedy continuation, logprob = the mean sum of its characters' log-probabilities;
* multiple choice: ``query`` = the 64 characters before a line (ending in its newline),
  ``choices`` = that line and three other lines of 20-60 characters of the same portion, in
  a seeded random order (HellaSwag's form of picking the ending, Zellers et al. 2019):
  acc / acc_norm (per character).

Documents come from the test portion (the last 5% of the file, ``seqjax.data``'s split),
few-shot examples from the training portion (the first 90%), drawn with the evaluator's
seed. Both models: ``configs/char_lm.py`` with 4 layers, width 96, 256-character rows,
300 steps on the training portion; "banded" = ``model.attention = "dense,flex"`` with flex
``sliding_window`` window 32.

    nice -n 10 python experiments/icl_study/run.py

Writes ``results/results.json``, ``results/results.md`` and ``results/results.png``.
"""

from __future__ import annotations

import argparse
import json
import random
import string
import sys
from pathlib import Path

import ml_collections

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from seqjax import evaluate_icl  # noqa: E402
from seqjax import main as seqjax_main  # noqa: E402
from seqjax.configs import char_lm  # noqa: E402

PATTERNS = {"dense": "dense", "banded": "dense,flex"}
PANELS = (("cloze", "acc"), ("cloze", "logprob"), ("multiple_choice", "acc"),
          ("multiple_choice", "acc_norm"))  # fmt: skip
CTX = 64


def portions(text: str) -> tuple[str, str]:
    """The training (first 90%) and test (last 5%) portions of the text."""
    n = len(text)
    return text[: int(0.9 * n)], text[int(0.95 * n) :]


def _lines(part: str):
    at = 0
    for line in part.split("\n"):
        yield at, line
        at += len(line) + 1


def cloze_docs(part: str) -> list[dict]:
    docs = []
    for at, line in _lines(part):
        words = line.split()
        if len(words) < 4 or line.endswith(":"):
            continue
        last = words[-1].strip(string.punctuation)
        if len(last) < 3 or not last.isalpha():
            continue
        end = at + line.rindex(last)
        context = part[max(0, end - CTX) : end].rstrip()
        docs.append({"context": context, "target": last})
    return docs


def mc_docs(part: str, seed: int) -> list[dict]:
    rnd = random.Random(seed)
    lines = [(at, ln) for at, ln in _lines(part) if 20 <= len(ln) <= 60 and not ln.endswith(":")]
    docs = []
    for at, line in lines:
        if at < CTX:
            continue
        others = rnd.sample([ln for _, ln in lines if ln != line], 3)
        choices = others + [line]
        rnd.shuffle(choices)
        docs.append({"query": part[at - CTX : at], "choices": choices, "gold": choices.index(line)})
    return docs


def write_jsonl(path: Path, docs) -> str:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return str(path)


def train(data: str, workdir: Path, pattern: str, steps: int) -> None:
    c = char_lm.get_config("smoke")
    c.data.name, c.data.path = "text_file", data
    c.data.seq_len, c.data.batch_size = 256, 16
    m = c.model
    m.num_layers, m.d_model, m.max_len = 4, 96, 256
    m.attention = PATTERNS[pattern]
    if "flex" in m.attention:
        m.attention_options.flex = ml_collections.ConfigDict(
            {"pattern": "sliding_window", "window": 32}
        )
    c.optimizer.warmup_steps = 30
    c.train.num_steps = steps
    c.train.eval_every = steps
    c.train.checkpoint_every = steps
    c.train.sample_length = 0
    seqjax_main.train(c, str(workdir))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(REPO.parent / "shared/data/tinyshakespeare/input.txt"))
    p.add_argument("--workdirs", default="/tmp/icl_study")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--docs", type=int, default=200, help="documents per task")
    p.add_argument("--shots", default="0,1,2")
    p.add_argument("--seed", type=int, default=1234)
    args = p.parse_args()
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    work = Path(args.workdirs)
    work.mkdir(parents=True, exist_ok=True)
    train_part, test_part = portions(Path(args.data).read_text(encoding="utf-8"))
    rnd = random.Random(args.seed)
    files = {}
    for kind, build in (("cloze", cloze_docs), ("multiple_choice", lambda t: mc_docs(t, 0))):
        test_docs = build(test_part)
        test_docs = rnd.sample(test_docs, min(args.docs, len(test_docs)))
        files[kind] = (
            write_jsonl(work / f"{kind}.jsonl", test_docs),
            write_jsonl(work / f"{kind}_train.jsonl", rnd.sample(build(train_part), 500)),
        )
    shots = evaluate_icl.parse_shots(args.shots)
    results = []
    for pattern in PATTERNS:
        workdir = work / pattern
        if not (workdir / "checkpoints").exists():
            train(args.data, workdir, pattern, args.steps)
        lm = evaluate_icl.load_model(str(workdir))
        for kind, (task, train_file) in files.items():
            delim = "" if kind == "multiple_choice" else " "
            for r in evaluate_icl.evaluate(lm, task, kind, train=train_file, shots=shots,
                                           seed=args.seed, batch_size=16,
                                           target_delimiter=delim):  # fmt: skip
                results.append({"pattern": pattern, "task": kind, **r})
                print(json.dumps(results[-1]), flush=True)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    write_table(results, out / "results.md", " ".join(sys.argv[1:]))
    plot(results, out / "results.png")


def write_table(results, path: Path, argv: str) -> None:
    rows = ["| task | metric | layers | " + " | ".join(f"k={r}" for r in _shots(results)) + " |"]
    rows.append("|" + "---|" * (3 + len(_shots(results))))
    for task, metric in PANELS:
        unit, mult = ("nats", 1) if metric == "logprob" else ("%", 100)
        for pattern in PATTERNS:
            cells = [
                f"{mult * r[metric]:.{2 if mult == 1 else 1}f} ± "
                f"{mult * r[metric + '_stderr']:.{2 if mult == 1 else 1}f}"
                for r in results if r["task"] == task and r["pattern"] == pattern
            ]  # fmt: skip
            rows.append(f"| {task} | {metric} ({unit}) | {pattern} | " + " | ".join(cells) + " |")
    cmd = f"nice -n 10 python experiments/icl_study/run.py {argv}".strip()
    path.write_text("\n".join(rows) + f"\n\nCommand: `{cmd}`\n")


def _shots(results):
    return sorted({r["num_fewshot"] for r in results})


def plot(results, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PANELS), figsize=(15, 3.6))
    for ax, (task, metric) in zip(axes, PANELS):
        mult = 1 if metric == "logprob" else 100
        for i, pattern in enumerate(PATTERNS):
            rs = [r for r in results if r["task"] == task and r["pattern"] == pattern]
            ks = [r["num_fewshot"] + (i - 0.5) * 0.15 for r in rs]
            ax.errorbar(ks, [mult * r[metric] for r in rs],
                        yerr=[mult * r[metric + "_stderr"] for r in rs], marker="o", capsize=3,
                        label=pattern)  # fmt: skip
        if task == "multiple_choice":
            ax.axhline(25, color="grey", lw=0.8, ls=":", label="chance")
        unit = "nats" if metric == "logprob" else "%"
        ax.set(title=f"{task} {metric}", xlabel="examples in the prompt (k)", ylabel=unit)
        ax.set_xticks(_shots(results))
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
