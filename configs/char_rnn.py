"""Karpathy's char-RNN on tiny shakespeare: a 2-layer LSTM (or GRU / Elman RNN) language
model trained with truncated backpropagation through time, its state carried from one batch
to the next (``config.model.kind="rnn"``, ``seqjax.models.rnn``).

    python -m seqjax.main --config configs/char_rnn.py --workdir /tmp/char_rnn
    python -m seqjax.main --config configs/char_rnn.py:smoke --workdir /tmp/char_rnn_smoke
    python -m seqjax.main --config configs/char_rnn.py --config.model.cell=gru --workdir /tmp/gru
    python -m seqjax.sample --workdir /tmp/char_rnn --prompt "ROMEO:" --length 300

Each of the ``batch_size`` rows is a contiguous stream of the text (``data.lm_batching=
"stream"``); a batch is ``seq_len`` characters of every stream, the BPTT window; the final
(c, h) of every layer is kept in the train state (checkpointed with it) and starts the next
batch without a gradient into it (Zaremba et al. 2014, §3; Karpathy 2015). Evaluation reads
each split as streams with the state carried across the whole split; the sampler feeds the
prompt then one character per step through the same state.

Sizes: 2 LSTM layers of 256 units (char-rnn's default depth, wider than its 128 units),
seq_len 64, batch 32, Adam 2e-3 with a cosine decay, global-norm clip 5 (as
char-rnn's ``grad_clip``); the data split as ``configs/shakespeare_char.py`` (90/5/5) so
their bits per character compare.

Variants (``:arg``): ``default``, ``smoke`` (one 64-unit LSTM layer, 60 steps: 46 s of wall
time, 10 CPU-seconds, on the shared 2-core machine under load; ends near 4 bits/char).
Every field not set here is in ``seqjax/train/defaults.py``, ``seqjax/data/config.py`` and
``seqjax.models.rnn.RNNConfig``.
"""

import ml_collections

from seqjax import data
from seqjax.configs import common
from seqjax.models import registry
from seqjax.train import defaults

VARIANTS = ("default", "smoke")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    variant = common.variant(arg, VARIANTS, "configs/char_rnn.py")
    d = data.default_config()
    d.name = "text_file"  # tiny shakespeare (1.1M characters), split 90/5/5
    d.path = common.shared_data_file("tinyshakespeare/input.txt")
    d.vocab = "chars"  # 65 characters
    d.lm_batching = "stream"  # row r continues its own stream every step (the state carries)
    d.seq_len = 64  # BPTT window: characters per training segment
    d.batch_size = 32  # streams
    c = defaults.base(d)
    c.seed = 0

    c.model = registry.model_block(
        "rnn",
        cell="lstm",  # lstm | gru | elman
        num_layers=2,  # stacked layers
        hidden_dim=256,  # state width
        embed_dim=0,  # 0: the state width
        dropout_rate=0.0,  # between layers (never on the recurrence)
        tie_embeddings=False,
    )
    c.model.kind = "rnn"  # the state carried across batches (seqjax.models.memory)

    o = c.optimizer
    o.learning_rate = 2e-3  # char-rnn's Adam rate
    o.warmup_steps = 50
    o.min_lr_ratio = 0.1
    o.weight_decay = 0.0
    o.grad_clip_norm = 5.0  # char-rnn's grad_clip
    o.grad_accum_steps = 1  # the state moves on with every batch (must be 1)

    t = c.train
    t.num_steps = 2000
    t.log_every = 20
    t.eval_every = 500
    t.eval_max_batches = 50  # segments of each validation stream
    t.eval_batch_size = 8  # validation streams
    t.checkpoint_every = 500
    t.sample_prompt = "ROMEO:"
    t.sample_length = 300  # characters, with the state as the cache

    if variant == "smoke":
        d.seq_len = 32
        d.batch_size = 8
        c.model.num_layers = 1
        c.model.hidden_dim = 64
        o.learning_rate = 1e-2
        o.warmup_steps = 5
        t.num_steps = 60
        t.log_every = 10
        t.eval_every = 30
        t.eval_max_batches = 4
        t.checkpoint_every = 30
        t.sample_length = 64
    return c
