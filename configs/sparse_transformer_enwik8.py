"""The paper's Sparse Transformer on enwik8 (Child et al. 2019, §7 and Table 2), for
accelerators.

    python -m seqjax.main --config configs/sparse_transformer_enwik8.py --workdir W
    python -m seqjax.main --config configs/sparse_transformer_enwik8.py:smoke --workdir W

Expected (Child et al. 2019, §7 and Table 1): 0.99 bits per byte on the enwik8 test split
(0.992 ± 0.001 over 3 seeds; dense attention 1.00), 95M parameters. Not yet run in seqjax
(no accelerator time so far): the number is the target, not a measurement.

From the paper (Child et al. 2019, §5-§7): 30 layers, d=512, 8 heads, context 12,288, the
fixed pattern with stride 128 and c=32, dropout 0.40, pre-activation residual blocks with
GELU and FF width 4d; Adam with 5,000 warm-up steps, gradient clip 1.0, weight decay 0.01
and cosine decay; attention recomputed in the backward pass (``model.remat``).

Our choices where the paper is silent: decoupled weight decay on matrices only (AdamW,
``seqjax.train.optim``), peak learning rate 3.5e-4, cosine to 0, batch 16 (196,608 bytes per
step), 36,600 steps (about 80 passes over the 90M training bytes), merged heads (every head
attends to both halves of the pattern, §4.3), learned positions, tied embeddings, bfloat16
compute. The W2 / output projection scaling by 1/sqrt(2N) at initialization is not
reproduced (seqjax.models uses one initializer).

Variants (``:arg``): ``default``, ``smoke`` (2 layers, 64 wide, context 256, stride 16,
20 steps; needs the enwik8 zip in ``config.data.manual_dir`` or a download). Every field
not set here is documented in ``seqjax/train/defaults.py`` and ``seqjax/data/config.py``.
"""

import ml_collections

from seqjax import data
from seqjax.configs import common
from seqjax.train import defaults

VARIANTS = ("default", "smoke")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    variant = common.variant(arg, VARIANTS, "configs/sparse_transformer_enwik8.py")
    d = data.default_config()
    d.name = "enwik8"  # 90M / 5M / 5M bytes (standard split)
    d.vocab = "bytes"  # 256 symbols
    d.seq_len = 12_288  # context
    d.batch_size = 16  # global batch (our choice)
    c = defaults.base(d)
    c.seed = 0  # init and dropout seed

    m = c.model
    m.attention = "sparse_fixed"  # the fixed pattern (§4.2), every layer
    m.attention_options = ml_collections.ConfigDict(
        {
            "sparse_fixed": {
                "stride": 128,  # l
                "c": 32,  # summary cells per block
                "head_mode": "merged",  # one head attends to A1 ∪ A2
                "implementation": "blocksparse",  # only the blocks the pattern touches
            }
        }
    )
    m.num_layers = 30  # blocks
    m.num_heads = 8  # heads (64 wide)
    m.d_model = 512  # width
    m.d_ff = 2048  # 4d
    m.max_len = d.seq_len  # learned positions over the context
    m.positional = "learned"  # learned positions (our choice)
    m.dropout_rate = 0.4  # paper: dropout 0.40
    m.attention_dropout_rate = 0.0  # not given in the paper
    m.remat = True  # recompute each block in the backward pass (§5.4)
    m.dtype = "bfloat16"  # compute dtype (parameters float32)

    o = c.optimizer
    o.name = "adamw"  # Adam with decoupled weight decay
    o.schedule = "warmup_cosine"  # warm-up, then cosine
    o.learning_rate = 3.5e-4  # peak (our choice)
    o.warmup_steps = 5000  # paper: 5,000 warm-up steps
    o.min_lr_ratio = 0.0  # cosine to 0
    o.b1, o.b2, o.eps = 0.9, 0.999, 1e-8  # Adam defaults
    o.weight_decay = 0.01  # paper: weight decay 0.01 ...
    o.weight_decay_mask = "matrices"  # ... on matrices (our choice)
    o.grad_clip_norm = 1.0  # paper: clip 1.0

    t = c.train
    t.num_steps = 36_600  # about 80 epochs of 90M bytes at 196,608 bytes per step
    t.log_every = 100  # metrics.jsonl / TensorBoard
    t.eval_every = 2000  # validation every 2000 steps ...
    t.eval_max_batches = 20  # ... on 20 batches
    t.checkpoint_every = 2000  # checkpoint period
    t.sample_prompt = "The "  # printed at the end
    t.sample_length = 0  # no sample (generation at 12K context is slow)

    if variant == "smoke":  # shape check of the recipe: seconds on an accelerator
        d.seq_len = 256
        d.batch_size = 8
        m.max_len = 256
        m.num_layers = 2
        m.d_model = 64
        m.num_heads = 4
        m.d_ff = 256
        m.dtype = "float32"
        m.attention_options.sparse_fixed.stride = 16
        m.attention_options.sparse_fixed.c = 4
        o.warmup_steps = 5
        t.num_steps = 20
        t.eval_every = 10
        t.eval_max_batches = 2
        t.checkpoint_every = 10
    return c
