"""LRA byte-level Text (IMDB reviews, 4K bytes) with a Linformer encoder (Wang et al. 2020).

    python -m seqjax.main --config configs/lra_text_linformer.py --workdir /tmp/lra_text_lin
    python -m seqjax.main --config configs/lra_text_linformer.py:k=256,sharing=kv \\
        --workdir /tmp/lra_text_lin_k256_kv
    python -m seqjax.main --config configs/lra_text_linformer.py:smoke --workdir /tmp/lin_smoke

The reviews are read from ``../shared/data/imdb/aclImdb_v1_labeled.tar.gz`` (``data.
manual_dir``, or env ``SEQJAX_DATA_DIR``) and prepared once with TFDS.

Expected: Tay et al. 2020 (LRA, Table 1) report 53.94 % test accuracy for Linformer on
Text (Transformer 64.27 %); the default variant (k = 256, headwise sharing) is sized for an
accelerator, not for a 2-core CPU (untested here at full length). ``smoke``
(1K bytes, tiny model, 40 steps) runs in a few minutes on a 2-core CPU and stays near
chance (50 %): it checks the pipeline, not the accuracy.

Variants (``:arg``, comma-separated): ``k=128|256`` (projected length, Wang et al. 2020
Table 2: k = 128 / 256 are "nearly on par" with full attention), ``sharing=none|headwise|
kv|layerwise`` (§4 of the paper; 12 x 12 counts 24 / 12 / 1 matrices for the shared
modes), ``smoke``. ``sweep()`` lists the study: both k times the four sharing modes.
Fields not set here are documented in ``seqjax/train/defaults.py`` and
``seqjax/data/config.py``. Everything but the attention comes from the dense baseline
``configs/lra_text.py``.
"""

import ml_collections

from seqjax.configs import _lra as lra

KS = lra.LINFORMER_KS


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    return lra.linformer_config(arg, "configs/lra_text_linformer.py", "lra_text")


def sweep():
    """The study: k in {128, 256} x the paper's sharing modes (one job per dict)."""
    return lra.linformer_sweep()
