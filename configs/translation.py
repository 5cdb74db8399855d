"""Translation with the encoder-decoder Transformer (Vaswani et al. 2017).

    python -m seqjax.main --config configs/translation.py:smoke --workdir workdirs/mt_smoke
    python -m seqjax.translate --workdir workdirs/mt_smoke --source "File not found"

Variants (``configs/translation.py:<variant>``):

- ``smoke``: a tiny model on software_l10n en-de (``../shared/data``), about a minute on 2
  CPU cores; BLEU/chrF of beam search in ``result.json``.
- ``cpu`` (default): the CPU-scale model of ``experiments/translation`` on the same data.
- ``reversible``, ``lsh_encoder``, ``sparse_encoder``: ``cpu`` with the Reformer's
  reversible stacks (Kitaev et al. 2020 §5), an LSH encoder, a Sparse Transformer (strided)
  encoder.
- ``copy``: the algorithmic copy task (no data file), for smoke tests.
- ``base`` and ``big``: Vaswani et al. 2017 Table 3 rows on WMT14 En-De (newstest2013
  validation, newstest2014 test; downloaded by TFDS, or ``--config.data.manual_dir``):
  N = 6, d = 512 / 1024, h = 8 / 16, d_ff = 2048 / 4096, P_drop = 0.1 / 0.3, eps_ls = 0.1,
  Adam beta = (0.9, 0.98), eps = 1e-9, inverse-sqrt warm-up 4000 (§5.3), a shared
  vocabulary of 37,000 (§5.1: BPE), beam 4 and alpha 0.6 (§6.1). They need accelerators.

The data file is ``config.data.path``: ``$SEQJAX_SHARED_DATA/software_l10n/en-de.jsonl.gz``,
else ``../shared/data/...`` beside the repository; en-fr works the same
(``--config.data.path=.../en-fr.jsonl.gz``: the target language is taken from the file).
"""

import os
from pathlib import Path

from seqjax import data
from seqjax.configs import common
from seqjax.train import defaults

VARIANTS = (
    "cpu",
    "smoke",
    "reversible",
    "lsh_encoder",
    "sparse_encoder",
    "copy",
    "base",
    "big",
)


def l10n_path(pair: str = "en-de") -> str:
    """The software_l10n file of ``pair``: under ``$SEQJAX_SHARED_DATA`` if set, else in
    ``shared/data`` beside the repository."""
    env = os.environ.get("SEQJAX_SHARED_DATA")
    root = Path(env) if env else Path(__file__).resolve().parents[1].parent / "shared" / "data"
    return str(root / "software_l10n" / f"{pair}.jsonl.gz")


