"""LRA Image (Tay et al. 2020, §2.2.4): images as pixel sequences, one token per 8-bit
pixel (ids 0..255, no padding), 10 classes, with LRA's CIFAR-10 hyper-parameters.

    python -m seqjax.main --config configs/lra_image.py --workdir /tmp/lra_image
    python -m seqjax.main --config configs/lra_image.py:smoke --workdir /tmp/lra_image_smoke
    python -m seqjax.main --config configs/lra_image.py:cifar10 --workdir /tmp/lra_cifar10

Offline the data set is Fashion-MNIST (784 pixels; ``../shared/data/fashion_mnist``) in
place of LRA's grayscale CIFAR-10 (1,024 pixels; the ``cifar10`` variant, which needs
``cifar-10-python.tar.gz`` in ``data.manual_dir`` or a download). The model
and optimizer are LRA's ``image/configs/cifar10/base_cifar10_config.py``: 1 layer, 1 head,
width 32 (qkv 32), MLP 64, dropout 0.3, attention dropout 0.2, CLS pooling, learned
positions, batch 256, Adam at 5e-4 with one epoch of linear warm-up then cosine decay, no
weight decay, 200 epochs (LRA Table 1: Transformer 42.44 % on CIFAR-10). ``smoke`` trains
a tiny model for a few steps in the test suite; ``cpu`` is LRA's model itself (it is small)
for 600 steps of batch 32 (a third of an epoch; minutes on two idle CPU cores), the LRA study's
CPU scale. ``sweep()`` lists every mechanism of the
LRA study that seqjax has.
"""

import ml_collections

from seqjax import data
from seqjax.configs import common
from seqjax.train import defaults

VARIANTS = ("default", "smoke", "cpu", "cifar10")
MECHANISMS = ("dense", "sparse_fixed", "linformer", "lsh")
TRAIN_EXAMPLES = 55_000  # Fashion-MNIST train split (LRA CIFAR-10: 45,000)


def attention_options(length: int, row: int = 28) -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(
        {
            "dense": {"implementation": "auto"},
            "sparse_fixed": {"stride": row, "c": row // 4},  # stride = one image row
            "linformer": {"k": 256, "max_len": length, "sharing": "headwise"},
            "lsh": {"n_hashes": 2, "chunk_len": 56},
        }
    )


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    variant = common.variant(arg, VARIANTS, "configs/lra_image.py")
    d = data.default_config()
    d.name = "fashion_mnist"
    d.image_task = "classification"
    d.batch_size = 256
    cifar = variant == "cifar10"
    if cifar:
        d.name = "cifar10"  # LRA Image itself: CIFAR-10 in grayscale, 1,024 pixels
    if d.manual_dir is None:
        d.manual_dir = "../shared/data"
    c = defaults.base(d)
    c.seed = 0

    m = c.model
    m.attention = "dense"
    length = (1024 if cifar else 784) + 1  # pixels + CLS
    m.attention_options = attention_options(length, 32 if cifar else 28)
    m.num_layers, m.num_heads, m.d_model, m.d_ff = 1, 1, 32, 64
    m.max_len = length
    m.dropout_rate, m.attention_dropout_rate = 0.3, 0.2
    m.pooling = "cls"
    m.positional = "learned"

    epoch = (45_000 if cifar else TRAIN_EXAMPLES) // d.batch_size
    o = c.optimizer
    o.name, o.schedule = "adam", "warmup_cosine"
    o.learning_rate, o.warmup_steps, o.min_lr_ratio = 5e-4, epoch, 0.0
    o.weight_decay, o.grad_clip_norm = 0.0, 0.0

    t = c.train
    t.num_steps = epoch * 200
    t.eval_every = epoch
    t.checkpoint_every = epoch * 10
    t.sample_length = 0

    if variant == "smoke":
        d.batch_size = 8
        m.d_ff = 32
        o.warmup_steps = 2
        t.num_steps, t.eval_every, t.eval_max_batches, t.checkpoint_every = 4, 2, 1, 2
        t.test_max_batches = 2  # the smoke ends with a test figure, on a slice of the split
    if variant == "cpu":  # LRA's model, fewer and smaller steps (experiments/lra_accuracy)
        d.batch_size = 32
        o.warmup_steps = 60
        t.num_steps, t.eval_every, t.eval_max_batches, t.checkpoint_every = 600, 200, 20, 200
    return c


def sweep():
    """LRA Table 1's Image column: one job per attention mechanism."""
    return [{"config.model.attention": name} for name in MECHANISMS]
