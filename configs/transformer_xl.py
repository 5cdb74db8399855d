"""Transformer-XL character LM on tiny shakespeare, sized for a 2-core CPU (Dai et al. 2019).

    python -m seqjax.main --config configs/transformer_xl.py --workdir /tmp/xl_shakespeare
    python -m seqjax.main --config configs/transformer_xl.py:smoke --workdir /tmp/xl_smoke
    python -m seqjax.evaluate --workdir /tmp/xl_shakespeare --split test \
        --tgt_len 32 --mem_len 256 --clamp_len 128 --same_length true
    python -m seqjax.sample --workdir /tmp/xl_shakespeare --prompt "ROMEO:" --length 300

Segment recurrence (§3.2): each of the ``batch_size`` rows is a contiguous stream of the
training text (``data.lm_batching="stream"``); the hidden states of the last ``mem_len``
positions of every layer are kept in the train state (checkpointed with it) and attended to
by the next segment; relative positions (§3.3, attention "relative") replace absolute ones.
Evaluation reads the test split as streams with its own lengths (``config.eval``: segments
of 32 with a 192-position memory, same_length) and reports bits per character. The paper's
enwik8/text8 models are in ``configs/transformer_xl_enwik8.py``.

The model is the size of ``configs/shakespeare_char.py`` (nanoGPT's CPU baby GPT: 4 layers,
4 heads, width 128, batch 12, 2,000 steps, lr 1e-3 cosine to 1e-4) with segments of 64
characters plus a 64-position memory instead of a 64-character window, so their bits per
character compare directly (``experiments/transformer_xl/README.md``).

Expected (measured on the shared 2-core CPU under load 10-15, jax 0.10.2): ``default``
trains in about 20 minutes and ends at 1.64 nats/char (2.37 bits per character) on the
whole validation split and 1.74 nats (2.51 bpc) on test, against 1.88 nats on validation for
the 64-character window model of ``configs/shakespeare_char.py`` with the same budget;
``smoke`` (60 steps, 2 layers) takes about a minute and ends near 4.1 bpc on test.
The text is ``../shared/data/tinyshakespeare/input.txt``
beside the repository (or ``$SEQJAX_SHARED_DATA/tinyshakespeare/input.txt``), split 90/5/5.

Variants (``:arg``): ``default``, ``smoke``. Every field not set here is documented in
``seqjax/train/defaults.py`` and ``seqjax/data/config.py``.
"""

import ml_collections

from seqjax import data
from seqjax.configs import common
from seqjax.train import defaults

VARIANTS = ("default", "smoke")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    variant = common.variant(arg, VARIANTS, "configs/transformer_xl.py")
    d = data.default_config()
    d.name = "text_file"  # tiny shakespeare (1.1M characters), split 90/5/5
    d.path = common.shared_data_file("tinyshakespeare/input.txt")  # the shared copy
    d.vocab = "chars"  # 65 characters
    d.lm_batching = "stream"  # row r continues its own stream every step (needed by XL)
    d.seq_len = 64  # tgt_len: characters per training segment
    d.batch_size = 12  # streams (rows) per batch
    c = defaults.base(d)
    c.seed = 0  # init and dropout seed

    m = c.model
    m.kind = "transformer_xl"  # seqjax.models.transformer_xl.TransformerXL
    m.mem_len = 64  # hidden states kept per layer and carried to the next segment
    m.attention = "relative"  # Transformer-XL relative attention (§3.3)
    m.attention_options = ml_collections.ConfigDict(
        {
            "relative": ml_collections.ConfigDict(
                # auto: the blockwise relative attention (no [T, S] scores; equal to the
                # materialized one in values and gradients) unless attention dropout is on.
                {"clamp_len": -1, "same_length": False, "implementation": "auto"}
            )
        }
    )  # training: every distance its own embedding; queries see memory + causal segment
    m.positional = "none"  # no absolute positions: relative ones in every layer
    m.num_layers = 4  # blocks
    m.num_heads = 4  # heads
    m.d_model = 128  # width
    m.d_ff = 512  # feed-forward width
    m.max_len = 64  # = seq_len (XL has no position table; only validated)
    m.dropout_rate = 0.0  # no dropout (as the CPU baseline)
    m.attention_dropout_rate = 0.0  # no attention dropout

    o = c.optimizer
    o.learning_rate = 1e-3  # peak
    o.warmup_steps = 100  # linear warm-up
    o.min_lr_ratio = 0.1  # cosine to 1e-4
    o.b2 = 0.99  # Adam beta2
    o.weight_decay = 0.1  # AdamW decay on matrices
    o.grad_clip_norm = 1.0  # global-norm clip
    o.grad_accum_steps = 1  # XL: the memory moves on with every batch (must be 1)

    t = c.train
    t.num_steps = 2000  # optimizer updates
    t.log_every = 20  # metrics.jsonl / TensorBoard
    t.eval_every = 500  # validation every 500 steps...
    t.eval_max_batches = 50  # ...on the first 50 segments of each validation stream
    t.eval_batch_size = 8  # evaluation streams
    t.checkpoint_every = 500  # save (with the memories) every 500 steps
    t.sample_prompt = "ROMEO:"  # printed sample at the end
    t.sample_length = 300  # characters, decoded with the memory as the cache

    e = c.eval  # Transformer-XL evaluation lengths (Dai et al. evaluate longer than they train)
    e.tgt_len = 32  # characters per evaluated segment
    e.mem_len = 192  # memory at evaluation (3x training)
    e.clamp_len = -1  # no clamping at this length
    e.same_length = True  # every query sees exactly mem_len keys (the paper's evaluation)

    if variant == "smoke":  # about a minute on a 2-core CPU
        d.seq_len = 32
        d.batch_size = 8
        m.mem_len = 32
        m.num_layers = 2
        m.d_model = 64
        m.d_ff = 256
        m.max_len = 32
        o.learning_rate = 3e-3  # few steps: a higher peak
        o.warmup_steps = 10
        t.num_steps = 60
        t.log_every = 10
        t.eval_every = 30
        t.eval_max_batches = 4
        t.checkpoint_every = 30
        t.sample_length = 64
        e.tgt_len = 16
        e.mem_len = 64
    return c
