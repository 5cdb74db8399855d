"""LRA Path-X (Tay et al. 2020, §2.2.6): Pathfinder at 128x128, 16,384 pixel tokens, 2 classes,
with LRA's Pathfinder-128 hyper-parameters. In LRA's Table 1 every model fails (chance, 50 %).

    python -m seqjax.main --config configs/lra_pathx.py --workdir /tmp/lra_pathx
    python -m seqjax.main --config configs/lra_pathx.py:smoke --workdir /tmp/pathx_smoke

The images come from seqjax's seeded generator (``seqjax.data.pathfinder``, preset
``pathx``): 14 dashes per contour, 160k / 20k / 20k images generated once into
``data.data_dir`` (about 3.3 GB; ``data.pathfinder_num_procs`` processes). Model and
optimizer: LRA's ``image/configs/pathfinder128/base_pathfinder128_config.py`` (its
``transformer_base.py`` changes nothing): 1 layer, 2 heads, width 32, qkv 16, MLP 32,
dropout and attention dropout 0.1, mean pooling, learned positions, batch 64, Adam at 1e-3
with one epoch of linear warm-up then cosine decay, gradient clipping at norm 1, no weight
decay, 200 epochs (500k steps). ``smoke``: a tiny model on 32 images for two steps (dense
attention over 16,384 tokens takes tens of seconds a step on a CPU; the test is marked slow).
"""

import ml_collections

from seqjax.configs import common

VARIANTS = ("default", "smoke")
MECHANISMS = ("dense", "sparse_fixed", "linformer", "lsh")
SIDE = 128


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    variant = common.variant(arg, VARIANTS, "configs/lra_pathx.py")
    pathfinder = common.load("lra_pathfinder", __file__)
    c = pathfinder.lra_config("pathx", SIDE, batch=64, clip=1.0, learned_positions=True)
    d, m, o, t = c.data, c.model, c.optimizer, c.train
    m.num_layers, m.num_heads, m.d_model, m.head_dim, m.d_ff = 1, 2, 32, 8, 32

    if variant == "smoke":
        d.pathfinder_train_size, d.pathfinder_validation_size, d.pathfinder_test_size = 16, 8, 8
        d.pathfinder_num_procs = 1
        d.batch_size = 2
        m.num_heads, m.d_model, m.head_dim, m.d_ff = 1, 16, 16, 16
        o.warmup_steps = 1
        t.num_steps, t.eval_every, t.eval_max_batches, t.checkpoint_every = 2, 1, 1, 2
        t.test_max_batches = 2  # the smoke ends with a test figure (4 test images)
    return c


def sweep():
    """LRA Table 1's Path-X column: one job per attention mechanism."""
    return [{"config.model.attention": name} for name in MECHANISMS]
