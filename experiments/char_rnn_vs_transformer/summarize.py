"""Table (``table.md``) and plot (train loss in bits/char against steps and seconds) of
``run.sh``'s two workdirs: ``python summarize.py OUT_DIR EXPERIMENT_DIR``."""

import json
import math
import re
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(workdir: Path):
    rows = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
    train = [(r["step"], r["train/loss"] / math.log(2), r.get("train/elapsed_s"))
             for r in rows if "train/loss" in r]  # fmt: skip
    result = json.loads((workdir / "result.json").read_text())
    info = json.loads((workdir / "run_info.0.json").read_text())
    params = int(re.search(r"parameters: ([\d,]+)", info["sharding"]).group(1).replace(",", ""))
    return train, result, params


def main(out: str, exp: str) -> None:
    out, exp = Path(out), Path(exp)
    fig, (ax, ax_t) = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    lines = ["| model | parameters | steps | train s | test bits/char |", "|---|---|---|---|---|"]
    for name in ("lstm", "transformer"):
        train, result, params = load(out / name)
        steps, bpc, seconds = zip(*train)
        ax.plot(steps, bpc, label=name)
        ax_t.plot(seconds, bpc, label=name)
        test = result.get("test") or {}
        lines.append(f"| {name} | {params:,} | {result.get('step')} | "
                     f"{result.get('train_seconds', float('nan')):.0f} | "
                     f"{test.get('bits_per_char', float('nan')):.3f} |")  # fmt: skip
    ax.set_xlabel("step")
    ax.set_ylabel("train bits/char")
    ax_t.set_xlabel("seconds (shared 2-core CPU)")
    ax.legend()
    fig.suptitle("char LM, tiny shakespeare, ~150K parameters: LSTM (carried state), Transformer")
    fig.tight_layout()
    fig.savefig(exp / "bits_per_char.png", dpi=120)
    (exp / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(*sys.argv[1:3])
