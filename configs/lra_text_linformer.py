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
``seqjax/data/config.py``. (The dense baseline ``configs/lra_text.py`` did not exist when
this file was written, so the LRA fields are set here in full.)
"""

import ml_collections

from seqjax import data
from seqjax.attention import linformer
from seqjax.train import defaults

KS = (128, 256)


def parse_arg(arg: str | None, config_file: str) -> dict:
    """``"k=256,sharing=kv,smoke"`` -> ``{"k": 256, "sharing": "kv", "smoke": True}``."""
    out = {"k": 256, "sharing": "headwise", "smoke": False}
    for item in [a.strip() for a in (arg or "").split(",") if a.strip()]:
        key, _, value = item.partition("=")
        if key == "smoke" and not value:
            out["smoke"] = True
        elif key == "k" and value.isdigit() and int(value) in KS:
            out["k"] = int(value)
        elif key == "sharing" and value in linformer.SHARING:
            out["sharing"] = value
        else:
            raise ValueError(
                f"{config_file} argument {item!r} is not valid; use comma-separated "
                f"k={'|'.join(map(str, KS))}, sharing={'|'.join(linformer.SHARING)}, smoke"
            )
    return out


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    a = parse_arg(arg, "configs/lra_text_linformer.py")
    d = data.default_config()
    d.name = "imdb_bytes"  # LRA Text: byte-level IMDB sentiment, vocabulary 257 (0 = pad)
    d.max_len = 4096  # bytes per review (LRA Text 4K); longer reviews are truncated
    d.batch_size = 32  # global batch (LRA Table 2 uses 32)
    if d.manual_dir is None:  # the offline copy beside the repository
        d.manual_dir = "../shared/data/imdb"
    c = defaults.base(d)
    c.seed = 0  # init and dropout seed

    m = c.model
    m.attention = "linformer"  # every layer uses Linformer
    m.num_layers = 4  # encoder blocks (LRA Text scale: 4 layers x 4 heads x 256)
    m.num_heads = 4  # attention heads
    m.d_model = 256  # model width
    m.d_ff = 1024  # feed-forward width
    m.max_len = d.max_len  # positions table: the input length
    m.dropout_rate = 0.1  # residual / embedding dropout
    m.attention_dropout_rate = 0.1  # dropout on the [T, k] attention probabilities
    m.pooling = "mean"  # mean over real (non-pad) bytes; 'cls' would add one position
    m.attention_options = ml_collections.ConfigDict(
        {
            "linformer": ml_collections.ConfigDict(
                {
                    "k": a["k"],  # projected length k (E, F: [k, max_len])
                    "max_len": d.max_len,  # columns of E/F = the longest input (+1 for cls)
                    "sharing": a["sharing"],  # none | headwise | kv | layerwise
                }
            )
        }
    )

    o = c.optimizer
    o.learning_rate = 5e-4  # peak rate after warm-up
    o.warmup_steps = 1000  # linear warm-up
    o.weight_decay = 0.01  # AdamW decoupled decay

    t = c.train
    t.num_steps = 20_000  # optimizer updates
    t.eval_every = 1000  # validation every 1000 steps
    t.eval_max_batches = 20  # validation batches per evaluation during training
    t.checkpoint_every = 1000  # checkpoint period
    t.sample_length = 0  # classifier: no text sample

    if a["smoke"]:  # a few minutes on a 2-core CPU
        d.max_len = 1024
        d.batch_size = 8
        m.max_len = 1024
        m.num_layers = 2
        m.d_model = 64
        m.d_ff = 128
        m.attention_options.linformer.k = min(a["k"], 128)
        m.attention_options.linformer.max_len = 1024
        o.warmup_steps = 5
        t.num_steps = 40
        t.eval_every = 20
        t.eval_max_batches = 2
        t.checkpoint_every = 20
        t.final_eval = False
    return c


def sweep():
    """The study: k in {128, 256} x the paper's sharing modes (one job per dict)."""
    return [
        {"config.model.attention_options.linformer.k": k,
         "config.model.attention_options.linformer.sharing": s}
        for k in KS for s in linformer.SHARING
    ]  # fmt: skip
