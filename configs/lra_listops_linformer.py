"""LRA ListOps (2K tokens, 10 classes) with a Linformer encoder (Wang et al. 2020).

    python -m seqjax.main --config configs/lra_listops_linformer.py --workdir /tmp/lra_listops_lin
    python -m seqjax.main --config configs/lra_listops_linformer.py:k=256,sharing=kv \\
        --workdir /tmp/lra_listops_lin_k256_kv
    python -m seqjax.main --config configs/lra_listops_linformer.py:smoke --workdir /tmp/lin_smoke

The data are generated with a fixed seed (``seqjax.data.listops``, LRA's generator: 96k /
2k / 2k trees of length 500-2000), prepared once with TFDS; no download.

Expected: Tay et al. 2020 (LRA, Table 1) report 35.70 % test accuracy for Linformer on
ListOps (Transformer 36.37 %); the default variant (k = 256, headwise sharing) is sized for
an accelerator, not for a 2-core CPU (untested here at full length). ``smoke`` (a small
generated set of short trees, tiny model, 40 steps) runs in a few minutes on a 2-core CPU
and stays near the majority-class rate: it checks the pipeline, not the accuracy.

Variants (``:arg``, comma-separated): ``k=128|256`` (projected length, Wang et al. 2020
Table 2: k = 128 / 256 are "nearly on par" with full attention), ``sharing=none|headwise|
kv|layerwise`` (§4 of the paper; 12 x 12 counts 24 / 12 / 1 matrices for the shared
modes), ``smoke``. ``sweep()`` lists the study: both k times the four sharing modes.
Fields not set here are documented in ``seqjax/train/defaults.py`` and
``seqjax/data/config.py``. Everything but the attention comes from the dense baseline
``configs/lra_listops.py``.
"""

import ml_collections

from seqjax.configs import _lra as lra

KS = lra.LINFORMER_KS


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    return lra.linformer_config(arg, "configs/lra_listops_linformer.py", "lra_listops")


def sweep():
    """The study: k in {128, 256} x the paper's sharing modes (one job per dict)."""
    return lra.linformer_sweep()
