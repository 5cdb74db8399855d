"""LRA ListOps (Tay et al. 2020, §3.1 and Table 1) with a dense Transformer encoder.

    python -m seqjax.main --config configs/lra_listops.py --workdir /tmp/lra_listops
    python -m seqjax.main --config configs/lra_listops.py:smoke --workdir /tmp/listops_smoke
    python -m seqjax.main --config configs/lra_listops.py --workdir /tmp/listops_sparse \\
        --config.model.attention=sparse_fixed
    python -m seqjax.main --config configs/lra_listops.py:smoke --workdir /tmp/lo_performer \\
        --config.model.attention=performer

Kernelized mechanisms (``performer``, ``linear``) have no attention matrix: switched to on
the command line, they run with attention dropout 0 (``seqjax.main.fit_attention_dropout``;
LRA's own code ignores the rate for them). Every LRA ``smoke`` ends with a test figure on a
slice of the test split (``train.test_max_batches``).

Expected: LRA Table 1 reports 36.37 % test accuracy for the Transformer (Sparse Transformer
17.07, Linformer 35.70, Reformer 37.27; 10 classes, chance 10 %). The default (``full``)
variant is LRA's own ListOps setting (reference code ``lra_benchmarks/listops/configs/
base_listops_config.py`` and ``train.py``): 6 layers, 8 heads, width 512, MLP 2048, CLS
pooling, inputs up to 2,000 tokens (ours: 2,047 + CLS = 2,048, a length every mechanism
accepts; no generated tree is longer than 2,000), batch 32, 5k steps, dropout 0.1; Adam
(b1 0.9, b2 0.98, eps 1e-9) with weight decay 0.1 on every parameter (Flax's
``optim.Adam``: decoupled, times the rate, no mask), no gradient clipping, and the schedule
``constant * linear_warmup * rsqrt_decay`` with constant 0.05 and warm-up 1,000 (peak
1.58e-3 at step 1,000). It is meant for an accelerator; ``smoke`` (short trees, tiny
model, 40 steps, the same optimizer and schedule reaching the same peak after a 5-step
warm-up) runs in a couple of minutes on a 2-core CPU and checks the pipeline, not the
accuracy. The data set is generated deterministically from ``data.seed`` (96k / 2k / 2k
trees; see ``seqjax/data/listops.py``).

``sweep()`` lists the study of Table 1: one job per attention mechanism (dense, sparse
fixed, Linformer, LSH), the options of each set in ``model.attention_options``. Fields not
set here are documented in ``seqjax/train/defaults.py`` and ``seqjax/data/config.py``.
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
    variant = common.variant(arg, VARIANTS, "configs/lra_listops.py")  # default = full
    d = data.default_config()
    d.name = "listops"  # nested MAX/MIN/MED/SM expressions, 10 classes
    d.max_len = 2047  # tokens per expression (LRA: 2,000; + CLS = 2,048 model inputs)
    d.batch_size = 32  # global batch
    c = defaults.base(d)
    c.seed = 0  # init and dropout seed

    m = c.model
    m.attention = "dense"  # dense | sparse_fixed | linformer | lsh (see sweep())
    m.attention_options = attention_options(d.max_len + 1)
    m.num_layers = 6  # encoder blocks (LRA ListOps: num_layers 6)
    m.num_heads = 8  # attention heads (head_dim 64)
    m.d_model = 512  # model width (emb_dim = qkv_dim 512)
    m.d_ff = 2048  # feed-forward width (mlp_dim)
    m.max_len = d.max_len + 1  # positions table: the input length with CLS
    m.dropout_rate = 0.1  # residual / embedding dropout
    m.attention_dropout_rate = 0.1  # dropout on attention probabilities
    m.pooling = "cls"  # LRA pooling_mode "CLS": a learned vector prepended

    o = c.optimizer
    optim.set_lra_recipe(o, warmup_steps=1000)  # LRA: Adam, wd 0.1, rsqrt; listops warmup

    t = c.train
    t.num_steps = 5_000  # optimizer updates (LRA: 5k steps for ListOps)
    t.eval_every = 1000  # validation every 1000 steps
    t.eval_max_batches = 20  # validation batches per evaluation during training
    t.checkpoint_every = 1000  # checkpoint period
    t.sample_length = 0  # classifier: no text sample

    if variant == "smoke":  # a couple of minutes on a 2-core CPU
        d.listops_train_size = 512  # a small generated set ...
        d.listops_validation_size = 64
        d.listops_test_size = 64
        d.listops_min_length = 50  # ... of short trees
        d.listops_max_length = 500
        d.max_len = 511  # + CLS = 512
        d.batch_size = 8
        m.max_len = 512
        m.attention_options = attention_options(512)
        m.num_layers = 2
        m.d_model = 64
        m.num_heads = 4
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
