"""Autoregressive image generation on Fashion-MNIST in bits per dimension: the Sparse
Transformer's Table 1 comparison (Child et al. 2019, §7.2) at CPU scale.

    python -m seqjax.main --config configs/image_fashion_mnist.py --workdir /tmp/fmnist_gen
    python -m seqjax.main --config configs/image_fashion_mnist.py:smoke --workdir /tmp/fm_smoke
    python -m seqjax.main --config configs/image_fashion_mnist.py --workdir /tmp/fm_strided \\
        --config.model.attention=sparse_strided

Each 28x28 grayscale image is 784 tokens in raster order (one per 8-bit pixel; ids 0..255,
256 = BOS), predicted left to right; the loss is reported as bits/dim (nats / ln 2 per
pixel). The files are read from ``../shared/data/fashion_mnist`` (``data.manual_dir`` or env
``SEQJAX_DATA_DIR``); validation is the last 5,000 training images, test the 10,000 t10k.

``sweep()`` is the study: dense, strided (stride 28 = one image row, §4.1) and fixed
(stride 28, c = 7) attention with the same model and steps; the paper's CIFAR-10 finding is
strided ~ dense quality at a fraction of the cost, fixed slightly worse on images.
``experiments/images/`` runs it. The default is a CPU-sized model (4 layers, width 128,
axial row + column positions); ``smoke`` runs a few steps in the test suite. The paper's
CIFAR-10 model (128 layers, width 256, 2 heads, strided, stride 96 = one row of 32 RGB
pixels, dropout 0.25: 2.80 bits/dim) is ``configs/image_fashion_mnist.py:paper`` (CIFAR-10
from ``cifar-10-python.tar.gz``; meant for accelerators).
"""

import ml_collections

from seqjax import data
from seqjax.configs import common
from seqjax.train import defaults

VARIANTS = ("default", "smoke", "paper")
MECHANISMS = ("dense", "sparse_strided", "sparse_fixed")
ROW = 28  # sub-pixels per image row (width 28 x 1 channel)


def attention_options() -> ml_collections.ConfigDict:
    """Options of every mechanism of the study (stride = one image row)."""
    return ml_collections.ConfigDict(
        {
            "dense": {"implementation": "auto"},
            "sparse_strided": {"stride": ROW, "implementation": "blocksparse"},
            "sparse_fixed": {"stride": ROW, "c": 7, "implementation": "blocksparse"},
        }
    )


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    variant = common.variant(arg, VARIANTS, "configs/image_fashion_mnist.py")
    d = data.default_config()
    d.name = "fashion_mnist"
    d.image_task = "generation"  # raster-order pixels, bits/dim (task 'image_generation')
    d.batch_size = 16
    if d.manual_dir is None:  # the offline copy beside the repository
        d.manual_dir = "../shared/data"
    c = defaults.base(d)
    c.seed = 0

    m = c.model
    m.attention = "dense"  # dense | sparse_strided | sparse_fixed (see sweep())
    m.attention_options = attention_options()
    m.num_layers = 4
    m.num_heads = 4
    m.d_model = 128
    m.max_len = 784  # one image
    m.positional = "axial"  # learned row + column embeddings (layers.AxialPositions)
    m.dropout_rate = 0.0

    o = c.optimizer
    o.learning_rate = 1e-3
    o.warmup_steps = 100

    t = c.train
    t.num_steps = 2000
    t.eval_every = 500
    t.eval_max_batches = 20  # during training; the final test pass reads the whole split
    t.checkpoint_every = 500
    # no end-of-run grid in the current directory: every evaluation writes
    # <workdir>/samples/step_XXXXXX.png and a TensorBoard image (config.eval.pictures)
    t.sample_length = 0
    c.eval.num_pictures = 16

    if variant == "smoke":  # seconds on a 2-core CPU
        m.num_layers, m.num_heads, m.d_model = 1, 2, 32
        d.batch_size = 4
        o.warmup_steps = 2
        t.num_steps = 4
        t.eval_every = 2
        t.eval_max_batches = 1
        t.checkpoint_every = 2
        t.final_eval = False
        t.sample_length = 0
    elif variant == "paper":  # Child et al. 2019 Table 1: CIFAR-10 (accelerators only)
        d.name = "cifar10"  # cifar-10-python.tar.gz in data.manual_dir (or downloaded)
        m.max_len = 3072  # 32 x 32 x 3 sub-pixels
        m.num_layers, m.num_heads, m.d_model = 128, 2, 256
        m.attention = "sparse_strided"
        for name in ("sparse_strided", "sparse_fixed"):
            m.attention_options[name].stride = 96  # one row: 32 pixels x 3 sub-pixels
        m.attention_options.sparse_fixed.c = 24
        m.dropout_rate = 0.25
        m.remat = True
        d.batch_size = 16
        t.num_steps = 120_000
    return c


def sweep():
    """Sparse Transformer Table 1's comparison: one job per attention pattern."""
    return [{"config.model.attention": name} for name in MECHANISMS]
