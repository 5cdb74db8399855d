"""Redraws the committed experiment plots from the committed results files (no measuring).

    python experiments/replot.py            # every plot below
    python experiments/replot.py --list     # what it would draw

Each study's script owns its plot function and takes the results payload (the JSON it
wrote), so a plot drawn here is the plot a fresh run draws. The plots say what they show:
title with the scale and steps, the paper's values where its table has them, chance lines
for accuracies, error bars where there are several measurements, and a red "measured under
load" line where the results file records a loaded machine (``plotting.load_note``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from seqjax.configs import common as config_files  # noqa: E402

# (script, results file without .json, how the script's plot function is called)
PLOTS = [
    ("reformer/duplication.py", "reformer/results/duplication", "file"),
    ("reformer/duplication.py", "reformer/results/duplication_smoke", "file"),
    ("reformer/speed_memory.py", "reformer/results/speed_memory", "folder"),
    ("lra_accuracy/run.py", "lra_accuracy/results/lra_accuracy_cpu", "file"),
    ("lra_accuracy/run.py", "lra_accuracy/results/lra_accuracy_cpu_adamw", "file"),
    ("lra_accuracy/run.py", "lra_accuracy/results/lra_accuracy_smoke", "file"),
    ("char_lm_quality/run.py", "char_lm_quality/results/char_lm_cpu", "file"),
    # script:function -- the timing studies' plots live in timing_plots.py
    ("timing_plots.py:dense", "dense_attention/results/dense_cpu", "folder"),
    ("timing_plots.py:linformer", "linformer/results/linformer_cpu", "file"),
    ("timing_plots.py:linformer", "linformer/results/linformer_smoke", "file"),
    ("timing_plots.py:lra_speed", "lra_speed/results/lra_speed_cpu", "file"),
    ("timing_plots.py:lra_memory", "lra_speed/results/lra_memory_cpu_b32", "file"),
    ("timing_plots.py:reformer_growth", "reformer/results/growth", "file"),
    ("timing_plots.py:sparse_transformer", "sparse_transformer/results/cpu", "file"),
    ("timing_plots.py:train_throughput", "train_throughput/results/cpu", "file"),
    ("timing_plots.py:train_throughput", "train_throughput/results/smoke", "file"),
    ("timing_plots.py:transformer_xl", "transformer_xl/results/eval_speed_cpu", "file"),
    (
        "length_extrapolation/run.py",
        "length_extrapolation/results/length_extrapolation_cpu",
        "file",
    ),
    ("translation/run.py", "translation/results/translation_cpu", "file"),
    ("decoding_speed/run.py", "decoding_speed/results/decoding_speed_cpu", "file"),
    ("linformer_mlm/run.py", "linformer_mlm/results/linformer_mlm_cpu", "file"),
    ("linformer_mlm/run.py", "linformer_mlm/results/linformer_mlm_subword_cpu", "file"),
    ("longformer_warmstart/run.py", "longformer_warmstart/results/results", "file"),
    (
        "char_rnn_vs_transformer/summarize.py",
        "char_rnn_vs_transformer/results/char_rnn_vs_transformer_cpu",
        "file",
    ),
    ("albert_vs_bert/run.py", "albert_vs_bert/results", "file"),
    ("xlnet/plot.py", "xlnet/bench", "file"),
    ("xlnet_vs_bert/summarize.py", "xlnet_vs_bert/results", "file"),
    ("icl_study/run.py", "icl_study/results/results", "file"),
    ("iyyer_imdb/summarize.py", "iyyer_imdb/results/iyyer_imdb_cpu", "file"),
    ("bahdanau_fig2/evaluate.py", "bahdanau_fig2/results/bleu_by_length", "file"),
    ("bart_noise_ablation/run.py", "bart_noise_ablation/results", "file"),
    ("bart_noise_ablation/run.py", "bart_noise_ablation/long/results", "file"),
]


def replot(root: Path = HERE, out: Path | None = None) -> list[Path]:
    """Draws every plot of ``PLOTS`` from ``root``'s results into ``out`` (default: beside
    each results file); returns the files written."""
    sys.path.insert(0, str(root))  # the scripts import plotting.py
    written = []
    for entry, results, kind in PLOTS:
        script, _, function = entry.partition(":")
        name = "study_" + script.replace("/", "_").removesuffix(".py")
        module = config_files.load_file(root / script, name, register=True)
        plot = getattr(module, function or "plot")
        payload = json.loads((root / f"{results}.json").read_text())
        folder = out or (root / results).parent
        stem = Path(results).name
        if kind == "folder":
            plot(payload, folder, stem)
            written += sorted(Path(folder).glob(f"{stem}_*.png"))
        else:
            plot(payload, Path(folder) / f"{stem}.png")
            written.append(Path(folder) / f"{stem}.png")
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print the plots, draw nothing")
    parser.add_argument("--out", default=None, help="draw into this folder instead")
    args = parser.parse_args(argv)
    if args.list:
        for script, results, _ in PLOTS:
            print(f"{results}.json -> {script}")
        return 0
    for path in replot(out=Path(args.out) if args.out else None):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
