"""Reformer character LM (Kitaev et al. 2020): LSH attention, reversible layers, chunked FF.

    python -m seqjax.main --config configs/lsh_lm.py --workdir /tmp/lsh_lm
    python -m seqjax.main --config configs/lsh_lm.py:mixed --workdir /tmp/lsh_mixed
    python -m seqjax.main --config configs/lsh_lm.py:smoke --workdir /tmp/lsh_lm_smoke

Variants (``configs/lsh_lm.py:<variant>``):
  * ``default``: every layer LSH (4 hash rounds, chunks of 64, one chunk before), reversible
    layers, feed-forward in chunks of 256 positions, length 1024 characters of the Python
    standard library (no download).
  * ``mixed``: layers alternate LSH and dense attention (``model.attention="lsh,dense"``),
    as the paper's enwik8 ablations mix them; otherwise as ``default``.
  * ``smoke``: a tiny ``default`` that runs in about a minute on a 2-core CPU (both
    mechanisms, reversible; checks that everything wires up, the loss goes down).

Expected (2-core CPU, not yet measured end to end when this config was written): ``smoke``
ends with a training loss well below its initial ~ln(vocab) (about 4.5 nats); ``default``
and ``mixed`` should approach the dense ``configs/char_lm.py`` at equal steps (the paper
reports LSH-4 within a few hundredths of a bit of full attention on enwik8, §5). The
Reformer's rotations are drawn from the ``"lsh"`` RNG stream when the trainer provides one,
otherwise from the ``"dropout"`` stream in training (fresh every step) and a fixed per-layer
key in evaluation (see ``seqjax/attention/lsh.py``).
"""

import ml_collections

from seqjax import data
from seqjax.configs import common
from seqjax.train import defaults

VARIANTS = ("default", "mixed", "smoke")


def get_config(arg: str | None = None):
    variant = common.variant(arg, VARIANTS, "configs/lsh_lm.py")
    d = data.default_config()
    d.name = "pystdlib"  # this Python's stdlib .py files: embedded, no download
    d.vocab = "chars"  # one token per character
    d.seq_len = 1024  # characters per row: long enough for LSH's chunks to matter
    d.batch_size = 8  # global batch (rows)
    c = defaults.base(d)
    c.seed = 0  # init, dropout and (without an "lsh" stream) hashing seed

    m = c.model
    m.attention = "lsh" if variant != "mixed" else "lsh,dense"  # per-layer cycle
    m.attention_options.lsh = ml_collections.ConfigDict(
        dict(
            n_hashes=4,  # hash rounds R (Table 2: 4 rounds ~ full attention on copying)
            n_buckets=32,  # buckets per round K (about 2 * seq_len / chunk_len)
            chunk_len=64,  # positions per chunk of the sorted order
            n_chunks_before=1,  # each chunk also attends to the previous chunk
            n_chunks_after=0,  # ... and to no later chunk (causal LM)
            seed=0,  # rotation seed when no RNG stream is available (evaluation)
        )
    )
    # Dense layers of the "mixed" variant: blockwise (memory linear in length).
    m.attention_options.dense.implementation = "chunked"
    m.num_layers = 4  # reversible layers
    m.num_heads = 4  # attention heads
    m.d_model = 128  # model width
    m.max_len = 1024  # = seq_len
    m.dropout_rate = 0.0  # residual dropout (recomputed identically in reversible layers)
    m.reversible = True  # y1 = x1 + Attn(x2), y2 = x2 + FF(y1); inputs recomputed (§3)
    m.ff_chunk_size = 256  # feed-forward over 256 positions at a time (§3 "Chunking")

    o = c.optimizer
    o.learning_rate = 2e-3  # peak learning rate
    o.warmup_steps = 100  # linear warm-up steps
    o.min_lr_ratio = 0.05  # cosine end value

    t = c.train
    t.num_steps = 2000  # optimizer updates
    t.log_every = 10  # metrics.jsonl / TensorBoard every 10 steps
    t.eval_every = 500  # validation every 500 steps
    t.eval_max_batches = 5  # validation batches per evaluation
    t.checkpoint_every = 500  # save every 500 steps (and at the end / on SIGTERM)
    t.sample_prompt = "def "  # printed sample at the end
    t.sample_length = 0  # no sampling: LSH has no KV-cache decoding

    if variant == "smoke":  # about a minute on a 2-core CPU
        d.seq_len = 128
        d.batch_size = 8
        m.attention = "lsh,dense"  # both mechanisms, each in one layer
        m.attention_options.lsh.n_hashes = 2
        m.attention_options.lsh.n_buckets = 8
        m.attention_options.lsh.chunk_len = 32
        m.num_layers = 2
        m.d_model = 64
        m.max_len = 128
        m.ff_chunk_size = 64
        o.warmup_steps = 10
        t.num_steps = 40
        t.eval_every = 20
        t.eval_max_batches = 2
        t.checkpoint_every = 20
    return c
