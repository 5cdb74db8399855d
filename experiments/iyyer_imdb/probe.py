"""A linear probe of the frozen biLM's features (a diagnostic beside the ELMo row): each
review's mean over its tokens of every biLM layer, standardized per dimension, then
scikit-learn's logistic regression on 1,536 training reviews, scored on the first 640 test
reviews. ``python probe.py ELMO_CLASSIFIER_WORKDIR EXPERIMENT_DIR`` (any ``elmo`` classifier
run: its ``encoder/`` is the loaded biLM) -> ``results/iyyer_imdb_probe.json``. Needs the
``probe`` extra (``pip install -e ".[probe]"``: scikit-learn).
"""

import copy
import json
import sys
from pathlib import Path

import jax
import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from seqjax import data as sd
from seqjax.train import setup


def main(workdir: str, here: str, n_train: int = 1536, n_test: int = 640) -> dict:
    run, st, _ = setup.restore_latest(workdir)
    params = st["params"]

    @jax.jit
    def layers(x, c):
        _, inter = run.model.apply({"params": params}, x, c, capture_intermediates=True,
                                   mutable=["intermediates"])  # fmt: skip
        return inter["intermediates"]["encoder"]["__call__"][0][0]

    def features(split, n):
        cfg = copy.deepcopy(run.config.data)
        cfg.batch_size = 64
        it = sd.make(cfg, split=split, train=False)
        xs, ys = [], []
        for _ in range(n // 64):
            b = next(it)
            keep = (b["inputs"] > 0)[..., None]
            hs = layers(b["inputs"], b["token_chars"])
            xs.append(np.concatenate([(np.asarray(h) * keep).sum(1) / keep.sum(1) for h in hs], -1))
            ys.append(b["targets"])
        it.close()
        return np.concatenate(xs), np.concatenate(ys)

    x_tr, y_tr = features("train", n_train)
    x_te, y_te = features("test", n_test)
    scale = StandardScaler().fit(x_tr)
    out = {"train_reviews": len(y_tr), "test_reviews": len(y_te)}
    width = x_tr.shape[1] // 3
    for name, cols in (("all layers", slice(None)), ("layer 0 (char CNN)", slice(0, width)),
                       ("layer 2 (top LSTM)", slice(2 * width, None))):  # fmt: skip
        clf = LogisticRegression(max_iter=2000).fit(scale.transform(x_tr)[:, cols], y_tr)
        p = clf.score(scale.transform(x_te)[:, cols], y_te)
        out[name] = {"test_accuracy": p, "test_se": float(np.sqrt(p * (1 - p) / len(y_te))),
                     "train_accuracy": clf.score(scale.transform(x_tr)[:, cols], y_tr)}  # fmt: skip
    Path(here, "results", "iyyer_imdb_probe.json").write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main(*sys.argv[1:3])
