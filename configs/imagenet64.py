"""Density modelling of downsampled ImageNet 64x64 in bits per dimension: the Sparse
Transformer (Child et al. 2019, §7.2, Table 1) and the Reformer (Kitaev et al. 2020, §5,
Table 5) settings, for accelerators.

    python -m seqjax.main --config configs/imagenet64.py --workdir W \\
        --config.data.manual_dir=DIR_WITH_THE_ZIPS
    python -m seqjax.main --config configs/imagenet64.py:reformer --workdir W
    python -m seqjax.main --config configs/imagenet64.py:smoke --workdir W
    python -m seqjax.sample --workdir W --length 4 --temperature 1 --out grid.png

Each 64x64 RGB image is 12,288 tokens: its sub-pixels in raster order, R G B of one pixel
before the next (``data.image_task='generation'``). The data (``seqjax.data.imagenet64``) are
Chrabaszcz et al.'s (2017) npz release: ``Imagenet64_train_part1_npz.zip``,
``..._part2_npz.zip`` and ``Imagenet64_val_npz.zip`` in ``data.manual_dir`` (or their
extracted ``.npz`` files, or downloaded; sha256-checked). Train = the 1,271,167 training
images less the last 10,000 (validation), test = the official 50,000 validation images.

Expected: Sparse Transformer 3.44 bits/dim (Table 1); Reformer 3.740 (6 layers), 3.710
(12 layers). Not yet run in seqjax (no accelerator time so far): targets, not measurements.
Both papers used van den Oord et al.'s (2016) downsampled ImageNet (box-resized PNGs); this
release is Chrabaszcz et al.'s (also box-resized, with their own class order), so the
numbers are close comparisons, not identical benchmarks.

(The paper's numbers below are quoted from our reading of it; they were not re-checked
against its text offline. Check them before a long run.)

``default`` (Sparse Transformer, §7.2): 48 layers, d=512, 16 heads, the strided pattern,
dropout 0.01, 70 epochs, 152M parameters; recipe of §5-§6 as in
``configs/sparse_transformer_cifar10.py`` (pre-LN blocks, GELU, Adam, 5,000 warm-up steps,
clip 1.0, weight decay 0.01, cosine, attention recomputed in the backward pass). Stride:
the paper's 128 does not divide the 192-sub-pixel row (64 pixels x 3), which seqjax's strided
pattern needs for its column half (§4.1), so the stride is one row, 192 (A1 = the previous
row, A2 = the same sub-pixel in every row above). Our choices: batch 32 (70 epochs =
2,780,580 steps), learning rate 3.5e-4 (the CIFAR-10 value), bfloat16.

``reformer`` (Kitaev et al. 2020; trax's ``reformer_imagenet64.gin``): 6 reversible layers,
d=1024, d_ff=4096, 8 heads of 64, LSH attention (2 hash rounds, chunks of 128, one chunk
back, 192 buckets), attention dropout 0.2, no other dropout, axial positions; Adam (b2 0.98,
eps 1e-9, no weight decay), rate d^-0.5 x linear warm-up (8,000 steps) x rsqrt decay, batch
8, 500,000 steps. ``:reformer12``: the same with 12 layers (3.710 in the paper).

Every evaluation draws ``eval.num_pictures`` (4) samples as ``<workdir>/samples/
step_XXXXXX.png`` and a TensorBoard image. Neither the strided pattern nor LSH has a
decoding cache in seqjax, so each of the 12,288 sub-pixels recomputes its prefix: on the
order of a thousand training steps' time per evaluation at these sizes, hence the long
``eval_every``; ``--config.eval.pictures=False`` turns it off.

``smoke``: 1 layer, 32 wide, 2 steps: the data path and the model wiring, in the test suite
on small files of the release's format (pictures off: 12,288 prefix recomputations).
"""

import ml_collections

from seqjax import data
from seqjax.configs import common
from seqjax.train import defaults

VARIANTS = ("default", "reformer", "reformer12", "smoke")
ROW = 64 * 3  # sub-pixels per image row
TRAIN_IMAGES = 1_281_167 - 10_000


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    variant = common.variant(arg, VARIANTS, "configs/imagenet64.py")
    d = data.default_config()
    d.name = "imagenet64"
    d.image_task = "generation"  # raster-order sub-pixels, bits/dim
    d.batch_size = 32  # global batch (our choice)
    c = defaults.base(d)
    c.seed = 0

    m = c.model
    m.attention = "sparse_strided"  # §4.1, every layer
    m.attention_options = ml_collections.ConfigDict(
        {
            "sparse_strided": {
                "stride": ROW,  # one image row (see the docstring)
                "head_mode": "merged",
                "implementation": "blocksparse",
            },
            "lsh": {
                "n_hashes": 2,
                "chunk_len": 128,
                "n_buckets": 192,
                "n_chunks_before": 1,
                "n_chunks_after": 0,
            },  # fmt: skip
        }
    )
    m.num_layers = 48
    m.num_heads = 16
    m.d_model = 512
    m.d_ff = 2048
    m.max_len = 64 * 64 * 3  # one image
    m.positional = "axial"  # learned row + column + channel embeddings
    m.dropout_rate = 0.01  # §7.2
    m.remat = True  # §5.4
    m.dtype = "bfloat16"

    o = c.optimizer
    o.name = "adamw"
    o.schedule = "warmup_cosine"
    o.learning_rate = 3.5e-4
    o.warmup_steps = 5000
    o.min_lr_ratio = 0.0
    o.b1, o.b2, o.eps = 0.9, 0.999, 1e-8
    o.weight_decay = 0.01
    o.weight_decay_mask = "matrices"
    o.grad_clip_norm = 1.0

    t = c.train
    t.num_steps = 70 * TRAIN_IMAGES // 32  # 70 epochs at 32 images per step
    t.log_every = 100
    t.eval_every = 20_000
    t.eval_max_batches = 20  # during training; the final test pass reads all 50,000
    t.checkpoint_every = 5000
    t.sample_length = 0  # the grids come from eval.pictures (and seqjax.sample --out)
    c.eval.pictures = True
    c.eval.num_pictures = 4

    if variant in ("reformer", "reformer12"):  # Kitaev et al. 2020 (trax gin)
        m.attention = "lsh"
        del m.attention_options["sparse_strided"]
        m.num_layers = 12 if variant == "reformer12" else 6
        m.num_heads, m.head_dim, m.d_model, m.d_ff = 8, 64, 1024, 4096
        m.reversible = True
        m.remat = False  # reversible layers recompute their inputs instead
        m.dropout_rate, m.attention_dropout_rate = 0.0, 0.2
        d.batch_size = 8
        o.name, o.schedule = "adam", "rsqrt"
        o.learning_rate = 1024**-0.5  # peak = this / sqrt(warmup) (trax multifactor)
        o.warmup_steps = 8000
        o.b1, o.b2, o.eps = 0.9, 0.98, 1e-9
        o.weight_decay = 0.0
        o.grad_clip_norm = 0.0  # none in the gin file
        t.num_steps = 500_000
    elif variant == "smoke":  # seconds on a CPU: the data path and the model wiring
        m.num_layers, m.num_heads, m.d_model, m.d_ff = 1, 2, 32, 64
        m.dropout_rate, m.remat, m.dtype = 0.0, False, "float32"
        d.batch_size = 2
        o.warmup_steps = 1
        t.num_steps, t.eval_every, t.eval_max_batches = 2, 1, 1
        t.checkpoint_every, t.final_eval = 0, False
        c.eval.pictures = False  # 12,288 prefix recomputations: minutes on a CPU
    return c