def get_config(arg: str | None = None):
    variant = common.variant(arg, VARIANTS, "configs/translation.py")
    d = data.default_config()
    d.name = "translation_jsonl"  # pairs of a JSONL file (software_l10n format)
    d.path = l10n_path("en-de")
    d.source_lang = "en"  # target language: the file's other field ('de')
    d.vocab = "sentencepiece"  # joint source+target subwords trained on the training split
    d.spm_model_type = "bpe"
    d.vocab_size = 2000  # CPU scale (the paper: ~37K on WMT14)
    d.max_source_len = 48  # ids + EOS; longer training pairs are left out (logged)
    d.max_target_len = 48
    d.batch_size = 32  # sentence pairs per step (global)
    c = defaults.base(d)
    c.seed = 0

    m = c.model
    m.attention = "dense"  # encoder self-attention (any mechanism)
    m.decoder_attention = "dense"  # decoder self-attention (made causal)
    m.num_layers = 2  # encoder layers
    m.decoder_layers = 2
    m.num_heads = 4
    m.d_model = 128
    m.d_ff = 512
    m.max_len = 48  # >= data.max_source_len and max_target_len
    m.dropout_rate = 0.1  # P_drop (§5.4)
    m.attention_dropout_rate = 0.0
    m.norm_position = "post"  # the paper's LayerNorm(x + Sublayer(x))
    m.positional = "sinusoidal"
    m.share_embeddings = True  # one vocabulary for source and target
    m.tie_embeddings = True  # output projection = target embedding (§3.4)

    o = c.optimizer
    o.name = "adam"
    o.schedule = "inverse_sqrt"  # §5.3
    o.b1, o.b2, o.eps = 0.9, 0.98, 1e-9  # §5.3
    o.weight_decay = 0.0
    o.warmup_steps = 400
    o.learning_rate = 2e-3  # ~1.4x the paper's (d * warmup)^-0.5 peak at d=128: a short run
    o.grad_clip_norm = 1.0

    t = c.train
    t.num_steps = 2000
    t.label_smoothing = 0.1  # eps_ls (§5.4)
    t.log_every = 20
    t.eval_every = 1000
    t.eval_max_batches = 4  # validation loss and BLEU on 4 x 64 pairs during training
    t.eval_batch_size = 64
    t.checkpoint_every = 500
    t.sample_prompt = "Cannot open the file."  # translated at the end
    t.sample_length = 1  # > 0: translate the prompt at the end (its length is the model's)
    c.eval.beam_size = 4  # §6.1
    c.eval.length_penalty = 0.6

    if variant in ("smoke", "copy"):  # a tiny model: 2 + 2 layers of width 64
        d.batch_size = 32
        m.num_layers = m.decoder_layers = 2
        m.d_model, m.d_ff, m.num_heads = 64, 128, 4
        m.dropout_rate = 0.0
        o.warmup_steps = 50
        o.learning_rate = 3e-3
        t.eval_max_batches = 2

    if variant == "smoke":  # about a minute on a 2-core CPU
        d.vocab_size = 1000
        d.max_source_len = d.max_target_len = m.max_len = 32
        t.num_steps = 100
        t.eval_every = 50
        t.eval_batch_size = 32
        t.checkpoint_every = 50
        c.eval.beam_size = 2
    elif variant == "reversible":  # the Reformer's encoder-decoder (Kitaev et al. 2020, §5)
        m.reversible = True
        m.norm_position = "pre"  # a reversible layer cannot be post-LN
    elif variant == "lsh_encoder":  # Reformer LSH attention in the encoder
        m.attention = "lsh"
        m.attention_options.lsh = {"chunk_len": 16, "n_hashes": 2}
    elif variant == "sparse_encoder":  # Sparse Transformer strided pattern in the encoder
        m.attention = "sparse_strided"
        m.attention_options.sparse_strided = {"stride": 8, "implementation": "masked"}
    elif variant == "copy":  # algorithmic: target = source (no data file)
        d.name = "copy"
        d.path = None
        d.vocab = "bytes"  # unused: copy has its own symbols
        d.copy_vocab_size = 16
        d.max_source_len = d.max_target_len = m.max_len = 16
        t.num_steps = 300
        t.eval_every = 100
        t.sample_prompt = "4 5 6 7"
        t.label_smoothing = 0.0
    elif variant in ("base", "big"):  # Vaswani et al. 2017, Table 3 (base) / Table 3 "big"
        big = variant == "big"
        d.name = "wmt14_ende"
        d.path = None
        d.vocab_size = 37000  # shared source-target BPE vocabulary (§5.1)
        d.max_source_len = d.max_target_len = m.max_len = 256
        d.batch_size = 512  # ~25k source + 25k target tokens per step at WMT lengths (§5.1)
        m.num_layers = m.decoder_layers = 6
        m.d_model = 1024 if big else 512
        m.num_heads = 16 if big else 8
        m.d_ff = 4096 if big else 2048
        m.dropout_rate = 0.3 if big else 0.1
        o.warmup_steps = 4000
        o.learning_rate = (m.d_model * 4000) ** -0.5  # the paper's d^-0.5 schedule, exactly
        o.grad_clip_norm = 0.0
        t.num_steps = 300_000 if big else 100_000
        t.eval_every = 10_000
        t.eval_max_batches = 0
        t.checkpoint_every = 5_000
        m.dtype = "bfloat16"
    return c
