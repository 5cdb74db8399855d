"""Transformer-XL's word-level WikiText-103 models (Dai et al. 2019, §4, Table 1) with
adaptive input and adaptive softmax, for accelerators.

    python -m seqjax.main --config configs/transformer_xl_wt103.py:wt103_base --workdir W
    python -m seqjax.main --config configs/transformer_xl_wt103.py:wt103_large --workdir W
    python -m seqjax.evaluate --workdir W --split test   # base: tgt 64, mem 640, clamp 400

Expected (Dai et al. 2019, Table 1, test perplexity): ``wt103_base`` (151M parameters)
24.0, ``wt103_large`` (257M) 18.3. Not run in seqjax (no accelerator time so far): the
numbers are the target, not a measurement. Data: ``wikitext-103-v1.zip`` in
``config.data.manual_dir`` (or downloaded); ``data.vocab = "words"`` builds Transformer-XL's
vocabulary (every training word, ``<eos>`` at line ends: 267,735 ids).

Hyper-parameters of the reference scripts (``run_wt103_base.sh`` / ``run_wt103_large.sh``):
base 16 layers, d 410, 10 heads x 41, d_inner 2100, dropout 0.1, tgt_len = mem_len = 150,
batch 60, Adam 2.5e-4 cosine, clip 0.25, 200k steps, adaptive softmax/input with cutoffs
20000, 40000, 200000, div_val 1; evaluation tgt_len 64, mem_len 640, clamp_len 400,
same_length. Large: 18 layers, d 1024, 16 heads x 64, d_inner 4096, dropout 0.2, dropatt
0.2, tgt_len = mem_len = 384, batch 128, 16k warm-up steps, div_val 4; evaluation tgt_len
128, mem_len 1600, clamp_len 1000, same_length. Projections and tables tied
(``tie_weight``, ``tie_projs``).

Our choices where the paper is silent: u/v biases shared by all layers, pre-LayerNorm
blocks (seqjax.models.transformer_xl), bfloat16 compute, 400k steps for the large model.

Smokes (the pipeline, not the perplexity), both the base recipe shrunk to 2 layers:

    python -m seqjax.main --config configs/transformer_xl_wt103.py:smoke --workdir W
    python -m seqjax.main --config configs/transformer_xl_wt103.py:smoke_wt103 --workdir W

``smoke`` runs offline: the words of ``../shared/data/tinyshakespeare/input.txt``
(``data.name = "text_file"``, a vocabulary of 23,843 ids, ``<eos>`` included), adaptive cutoffs
scaled to that vocabulary (2,000 and 10,000), 20 steps and a test figure on a slice of the
test split, under a minute on a 2-core CPU. ``smoke_wt103`` is the same model on
WikiText-103: it needs ``wikitext-103-v1.zip`` in ``--config.data.manual_dir`` (or a
download; without either it ends in one sentence saying so, exit 2). Cutoffs that do not
fit the data's vocabulary are a config error (exit 2) naming the vocabulary size.

Variants (``:arg``): ``wt103_base`` (default), ``wt103_large``, ``smoke``, ``smoke_wt103``.
Every field not set here is documented in ``seqjax/train/defaults.py`` and
``seqjax/data/config.py``.
"""

import ml_collections

from seqjax import data
from seqjax.configs import common
from seqjax.train import defaults

VARIANTS = ("wt103_base", "wt103_large", "smoke", "smoke_wt103")
SMOKE_CORPUS = "tinyshakespeare/input.txt"  # under ../shared/data (SEQJAX_SHARED_DATA)
SMOKE_CUTOFFS = (2000, 10000)  # its word vocabulary has 23,843 ids


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    variant = common.variant(arg, VARIANTS, "configs/transformer_xl_wt103.py")
    d = data.default_config()
    d.name = "wikitext103"  # its own train/valid/test files
    d.vocab = "words"  # Transformer-XL's word vocabulary (seqjax/data/words.py)
    d.words_min_count = 1  # every training word
    d.lm_batching = "stream"  # contiguous streams, one per row (§3.2)
    d.seq_len = 150  # tgt_len
    d.batch_size = 60  # streams per batch
    c = defaults.base(d)
    c.seed = 0

    m = c.model
    m.kind = "transformer_xl"  # segment recurrence + relative positions
    m.mem_len = 150  # training memory per layer
    m.attention = "relative"
    m.attention_options = ml_collections.ConfigDict(
        {
            "relative": ml_collections.ConfigDict(
                {"clamp_len": -1, "same_length": False, "implementation": "auto"}
            )
        }
    )
    m.positional = "none"  # relative positions only
    m.num_layers = 16
    m.num_heads = 10
    m.d_model = 410
    m.head_dim = 41
    m.d_ff = 2100
    m.max_len = 150
    m.dropout_rate = 0.1
    m.attention_dropout_rate = 0.0
    m.dtype = "bfloat16"
    m.adaptive.enabled = True  # adaptive input + adaptive softmax (tied)
    m.adaptive.cutoffs = (20000, 40000, 200000)
    m.adaptive.div_val = 1
    m.adaptive.tie_projs = True

    o = c.optimizer
    o.name = "adam"
    o.schedule = "warmup_cosine"
    o.learning_rate = 2.5e-4
    o.warmup_steps = 0
    o.min_lr_ratio = 0.0
    o.b1 = 0.9
    o.b2 = 0.999
    o.eps = 1e-8
    o.weight_decay = 0.0
    o.grad_clip_norm = 0.25
    o.grad_accum_steps = 1  # XL: must be 1

    t = c.train
    t.num_steps = 200_000
    t.log_every = 200
    t.eval_every = 4000
    t.eval_max_batches = 100
    t.eval_batch_size = 10
    t.checkpoint_every = 4000
    t.max_to_keep = 3
    t.sample_prompt = "The "
    t.sample_length = 100  # words

    e = c.eval  # the reference evaluation lengths
    e.tgt_len = 64
    e.mem_len = 640
    e.clamp_len = 400
    e.same_length = True

    if variant == "wt103_large":
        d.seq_len = 384
        d.batch_size = 128
        m.mem_len = 384
        m.max_len = 384
        m.num_layers = 18
        m.num_heads = 16
        m.d_model = 1024
        m.head_dim = 64
        m.d_ff = 4096
        m.dropout_rate = 0.2
        m.attention_dropout_rate = 0.2
        m.adaptive.div_val = 4
        o.warmup_steps = 16_000
        t.num_steps = 400_000
        e.tgt_len = 128
        e.mem_len = 1600
        e.clamp_len = 1000
    if variant in ("smoke", "smoke_wt103"):
        d.seq_len = 32
        d.batch_size = 8
        m.mem_len = 32
        m.max_len = 32
        m.num_layers = 2
        m.num_heads = 4
        m.d_model = 64
        m.head_dim = 16
        m.d_ff = 256
        m.dtype = "float32"
        t.num_steps = 40
        t.log_every = 10
        t.eval_every = 20
        t.eval_max_batches = 2
        t.eval_batch_size = 8
        t.checkpoint_every = 20
        t.sample_length = 16
        e.tgt_len = 16
        e.mem_len = 64
        e.clamp_len = 64
    if variant == "smoke":  # offline: the shared data's words, cutoffs that fit them
        d.name = "text_file"
        d.path = common.shared_data_file(SMOKE_CORPUS)
        m.adaptive.cutoffs = SMOKE_CUTOFFS
        t.num_steps = 20
        t.eval_every = 10
        t.checkpoint_every = 10
        t.test_max_batches = 2
    return c
