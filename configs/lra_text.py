"""LRA byte-level Text (Tay et al. 2020, §3.2 and Table 1) with a dense Transformer encoder.

IMDB reviews as bytes (ids = byte + 1, 0 = padding, vocabulary 257), truncated to 4K bytes,
binary sentiment.

    python -m seqjax.main --config configs/lra_text.py --workdir /tmp/lra_text
    python -m seqjax.main --config configs/lra_text.py:smoke --workdir /tmp/text_smoke
    python -m seqjax.main --config configs/lra_text.py --workdir /tmp/text_lsh \\
        --config.model.attention=lsh

The reviews are read from ``../shared/data/imdb/aclImdb_v1_labeled.tar.gz`` (``data.
manual_dir``, or env ``SEQJAX_DATA_DIR``) and prepared once with TFDS.

Expected: LRA Table 1 reports 64.27 % test accuracy for the Transformer (Sparse Transformer
63.58, Linformer 53.94, Reformer 56.10; chance 50 %). The default (``full``) variant is LRA's
own Text setting (reference code ``lra_benchmarks/text_classification/configs/
base_tc_config.py`` and ``train.py``): 4 layers, 4 heads, width 256, MLP 1024, CLS pooling,
batch 32, 20k steps, dropout 0.1; Adam (b1 0.9, b2 0.98, eps 1e-9) with weight decay 0.1 on
every parameter, no gradient clipping, ``constant * linear_warmup * rsqrt_decay`` with
constant 0.05 and warm-up 8,000 (``seqjax.train.optim.set_lra_recipe``). Input: the paper's
4K bytes (4,095 + CLS = 4,096; the reference config's ``max_length`` is 1,000). Meant for an
accelerator; ``smoke`` (1K bytes, tiny model, 40 steps, the same optimizer reaching the
same peak after a 5-step warm-up) runs in a few minutes on a 2-core CPU and stays near
chance: it checks the pipeline, not the accuracy.

``sweep()`` lists the study of Table 1: one job per attention mechanism. Fields not set here
are documented in ``seqjax/train/defaults.py`` and ``seqjax/data/config.py``.
"""

import ml_collections

from seqjax import data
from seqjax.configs import common
from seqjax.train import defaults, optim

VARIANTS = ("default", "full", "smoke")
MECHANISMS = ("dense", "sparse_fixed", "linformer", "lsh")


def attention_options(max_len: int) -> ml_collections.ConfigDict:
    """Options of every mechanism of the study (only the selected one is used)."""
    return ml_collections.ConfigDict(
        {
            "dense": {"implementation": "auto"},  # reference for short, chunked for long
            "sparse_fixed": {"stride": 64, "c": 16, "implementation": "blocksparse"},
            "linformer": {"k": 256, "max_len": max_len, "sharing": "headwise"},
            "lsh": {"n_hashes": 2, "chunk_len": 64},
        }
    )


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    variant = common.variant(arg, VARIANTS, "configs/lra_text.py")  # default = full
    d = data.default_config()
    d.name = "imdb_bytes"  # byte-level IMDB sentiment, vocabulary 257 (0 = pad)
    d.max_len = 4095  # bytes per review (LRA Text 4K, + CLS = 4,096); longer are truncated
    d.batch_size = 32  # global batch (LRA Table 2 uses 32)
    if d.manual_dir is None:  # the offline copy beside the repository
        d.manual_dir = "../shared/data/imdb"
    c = defaults.base(d)
    c.seed = 0  # init and dropout seed

    m = c.model
    m.attention = "dense"  # dense | sparse_fixed | linformer | lsh (see sweep())
    m.attention_options = attention_options(d.max_len + 1)
    m.num_layers = 4  # encoder blocks (LRA Text model)
    m.num_heads = 4  # attention heads (head_dim 64)
    m.d_model = 256  # model width
    m.d_ff = 1024  # feed-forward width
    m.max_len = d.max_len + 1  # positions table: the input length with CLS
    m.dropout_rate = 0.1  # residual / embedding dropout
    m.attention_dropout_rate = 0.1  # dropout on attention probabilities
    m.pooling = "cls"  # LRA classifier_pool "CLS": a learned vector prepended

    o = c.optimizer
    optim.set_lra_recipe(o, warmup_steps=8000)  # LRA: Adam, wd 0.1, rsqrt; Text warmup 8000

    t = c.train
    t.num_steps = 20_000  # optimizer updates (LRA: 20k steps for Text)
    t.eval_every = 1000  # validation every 1000 steps
    t.eval_max_batches = 20  # validation batches per evaluation during training
    t.checkpoint_every = 1000  # checkpoint period
    t.sample_length = 0  # classifier: no text sample

    if variant == "smoke":  # a few minutes on a 2-core CPU
        d.max_len = 1023  # + CLS = 1,024
        d.batch_size = 8
        m.max_len = 1024
        m.attention_options = attention_options(1024)
        m.num_layers = 2
        m.d_model = 64
        m.d_ff = 128
        o.learning_rate *= (5 / o.warmup_steps) ** 0.5  # the full run's peak rate ...
        o.warmup_steps = 5  # ... after 5 steps
        t.num_steps = 40
        t.eval_every = 20
        t.eval_max_batches = 2
        t.checkpoint_every = 20
        t.test_max_batches = 2  # the smoke ends with a test figure, on a slice of the split
    return c


def sweep():
    """LRA Table 1's comparison: one job per attention mechanism."""
    return [{"config.model.attention": name} for name in MECHANISMS]
