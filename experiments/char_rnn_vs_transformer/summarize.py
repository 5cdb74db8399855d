"""Results of ``run.sh``'s two workdirs as ``results/char_rnn_vs_transformer_cpu.{json,md,png}``
(train bits/char against steps and seconds; ``plot`` redraws the PNG from the JSON, as
``experiments/replot.py`` does): ``python summarize.py OUT_DIR EXPERIMENT_DIR``."""

import json
import math
import platform
import re
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MODELS = ("lstm", "transformer")
STEM = "char_rnn_vs_transformer_cpu"


def load(workdir: Path) -> dict:
    rows = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "train/loss" in r]
    result = json.loads((workdir / "result.json").read_text())
    info = json.loads((workdir / "run_info.0.json").read_text())
    params = int(re.search(r"parameters: ([\d,]+)", info["sharding"]).group(1).replace(",", ""))
    return {
        "parameters": params,
        "steps": [r["step"] for r in train],
        "train_bits_per_char": [r["train/loss"] / math.log(2) for r in train],
        "seconds": [r["train/elapsed_s"] for r in train],
        "train_seconds": result.get("train_seconds"),
        "test_bits_per_char": (result.get("test") or {}).get("bits_per_char"),
        "final_step": result.get("step"),
        "versions": info.get("versions"),
    }


def plot(payload: dict, path) -> None:
    fig, (ax, ax_t) = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for name in MODELS:
        run = payload["runs"][name]
        ax.plot(run["steps"], run["train_bits_per_char"], label=name)
        ax_t.plot(run["seconds"], run["train_bits_per_char"], label=name)
    ax.set_xlabel("step")
    ax.set_ylabel("train bits/char")
    ax_t.set_xlabel("seconds (shared 2-core CPU)")
    ax.legend()
    fig.suptitle("char LM, tiny shakespeare, ~150K parameters: LSTM (carried state), Transformer")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def table(payload: dict) -> str:
    lines = ["| model | parameters | steps | train s | test bits/char |", "|---|---|---|---|---|"]
    for name in MODELS:
        r = payload["runs"][name]
        lines.append(f"| {name} | {r['parameters']:,} | {r['final_step']} | "
                     f"{r['train_seconds']:.0f} | {r['test_bits_per_char']:.3f} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(out: str, exp: str) -> None:
    results = Path(exp) / "results"
    results.mkdir(exist_ok=True)
    payload = {
        "machine": {"node": platform.node(), "cpu": platform.processor()},
        "runs": {name: load(Path(out) / name) for name in MODELS},
    }
    (results / f"{STEM}.json").write_text(json.dumps(payload, indent=1))
    plot(payload, results / f"{STEM}.png")
    (results / f"{STEM}.md").write_text(table(payload))
    print(table(payload))


if __name__ == "__main__":
    main(*sys.argv[1:3])
