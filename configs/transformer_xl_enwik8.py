"""The paper's Transformer-XL character models on enwik8 and text8 (Dai et al. 2019, §4),
for accelerators.

    python -m seqjax.main --config configs/transformer_xl_enwik8.py:enwik8_12l --workdir W
    python -m seqjax.main --config configs/transformer_xl_enwik8.py:enwik8_24l --workdir W
    python -m seqjax.main --config configs/transformer_xl_enwik8.py:text8 --workdir W
    python -m seqjax.evaluate --workdir W --split test      # tgt 80, mem 2100, clamp 820

Expected (Dai et al. 2019, test split, §4, Tables 2 and 3): ``enwik8_12l`` (41M parameters)
1.06 bits per character after 400k steps, ``enwik8_24l`` (277M) 0.99, ``text8`` 1.08. Not
yet run in seqjax (no accelerator time so far): the numbers are the target, not a
measurement.

From Dai et al. 2019 (§4 and its reference scripts): 12L, d=512, 8 heads x 64, d_inner 2048,
dropout 0.1, tgt_len = mem_len = 512, batch 22, Adam 2.5e-4 with cosine decay, gradient clip
0.25, 400k steps; 24L, d=1024, 8 heads x 128, d_inner 3072, dropout 0.15, tgt = mem = 768.
Evaluation: tgt_len 80, mem_len 2100, clamp_len 820, same_length. The paper gives text8 the
24-layer enwik8 model; we use exactly ``enwik8_24l`` on text8's 27 characters.

Our choices where the paper is silent: plain Adam (weight decay 0, beta2 0.999), no warm-up,
cosine to 0, attention dropout 0, u/v biases shared by all layers (no untie_r), batch 22 for
the 24-layer models too, bfloat16 compute, 16 evaluation streams. Pre-LayerNorm blocks (the
reference's ``pre_lnorm`` variant; seqjax.models.transformer_xl). The data-parallel size must
divide the batch: on 8 devices use ``--config.data.batch_size=24`` (or ``--config.mesh.data=2
--config.mesh.fsdp=1`` with the rest idle).

Variants (``:arg``): ``enwik8_12l`` (default), ``enwik8_24l``, ``text8``, ``smoke`` (the
12-layer recipe shrunk to 2 layers / 60 steps, same data; needs the enwik8 zip in
``config.data.manual_dir`` or a download). Every field not set here is documented in
``seqjax/train/defaults.py`` and ``seqjax/data/config.py``.
"""

import ml_collections

from seqjax import data
from seqjax.configs import common
from seqjax.train import defaults

VARIANTS = ("enwik8_12l", "enwik8_24l", "text8", "smoke")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    variant = common.variant(arg, VARIANTS, "configs/transformer_xl_enwik8.py")
    d = data.default_config()
    d.name = "text8" if variant == "text8" else "enwik8"  # 90M / 5M / 5M split (standard)
    d.vocab = "chars" if variant == "text8" else "bytes"  # text8: 27 characters; enwik8: bytes
    d.lm_batching = "stream"  # contiguous streams, one per row (§3.2)
    d.seq_len = 512  # tgt_len during training
    d.batch_size = 22  # streams per batch
    c = defaults.base(d)
    c.seed = 0  # init and dropout seed

    m = c.model
    m.kind = "transformer_xl"  # segment recurrence + relative positions
    m.mem_len = 512  # training memory per layer
    m.attention = "relative"  # §3.3
    m.attention_options = ml_collections.ConfigDict(
        {
            "relative": ml_collections.ConfigDict(
                # auto: the blockwise relative attention (no [T, S] scores; equal to the
                # materialized one in values and gradients) unless attention dropout is on.
                {"clamp_len": -1, "same_length": False, "implementation": "auto"}
            )
        }
    )  # training: no clamping, plain causal mask over [memory; segment]
    m.positional = "none"  # relative positions only
    m.num_layers = 12  # blocks
    m.num_heads = 8  # heads
    m.d_model = 512  # width
    m.head_dim = 64  # per head
    m.d_ff = 2048  # d_inner
    m.max_len = 512  # = seq_len (no position table in XL; only validated)
    m.dropout_rate = 0.1  # residual/embedding dropout
    m.attention_dropout_rate = 0.0  # dropatt (not given in the paper: 0)
    m.dtype = "bfloat16"  # compute dtype on accelerators (parameters float32)

    o = c.optimizer
    o.name = "adam"  # plain Adam (no weight decay; seqjax.train.optim)
    o.schedule = "warmup_cosine"  # cosine decay (here without warm-up)
    o.learning_rate = 2.5e-4  # Adam peak
    o.warmup_steps = 0  # no warm-up (our choice)
    o.min_lr_ratio = 0.0  # cosine to 0 at num_steps
    o.b1 = 0.9  # Adam beta1
    o.b2 = 0.999  # Adam beta2 (plain Adam)
    o.eps = 1e-8  # Adam epsilon
    o.weight_decay = 0.0  # plain Adam: no decay
    o.grad_clip_norm = 0.25  # global-norm clip (paper)
    o.grad_accum_steps = 1  # XL: must be 1

    t = c.train
    t.num_steps = 400_000  # optimizer updates
    t.log_every = 200  # metrics.jsonl / TensorBoard
    t.eval_every = 4000  # validation every 4000 steps...
    t.eval_max_batches = 100  # ...on 100 segments of every evaluation stream
    t.eval_batch_size = 16  # evaluation streams (a multiple of the data-parallel size)
    t.checkpoint_every = 4000  # save (memories included)
    t.max_to_keep = 3  # newest checkpoints kept
    t.sample_prompt = "The "  # printed at the end
    t.sample_length = 500  # characters/bytes

    e = c.eval  # the paper's evaluation lengths
    e.tgt_len = 80  # segment
    e.mem_len = 2100  # memory
    e.clamp_len = 820  # distances above 820 share one embedding
    e.same_length = True  # every query sees exactly mem_len keys

    if variant in ("enwik8_24l", "text8"):
        d.seq_len = 768  # tgt_len
        m.mem_len = 768  # memory
        m.max_len = 768
        m.num_layers = 24
        m.d_model = 1024
        m.head_dim = 128  # 8 heads x 128
        m.d_ff = 3072
        m.dropout_rate = 0.15
    if variant == "smoke":  # shape check of the recipe: seconds on an accelerator
        d.seq_len = 64
        d.batch_size = 8
        m.mem_len = 64
        m.max_len = 64
        m.num_layers = 2
        m.d_model = 64
        m.head_dim = 16
        m.num_heads = 4
        m.d_ff = 256
        m.dtype = "float32"
        t.num_steps = 60
        t.log_every = 10
        t.eval_every = 30
        t.eval_max_batches = 2
        t.eval_batch_size = 8
        t.checkpoint_every = 30
        t.sample_length = 64
        e.tgt_len = 32
        e.mem_len = 128
        e.clamp_len = 64
    return c
