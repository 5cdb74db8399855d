"""How easy is the Retrieval stand-in? A one-feature rule on its splits (no model).

The stand-in ``l10n_pairs`` asks whether a German message translates an English one (half
the pairs mismatched by hash). Translations have similar lengths, so the absolute log ratio of
the two lengths alone separates many pairs: this script fits the best threshold on that one
feature on the training split and reports its test accuracy, the floor a model must beat to
show it matched content rather than length.

Usage:
    python experiments/lra_accuracy/standin_baseline.py [--path ../shared/data/...jsonl.gz]

Writes ``results/standin_baseline.{json,md}`` beside this file.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

from seqjax import bench
from seqjax.configs import common
from seqjax.data import retrieval, translation

HERE = Path(__file__).resolve().parent


def length_feature(rows) -> tuple[np.ndarray, np.ndarray]:
    """``(|log((len2 + 1) / (len1 + 1))| [n], labels [n])`` of ``(doc1, doc2, label)`` rows."""
    f = np.array([abs(np.log((len(b) + 1) / (len(a) + 1))) for a, b, _ in rows])
    return f, np.array([label for *_, label in rows])


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--path", default=common.shared_data_file("software_l10n/en-de.jsonl.gz"))
    p.add_argument("--heldout-fraction", type=float, default=0.05)
    p.add_argument("--out", default=str(HERE / "results"))
    args = p.parse_args(argv)
    pairs, _ = translation.read_jsonl(args.path, "en", None)
    splits = retrieval.l10n_pair_splits(pairs, args.heldout_fraction)
    f_tr, y_tr = length_feature(splits["train"])
    f_te, y_te = length_feature(splits["test"])
    thresholds = np.quantile(f_tr, np.linspace(0.01, 0.99, 99))
    train_acc = np.array([((f_tr < t) == y_tr).mean() for t in thresholds])
    best = float(thresholds[int(np.argmax(train_acc))])
    test_acc = float(((f_te < best) == y_te).mean())
    n = len(y_te)
    row = {
        "rule": "true pair iff abs(log(len_de / len_en)) < threshold (fit on train)",
        "threshold": best,
        "train_accuracy": 100 * float(train_acc.max()),
        "test_accuracy": 100 * test_acc,
        "test_se": 100 * float(np.sqrt(test_acc * (1 - test_acc) / n)),
        "test_examples": n,
        "test_positive_rate": 100 * float(y_te.mean()),
    }
    md = (
        "# Retrieval stand-in: a length-only baseline\n\n"
        + bench.markdown_table([row], list(row))
        + f"\n\nSplits: {', '.join(f'{k} {len(v):,}' for k, v in splits.items())} pairs.\n"
    )
    payload = {"rows": [row], "loadavg": os.getloadavg()}
    bench.write_results(args.out, "standin_baseline", payload, md)
    print(md)
    return payload


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
