"""BART denoising pre-training (Lewis et al. 2020): an encoder-decoder Transformer learns to
reconstruct documents of tiny Shakespeare (``../shared/data``, characters) from their
noised form (``data.objective='denoising'``, ``seqjax.data.bart_noise``).

    python -m seqjax.main --config configs/bart.py:smoke --workdir /tmp/bart_smoke
    python -m seqjax.main --config configs/bart.py --workdir /tmp/bart
    python -m seqjax.main --config configs/bart.py:noise=rotation,smoke --workdir /tmp/bart_rot

The encoder reads the noised document, the decoder is trained to write the clean one
(``seq2seq`` task: cross-entropy over the document's ids; evaluation reports the
reconstruction NLL and perplexity). Documents are whole lines of ``max_target_len - 2``
character windows, ``[BOS] line \\n ... line \\n [EOS]``; the newline separates the sentences
sentence permutation shuffles. Ids: characters + 1 (0 = padding), then ``<mask>``, [BOS],
[EOS].

Variants (``:arg``, comma-separated): ``noise=<name>`` (``infilling`` default: spans of
Poisson(3.5) words covering 30 % of the words, one ``<mask>`` each; also ``masking``,
``deletion``, ``permutation``, ``rotation``, ``infilling+permutation``, the paper's final
choice; any '+' combination through ``--config.data.noise``), ``smoke`` (2 + 2 layers x 64
wide, 64-character documents, 120 steps: about a minute on 2 CPU cores), ``study`` (the
model of ``experiments/bart_noise_ablation``: 2 + 2 layers x 64, 96-character documents,
batch 16, 250 steps).
The default is a CPU-scale model (4 + 4 layers x 256, 20,000 steps). Layout as BART's:
post-LN, GELU, learned positions, one shared and tied embedding (BART checkpoints import
through ``seqjax.convert``: ``BartForConditionalGeneration``). Other fields:
``seqjax/train/defaults.py``, ``seqjax/data/config.py``.
"""

import ml_collections

from seqjax import data
from seqjax.configs import common
from seqjax.train import defaults

NOISES = ("infilling", "masking", "deletion", "permutation", "rotation", "infilling+permutation")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    a = common.parse_args(arg, "configs/bart.py", flags=("smoke", "study"),
                          options={"noise": NOISES}, defaults={"noise": "infilling"})  # fmt: skip
    small = a["smoke"] or a["study"]
    d = data.default_config()
    d.name = "text_file"
    d.path = common.shared_data_file("tinyshakespeare/input.txt")
    d.vocab = "chars"
    d.objective = "denoising"  # BART's noises (seqjax.data.bart_noise)
    d.noise = a["noise"]
    d.noise_ratio = 0.3  # §5: 30 % of the words
    d.noise_lambda = 3.5  # §3.1: span lengths ~ Poisson(3.5)
    n = 64 if a["smoke"] else 96 if a["study"] else 128  # ids per document, BOS/EOS included
    d.max_source_len = d.max_target_len = n
    d.batch_size = 16 if small else 32
    c = defaults.base(d)
    c.seed = 0

    m = c.model
    m.family = "encoder_decoder"
    m.attention = m.decoder_attention = "dense"
    m.num_layers = m.decoder_layers = 2 if small else 4
    m.d_model = 64 if small else 256
    m.num_heads = 4
    m.d_ff = 4 * m.d_model
    m.max_len = n
    m.norm_position = "post"  # BART: post-LN, as BERT
    m.positional = "learned"
    m.share_embeddings = m.tie_embeddings = True
    # BART's layout options (Lewis et al. 2020, as its checkpoints have them; seqjax.convert.bart):
    # a LayerNorm on the embeddings, GELU, biased projections and a final logits bias. The
    # committed noise-ablation study (``:study``) was measured without them and keeps that.
    if not a["study"]:
        m.layout = ml_collections.ConfigDict(dict(
            embed_norm=True, activation="gelu", attention_bias=True, final_logits_bias=True,
            norm_eps=1e-5,
        ))  # fmt: skip
    m.dropout_rate = 0.0 if small else 0.1
    m.attention_dropout_rate = 0.0

    o = c.optimizer
    o.learning_rate = 1e-3 if small else 5e-4
    o.warmup_steps = 20 if small else 1000
    o.weight_decay = 0.01
    o.grad_clip_norm = 1.0

    t = c.train
    t.num_steps = 120 if a["smoke"] else 250 if a["study"] else 20_000
    t.log_every = 20
    t.eval_every = 60 if a["smoke"] else 200 if a["study"] else 2000
    t.eval_max_batches = 4 if small else 50
    t.eval_batch_size = 32
    t.checkpoint_every = t.num_steps if small else 2000
    t.test_max_batches = 4 if small else 0
    t.label_smoothing = 0.0  # the reconstruction NLL is the loss
    t.sample_length = 0  # no text sample (the source would need a <mask> id in a prompt)
    c.eval.decode_metrics = False  # reconstruction BLEU by beam search: off (slow on CPU)
    return c
