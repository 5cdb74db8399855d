"""Character LM on tiny shakespeare with nanoGPT's small CPU model (baby GPT on a laptop).

    python -m seqjax.main --config configs/shakespeare_char.py --workdir /tmp/shakespeare_char
    python -m seqjax.main --config configs/shakespeare_char.py:smoke --workdir /tmp/shk_smoke
    python experiments/char_lm_quality/run.py     # this config + every causal mechanism

The text is ``../shared/data/tinyshakespeare/input.txt`` beside the repository (or
``$SEQJAX_SHARED_DATA/tinyshakespeare/input.txt``), split 90/5/5 by ``seqjax.data``.

Hyper-parameters are the ones nanoGPT's README gives for a laptop CPU (``train.py
config/train_shakespeare_char.py --device=cpu --block_size=64 --batch_size=12 --n_layer=4
--n_head=4 --n_embd=128 --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0``): 4 layers,
4 heads, width 128, context 64, batch 12, 2,000 iterations, AdamW lr 1e-3 (100 warm-up
steps, cosine to 1e-4), beta2 0.99, weight decay 0.1, clip 1.0, learned positions, tied
embeddings, no dropout.

Expected: nanoGPT reports a validation loss of about 1.88 nats/char; seqjax measured 1.884
on its whole validation split (``experiments/char_lm_quality/results/char_lm_cpu.md``, with
tokens/s and wall time). ``smoke`` (60 steps, 2 layers, width 64) runs in under a minute on
an idle 2-core CPU and ends near 4.1 nats/char (the test split).

Variants (``:arg``): ``default``, ``smoke``. Override the mechanism with
``--config.model.attention=sparse_fixed`` (options under ``config.model.attention_options``).
"""

import ml_collections

from seqjax import data
from seqjax.configs import common
from seqjax.train import defaults

VARIANTS = ("default", "smoke")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    variant = common.variant(arg, VARIANTS, "configs/shakespeare_char.py")
    d = data.default_config()
    d.name = "text_file"  # one local file, 90/5/5 split (nanoGPT: 90/10)
    d.path = common.shared_data_file("tinyshakespeare/input.txt")  # 1.1M characters
    d.vocab = "chars"  # 65 characters, as nanoGPT's prepare.py
    d.seq_len = 64  # nanoGPT block_size 64 (the CPU command)
    d.batch_size = 12  # nanoGPT batch_size 12 (the CPU command)
    d.lm_batching = "random"  # random windows, as nanoGPT's get_batch
    c = defaults.base(d)
    c.seed = 0  # init and data-order seed

    m = c.model
    m.attention = "dense"  # causal full attention (nanoGPT); the study swaps mechanisms
    m.num_layers = 4  # n_layer
    m.num_heads = 4  # n_head
    m.d_model = 128  # n_embd
    m.d_ff = 512  # 4 x n_embd
    m.max_len = 64  # block_size (learned position table)
    m.positional = "learned"  # nanoGPT wpe
    m.tie_embeddings = True  # nanoGPT ties wte and lm_head
    m.dropout_rate = 0.0  # dropout 0.0 on CPU
    m.attention_dropout_rate = 0.0

    o = c.optimizer
    o.learning_rate = 1e-3  # nanoGPT shakespeare_char learning_rate
    o.warmup_steps = 100  # warmup_iters
    o.min_lr_ratio = 0.1  # min_lr 1e-4 at lr_decay_iters = max_iters = 2000
    o.b1 = 0.9  # beta1
    o.b2 = 0.99  # beta2 (shakespeare_char: "make a bit bigger because tokens/iter is small")
    o.weight_decay = 0.1  # nanoGPT weight_decay (matrices only)
    o.grad_clip_norm = 1.0  # grad_clip

    t = c.train
    t.num_steps = 2000  # max_iters
    t.log_every = 50  # metrics.jsonl every 50 steps
    t.eval_every = 0  # no evaluation during training (timed run); the study evaluates after
    t.eval_max_batches = 0  # evaluations cover the whole split
    t.eval_batch_size = 256  # windows per evaluation batch
    t.final_eval = True  # test split at the end
    t.checkpoint_every = 0  # only the final checkpoint
    t.sample_prompt = "ROMEO:"  # printed sample at the end
    t.sample_length = 58  # characters: prompt + sample fit the 64-position window

    if variant == "smoke":  # seconds on a 2-core CPU
        m.num_layers = 2
        m.d_model = 64
        m.d_ff = 256
        o.warmup_steps = 10
        t.num_steps = 60
        t.log_every = 10
        t.sample_length = 0
    return c
