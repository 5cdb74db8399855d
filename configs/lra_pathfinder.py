"""LRA Pathfinder (Tay et al. 2020, §2.2.5): are two markers connected by a dashed contour?
32x32 grayscale images as 1,024 pixel tokens (ids 0..255), 2 classes, with LRA's
Pathfinder-32 hyper-parameters.

    python -m seqjax.main --config configs/lra_pathfinder.py --workdir /tmp/lra_pathfinder
    python -m seqjax.main --config configs/lra_pathfinder.py:smoke --workdir /tmp/pf_smoke
    python -m seqjax.main --config configs/lra_pathfinder.py:cpu --workdir /tmp/pf_cpu

The images come from seqjax's seeded generator (``seqjax.data.pathfinder``; LRA's release
is not needed): LRA's hardest setting, 14 dashes per contour (``curv_contour_length_14``),
160k / 20k / 20k images generated once into ``data.data_dir``. The model and optimizer are
LRA's ``image/configs/pathfinder32``: ``transformer_base.py`` (Table 1's Transformer row:
1 layer, 4 heads, width 128, qkv 64, MLP 128, dropout 0.2) over ``base_pathfinder32_config.py``
(attention dropout 0.1, mean pooling, sinusoidal positions, batch 512, Adam at 1e-3 with one
epoch of linear warm-up then cosine decay, no weight decay, no clipping, 200 epochs; LRA
Table 1: Transformer 71.40 %). ``cpu``: the same task at CPU size (4,000 training images,
LRA's one layer at width 32 with 2 heads, 300 steps of batch 16, 1,000 test images; expect
little above chance at this budget: LRA trains 62,400 steps of batch 512).
``smoke``: a tiny model on 64 images for a few steps (the test suite). ``sweep()`` lists the
mechanisms of the LRA study that seqjax has.
"""

import ml_collections

from seqjax import data
from seqjax.configs import common
from seqjax.train import defaults

VARIANTS = ("default", "smoke", "cpu")
MECHANISMS = ("dense", "sparse_fixed", "linformer", "lsh")
TRAIN_EXAMPLES = 160_000  # LRA: 80 % of 200,000 images per difficulty
SIDE = 32


def attention_options(length: int, row: int = SIDE) -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(
        {
            "dense": {"implementation": "auto"},
            "sparse_fixed": {"stride": row, "c": row // 4},  # stride = one image row
            "linformer": {"k": 256, "max_len": length, "sharing": "headwise"},
            "lsh": {"n_hashes": 2, "chunk_len": 64},
        }
    )


def lra_config(name: str, side: int, batch: int, clip: float, learned_positions: bool,
               train_examples: int = TRAIN_EXAMPLES):  # fmt: skip
    """LRA's Pathfinder base config at image side ``side`` (shared with lra_pathx.py)."""
    d = data.default_config()
    d.name = name
    d.batch_size = batch
    d.pathfinder_contour_length = 14
    c = defaults.base(d)
    c.seed = 0

    m = c.model
    m.attention = "dense"
    length = side * side  # mean pooling: no CLS position
    m.attention_options = attention_options(length, side)
    m.max_len = length
    m.dropout_rate, m.attention_dropout_rate = 0.1, 0.1
    m.pooling = "mean"
    m.positional = "learned" if learned_positions else "sinusoidal"

    epoch = train_examples // batch
    o = c.optimizer
    o.name, o.schedule = "adam", "warmup_cosine"
    o.b1, o.b2, o.eps = 0.9, 0.98, 1e-9  # LRA's Flax Adam
    o.learning_rate, o.warmup_steps, o.min_lr_ratio = 1e-3, epoch, 0.0
    o.weight_decay, o.grad_clip_norm = 0.0, clip

    t = c.train
    t.num_steps = epoch * 200
    t.eval_every = epoch
    t.checkpoint_every = epoch * 10
    t.sample_length = 0
    return c


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    variant = common.variant(arg, VARIANTS, "configs/lra_pathfinder.py")
    c = lra_config("pathfinder32", SIDE, batch=512, clip=0.0, learned_positions=False)
    d, m, o, t = c.data, c.model, c.optimizer, c.train
    # transformer_base.py: 1 layer, 4 heads, emb 128, qkv 64 (16 per head), MLP 128, dropout 0.2
    m.num_layers, m.num_heads, m.d_model, m.head_dim, m.d_ff = 1, 4, 128, 16, 128
    m.dropout_rate = 0.2

    if variant == "cpu":  # about 5 minutes per mechanism on two idle CPU cores
        # Measured with dense attention at T = 1,024: 2 layers x 64 wide (4 heads) at batch
        # 16 ran 0.045 steps/s, this model 0.19 steps/s, both at load average 11 on 2 cores.
        d.pathfinder_train_size, d.pathfinder_validation_size = 4_000, 500
        d.pathfinder_test_size = 1_000
        d.batch_size = 16
        m.num_layers, m.num_heads, m.d_model, m.head_dim, m.d_ff = 1, 2, 32, 16, 64
        m.dropout_rate, m.attention_dropout_rate = 0.1, 0.1
        o.warmup_steps = 30
        t.num_steps, t.eval_every, t.checkpoint_every = 300, 150, 0
    if variant == "smoke":
        d.pathfinder_train_size, d.pathfinder_validation_size, d.pathfinder_test_size = 64, 16, 16
        d.pathfinder_num_procs = 1
        d.batch_size = 8
        m.num_layers, m.num_heads, m.d_model, m.head_dim, m.d_ff = 1, 2, 16, 8, 32
        o.warmup_steps = 2
        t.num_steps, t.eval_every, t.eval_max_batches, t.checkpoint_every = 4, 2, 1, 2
        t.test_max_batches = 2  # the smoke ends with a test figure (16 test images)
    return c


def sweep():
    """LRA Table 1's Pathfinder column: one job per attention mechanism."""
    return [{"config.model.attention": name} for name in MECHANISMS]
