"""Plots experiments/xlnet/bench.json: peak memory and step time against T."""

from __future__ import annotations

import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = pathlib.Path(__file__).parent


def main():
    plot(json.loads((HERE / "bench.json").read_text()), HERE / "bench.png")


def plot(data: dict, path) -> None:
    """Peak memory and step time against T of ``data`` (``bench.json``) into ``path``."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for impl in ("reference", "blockwise"):
        rows = [r for r in data["rows"] if r["implementation"] == impl]
        axes[0].plot([r["T"] for r in rows], [r["peak_mib"] for r in rows], "o-", label=impl)
        timed = [r for r in rows if "step_s" in r]
        axes[1].plot([r["T"] for r in timed], [r["step_s"] for r in timed], "o-", label=impl)
    axes[0].axhline(data["budget_mib"], color="gray", ls="--", lw=1, label="budget")
    for ax, what in zip(axes, ("peak memory (MiB, XLA memory_analysis)", "train step (s, CPU)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("T")
        ax.set_title(what, fontsize=9)
        ax.legend(fontsize=8)
    fig.suptitle("XLNet two-stream step, 1 layer d=128 H=4, P=T/6: materialized vs blockwise",
                 fontsize=9)  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
