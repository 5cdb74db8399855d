"""Character-level language model on the Python standard library source (no download).

    python -m seqjax.main --config configs/char_lm.py --workdir /tmp/char_lm
    python -m seqjax.main --config configs/char_lm.py:smoke --workdir /tmp/char_lm_smoke

Expected (2-core CPU, see experiments/train_throughput/README.md): the default variant
reaches < 2.0 bits per character on the pystdlib test split in <= 10 minutes; ``smoke``
runs in about a minute and ends near 3 bits per character.

Variants (``configs/char_lm.py:<variant>``): ``default`` and ``smoke``. Any field can be
overridden: ``--config.model.num_layers=4 --config.data.name=text_file
--config.data.path=../shared/data/tinyshakespeare/input.txt``.
Every field not set here is documented in ``seqjax/train/defaults.py`` and
``seqjax/data/config.py``.
"""

from seqjax import data
from seqjax.configs import common
from seqjax.train import defaults

VARIANTS = ("default", "smoke")


def get_config(arg: str | None = None):
    variant = common.variant(arg, VARIANTS, "configs/char_lm.py")
    d = data.default_config()
    d.name = "pystdlib"  # this Python's stdlib .py files: embedded, no download
    d.vocab = "chars"  # one token per character (the training split's characters)
    d.seq_len = 128  # characters of context per row
    d.batch_size = 32  # global batch (rows)
    c = defaults.base(d)
    c.seed = 0  # init and dropout seed

    m = c.model
    m.attention = "dense"  # causal full attention (the LM makes it causal)
    m.num_layers = 2  # Transformer blocks
    m.num_heads = 4  # attention heads
    m.d_model = 128  # model width
    m.max_len = 256  # = seq_len; also the longest prompt + sample
    m.dropout_rate = 0.0  # no dropout: far less than one epoch of 28M characters

    o = c.optimizer
    o.learning_rate = 3e-3  # small model, short run: a high peak rate
    o.warmup_steps = 100  # linear warm-up steps
    o.min_lr_ratio = 0.05  # cosine end value = 1.5e-4

    t = c.train
    t.num_steps = 1500  # optimizer updates
    t.log_every = 10  # metrics.jsonl / TensorBoard every 10 steps
    t.eval_every = 250  # validation (eval_max_batches batches) every 250 steps
    t.eval_max_batches = 10  # 10 x 256 windows of validation during training
    t.eval_batch_size = 256  # windows per evaluation batch
    t.checkpoint_every = 250  # save every 250 steps (and at the end / on SIGTERM)
    t.sample_prompt = "def "  # printed sample at the end
    t.sample_length = 200  # characters

    if variant == "smoke":  # about a minute on a 2-core CPU
        d.seq_len = 64
        d.batch_size = 16
        m.num_layers = 2
        m.d_model = 64
        m.max_len = 256
        o.warmup_steps = 10
        t.num_steps = 60
        t.eval_every = 30
        t.eval_max_batches = 2
        t.eval_batch_size = 512
        t.checkpoint_every = 30
        t.sample_length = 64
    return c


def sweep():
    """Points of the study (``launch/`` runs one job per dict of field overrides)."""
    return [
        {"config.model.num_layers": n, "config.model.d_model": e}
        for n, e in ((2, 128), (3, 192), (4, 256))
    ]
