"""Results of ``run.sh``'s workdirs as ``results/iyyer_imdb_cpu.{json,md,png}``: test
accuracy on the same IMDB subset with its binomial standard error ``sqrt(p (1 - p) / n)``,
beside Iyyer et al. 2015's Table 1 (IMDB: NBOW 89.0, DAN 89.4), and the train loss against
steps (``plot`` redraws the PNG from the JSON): ``python summarize.py OUT_DIR EXPERIMENT_DIR``.
"""

import json
import math
import platform
import re
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MODELS = ("nbow", "dan", "cnn", "lstm", "transformer", "elmo")
LABELS = {
    "nbow": "NBOW (averaged embeddings, softmax)",
    "dan": "DAN (word dropout 0.3)",
    "cnn": "Kim's CNN (3/4/5)",
    "lstm": "BiLSTM (max pool)",
    "transformer": "Transformer (2 layers)",
    "elmo": "ELMo features (frozen biLM)",
}
PAPER = {"nbow": 89.0, "dan": 89.4}  # Iyyer et al. 2015, Table 1, IMDB accuracy (%)
STEM = "iyyer_imdb_cpu"


def load(workdir: Path) -> dict:
    rows = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "train/loss" in r]
    result = json.loads((workdir / "result.json").read_text())
    info = json.loads((workdir / "run_info.0.json").read_text())
    params = int(re.search(r"parameters: ([\d,]+)", info["sharding"]).group(1).replace(",", ""))
    test = result.get("test") or {}
    p, n = float(test.get("accuracy", float("nan"))), int(test.get("count", 0))
    return {
        "parameters": params,
        "steps": [r["step"] for r in train],
        "train_loss": [r["train/loss"] for r in train],
        "train_seconds": result.get("train_seconds"),
        "final_step": result.get("step"),
        "test_accuracy": p,
        "test_count": n,
        "test_se": math.sqrt(p * (1 - p) / n) if n else None,
        "test_loss": test.get("loss"),
    }


def plot(payload: dict, path) -> None:
    fig, (ax, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
    for name in MODELS:
        run = payload["runs"].get(name)
        if run:
            ax.plot(run["steps"], run["train_loss"], label=name)
    ax.set_xlabel("step (batch 32)")
    ax.set_ylabel("train cross-entropy")
    ax.legend()
    names = [m for m in MODELS if m in payload["runs"]]
    acc = [100 * payload["runs"][m]["test_accuracy"] for m in names]
    err = [200 * payload["runs"][m]["test_se"] for m in names]  # ±2 s.e.
    ax_acc.bar(range(len(names)), acc, yerr=err, capsize=4, color="tab:blue", label="seqjax CPU")
    for i, m in enumerate(names):
        if m in PAPER:
            ax_acc.plot([i - 0.4, i + 0.4], [PAPER[m]] * 2, "r-", lw=2,
                        label="Iyyer et al. (full data)" if m == "nbow" else None)  # fmt: skip
    ax_acc.set_xticks(range(len(names)), names, rotation=20)
    ax_acc.set_ylim(50, 95)
    ax_acc.set_ylabel("test accuracy % (±2 s.e.)")
    ax_acc.legend(loc="upper right")
    fig.suptitle(f"IMDB, first {payload['max_len']} pieces per review, "
                 f"{payload['test_count']:,} test reviews")  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def table(payload: dict) -> str:
    lines = ["| model | parameters | steps | train s | test accuracy % (± s.e.) | Iyyer et al. |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for name in MODELS:
        r = payload["runs"].get(name)
        if not r:
            continue
        paper = f"{PAPER[name]:.1f}" if name in PAPER else "—"
        lines.append(f"| {LABELS[name]} | {r['parameters']:,} | {r['final_step']} | "
                     f"{r['train_seconds']:.0f} | {100 * r['test_accuracy']:.1f} ± "
                     f"{100 * r['test_se']:.1f} | {paper} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(out: str, here: str) -> None:
    out, here = Path(out), Path(here)
    runs = {m: load(out / m) for m in MODELS if (out / m / "result.json").exists()}
    bilm = out / "elmo_bilm" / "result.json"
    payload = {
        "what": "IMDB sentiment, one split for every model: sentencepiece 8,000 pieces, the "
                "first 128 pieces of each review, batch 32; test accuracy on the first 2,000 "
                "of the 25,000 test reviews (stored shuffled); binomial s.e.",
        "max_len": 128,
        "test_count": next(iter(runs.values()))["test_count"] if runs else 0,
        "paper": {"source": "Iyyer et al. 2015, Table 1 (IMDB)", **PAPER},
        "elmo_bilm_test": json.loads(bilm.read_text()).get("test") if bilm.exists() else None,
        "machine": f"{platform.machine()}, shared 2-core CPU",
        "runs": runs,
    }  # fmt: skip
    res = here / "results"
    res.mkdir(exist_ok=True)
    (res / f"{STEM}.json").write_text(json.dumps(payload, indent=1))
    (res / f"{STEM}.md").write_text(table(payload))
    plot(payload, res / f"{STEM}.png")
    print(table(payload))


if __name__ == "__main__":
    main(*sys.argv[1:3])
