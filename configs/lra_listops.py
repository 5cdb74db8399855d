"""LRA ListOps (Tay et al. 2020, §3.1 and Table 1) with a dense Transformer encoder.

    python -m seqjax.main --config configs/lra_listops.py --workdir /tmp/lra_listops
    python -m seqjax.main --config configs/lra_listops.py:smoke --workdir /tmp/listops_smoke
    python -m seqjax.main --config configs/lra_listops.py --workdir /tmp/listops_sparse \\
        --config.model.attention=sparse_fixed

Expected: LRA Table 1 reports 36.37 % test accuracy for the Transformer (Sparse Transformer
17.07, Linformer 35.70, Reformer 37.27; 10 classes, chance 10 %). The default sizes follow
LRA's ListOps model (4 layers, 8 heads, width 512, FF 1024, inputs up to 2,000 tokens) and are
meant for an accelerator; ``smoke`` (short trees, tiny model, 40 steps) runs in a couple of
minutes on a 2-core CPU and checks the pipeline, not the accuracy. The data set is generated
deterministically from ``data.seed`` (96k / 2k / 2k trees; see ``seqjax/data/listops.py``).

``sweep()`` lists the study of Table 1: one job per attention mechanism (dense, sparse
fixed, Linformer, LSH), the options of each set in ``model.attention_options``. Fields not
set here are documented in ``seqjax/train/defaults.py`` and ``seqjax/data/config.py``.
"""

import ml_collections

from seqjax import data
from seqjax.train import defaults

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
    variant = arg or "default"
    if variant not in ("default", "smoke"):
        raise ValueError(f"configs/lra_listops.py variant {variant!r}; valid: default, smoke")
    d = data.default_config()
    d.name = "listops"  # nested MAX/MIN/MED/SM expressions, 10 classes
    d.max_len = 2048  # tokens per expression (LRA keeps trees shorter than 2,000)
    d.batch_size = 32  # global batch
    c = defaults.base(d)
    c.seed = 0  # init and dropout seed

    m = c.model
    m.attention = "dense"  # dense | sparse_fixed | linformer | lsh (see sweep())
    m.attention_options = attention_options(d.max_len)
    m.num_layers = 4  # encoder blocks (LRA ListOps model)
    m.num_heads = 8  # attention heads (head_dim 64)
    m.d_model = 512  # model width
    m.d_ff = 1024  # feed-forward width
    m.max_len = d.max_len  # positions table: the input length
    m.dropout_rate = 0.1  # residual / embedding dropout
    m.attention_dropout_rate = 0.1  # dropout on attention probabilities
    m.pooling = "mean"  # mean over real (non-pad) tokens

    o = c.optimizer
    o.learning_rate = 5e-4  # peak rate after warm-up
    o.warmup_steps = 1000  # linear warm-up
    o.weight_decay = 0.01  # AdamW decoupled decay

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
        d.max_len = 512
        d.batch_size = 8
        m.max_len = 512
        m.attention_options = attention_options(512)
        m.num_layers = 2
        m.d_model = 64
        m.num_heads = 4
        m.d_ff = 128
        o.warmup_steps = 5
        t.num_steps = 40
        t.eval_every = 20
        t.eval_max_batches = 2
        t.checkpoint_every = 20
        t.final_eval = False
    return c


def sweep():
    """LRA Table 1's comparison: one job per attention mechanism."""
    return [{"config.model.attention": name} for name in MECHANISMS]
