"""How far are the CPU-scale LRA Image rows from a model-free floor? Pixel baselines.

The CPU rows of the Image column train LRA's one-layer model for 600 steps of 32 images
(19,200 images, a third of an epoch of Fashion-MNIST). This script fits two classifiers on
raw pixels (no model, no training loop): the nearest class mean, and a ridge-regularised
least-squares linear map onto one-hot labels (closed form), each on the same first 19,200
training images the 600-step rows saw and on all 60,000, and reports their accuracy on the
10,000 test images, so a row below them is read as under-trained rather than as evidence
about its attention.

Usage:
    python experiments/lra_accuracy/image_baseline.py [--dir ../shared/data/fashion_mnist]

Writes ``results/image_baseline.{json,md}`` beside this file.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

from seqjax import bench
from seqjax.configs import common
from seqjax.data import images

HERE = Path(__file__).resolve().parent
SEEN = 600 * 32  # images the cpu-scale rows trained on (configs/lra_image.py:cpu)


def nearest_mean(x_tr, y_tr, x_te) -> np.ndarray:
    """Predicted class of each test row: the class whose training mean is nearest."""
    means_KP = np.stack([x_tr[y_tr == c].mean(0) for c in range(10)])
    d_NK = (x_te**2).sum(1, keepdims=True) - 2 * x_te @ means_KP.T + (means_KP**2).sum(1)
    return d_NK.argmin(1)


def ridge(x_tr, y_tr, x_te, lam: float = 1.0) -> np.ndarray:
    """argmax of the ridge least-squares map [pixels, 1] -> one-hot labels."""
    a_NP = np.concatenate([x_tr, np.ones((len(x_tr), 1))], 1)
    w = np.linalg.solve(a_NP.T @ a_NP + lam * np.eye(a_NP.shape[1]), a_NP.T @ np.eye(10)[y_tr])
    return (np.concatenate([x_te, np.ones((len(x_te), 1))], 1) @ w).argmax(1)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dir", default=common.shared_data_file("fashion_mnist"))
    p.add_argument("--out", default=str(HERE / "results"))
    args = p.parse_args(argv)
    d = Path(args.dir)
    x_tr = images.read_idx(d / "train-images-idx3-ubyte.gz", 3).reshape(-1, 784) / 255.0
    y_tr = images.read_idx(d / "train-labels-idx1-ubyte.gz", 1).astype(np.int64)
    x_te = images.read_idx(d / "t10k-images-idx3-ubyte.gz", 3).reshape(-1, 784) / 255.0
    y_te = images.read_idx(d / "t10k-labels-idx1-ubyte.gz", 1).astype(np.int64)
    rows = []
    for name, fit in (("nearest class mean", nearest_mean), ("ridge linear", ridge)):
        for n in (SEEN, len(x_tr)):
            acc = float((fit(x_tr[:n], y_tr[:n], x_te) == y_te).mean())
            rows.append({
                "classifier": name, "train_images": n, "test_accuracy": 100 * acc,
                "test_se": 100 * float(np.sqrt(acc * (1 - acc) / len(y_te))),
            })  # fmt: skip
    md = (
        "# LRA Image (Fashion-MNIST): pixel baselines without a model\n\n"
        + bench.markdown_table(rows, list(rows[0]))
        + f"\n\nTest images: {len(y_te):,}. Command: `python experiments/lra_accuracy/"
        "image_baseline.py`.\n"
    )
    payload = {"rows": rows, "loadavg": os.getloadavg()}
    bench.write_results(args.out, "image_baseline", payload, md)
    print(md)
    return payload


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
