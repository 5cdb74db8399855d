"""Masked-LM pre-training of a bidirectional encoder and its fine-tuning (Devlin et al. 2019;
Linformer, Wang et al. 2020 §5: masked-LM perplexity against k and sharing, Fig. 3; IMDB
fine-tuning, Table 2), on the IMDB reviews' bytes or, with ``subword``, their SentencePiece BPE
tokens.

    python -m seqjax.main --config configs/mlm.py:smoke --workdir /tmp/mlm_smoke
    python -m seqjax.main --config configs/mlm.py:attention=linformer,k=128,smoke \\
        --workdir /tmp/mlm_lin
    python -m seqjax.main --config configs/mlm.py:finetune,smoke --workdir /tmp/ft \\
        --config.init_from=/tmp/mlm_smoke
    python -m seqjax.main --config configs/mlm.py:paper --workdir /tmp/mlm_paper
    python -m seqjax.main --config configs/mlm.py:subword,smoke --workdir /tmp/mlm_sw
    python -m seqjax.main --config configs/mlm.py:subword,finetune,smoke --workdir /tmp/ft_sw \\
        --config.init_from=/tmp/mlm_sw

**Which smoke shows transfer: ``subword``.** The subword smokes (the last two commands
above) fine-tune above chance and above the same fine-tune from scratch: 71.9 % against
69.7 % test accuracy after 200 + 200 steps (``subword,finetune,smoke`` with and without
``init_from``; the first 512 test reviews, ``train.test_max_batches = 32``; measured once on
a 2-core CPU shared with other jobs: 16, 4 and 4 minutes of wall time;
``tests/e2e/test_mlm_transfer.py``).
The margin is within the noise of 512 reviews (one standard error is about 2 points): the
smoke shows the path working, not the size of the gain. The byte-level smokes (the first
and third commands) do not show transfer at this budget: their fine-tuned classifier
ends at chance (test accuracy 0.50).

Pre-training (default): ``data.objective='mlm'`` (BERT's 15% / 80-10-10 masking,
``seqjax.data.objectives``) over the reviews' text (``imdb_bytes``: bytes + 1, 0 = pad,
[MASK] = 257), n = 512 bytes per review, reviews packed several to a row
(``data.packing``; not with Linformer, whose projection mixes the row's examples: then one
review per padded row). Evaluation: masked-LM perplexity and accuracy on the masked bytes.
``finetune``: the IMDB sentiment classifier of the same encoder (mean pooling), started
from ``config.init_from`` (a pre-training workdir; ``seqjax.train.init_from``) or from
scratch when it is None.

Variants (``:arg``, comma-separated): ``attention=dense|linformer``, ``k=64|128|256``,
``sharing=none|headwise|kv|layerwise`` (Linformer §4), ``finetune``, ``smoke`` (a CPU size:
2 layers x 64 wide, n = 256, minutes on 2 cores), ``paper`` (RoBERTa-base-like sizes of
Linformer §5: 12 layers, 12 heads, width 768, n = 512; for accelerators, untested here).
``subword``: the reviews as SentencePiece BPE pieces (``data.vocab='sentencepiece'``,
``vocab_size=8000``; Linformer §5 pre-trains on RoBERTa's 50K BPE), trained on the train
reviews and shared by pre-training and fine-tuning (the same ``data`` options give the same
model file and ids, so ``init_from`` loads the embedding: its [MASK] row is dropped);
pre-training masks whole words (``data.mlm_whole_word``), n counts pieces. 8000 pieces: a
CPU-sized table and output softmax (8000 x 64 in ``smoke``; 2 M parameters at width 256,
against 3 M in the 4 blocks) rather than RoBERTa's 50K, while common words are single pieces
and a review needs about a quarter of its bytes. Measured once on the real 50k reviews (this
2-core machine, shared with two other runs): training the 8000-piece BPE model on the 25k train
reviews 3.8 s, encoding them 7.1 s and the 25k test reviews 6.6 s (SentencePiece's batch encode,
one thread; cached beside the model, so later runs only read the arrays); tokens per review: mean
336, median 247 (train; test 329 / 244) against 1325 / 979 bytes; reviews longer than n = 512:
17.1% of train and 16.3% of test (bytes: 90%), longer than 256 (``smoke``): 47.6%.
``sweep()`` lists Fig. 3 (a) and (c): dense and k in {64, 128, 256}, then the four sharing
modes at k = 128. Other fields: ``seqjax/train/defaults.py``, ``seqjax/data/config.py``.
"""

import ml_collections

from seqjax import data
from seqjax.attention import linformer
from seqjax.configs import common
from seqjax.train import defaults

KS = (64, 128, 256)
SUBWORD_VOCAB_SIZE = 8000  # ``subword``: SentencePiece pieces (4 special + 256 bytes + merges)


def parse_arg(arg: str | None) -> dict:
    return common.parse_args(
        arg,
        "configs/mlm.py",
        flags=("smoke", "paper", "finetune", "subword"),
        options={"attention": ("dense", "linformer"), "k": KS, "sharing": linformer.SHARING},
        defaults={"attention": "dense", "k": 128, "sharing": "headwise"},
    )


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    a = parse_arg(arg)
    n = 256 if a["smoke"] else 512  # bytes per review (Linformer §5: n = 512)
    d = data.default_config()
    d.name = "imdb_bytes"  # IMDB reviews as bytes + 1 (0 = pad); [MASK] = 257 when pre-training
    d.max_len = n
    d.batch_size = 16 if a["smoke"] else 64
    if d.manual_dir is None:  # the offline copy beside the repository
        d.manual_dir = "../shared/data/imdb"
    if a["subword"]:  # SentencePiece BPE over the train reviews, n pieces per review
        d.vocab, d.spm_model_type, d.vocab_size = "sentencepiece", "bpe", SUBWORD_VOCAB_SIZE
    if not a["finetune"]:
        d.objective = "mlm"  # BERT masking, 15% of the real bytes
        d.packing = a["attention"] != "linformer"  # Linformer cannot honour segments
        d.mlm_whole_word = a["subword"]  # every piece of a chosen word (BERT's WWM)
    c = defaults.base(d)
    c.init_from = None  # finetune: a pre-training workdir (seqjax.train.init_from)

    m = c.model
    m.attention = a["attention"]
    m.max_len = n
    m.attention_options = ml_collections.ConfigDict(
        {"linformer": {"k": min(a["k"], n), "max_len": n, "sharing": a["sharing"]}}
    )  # Linformer's projected length k (E, F: [k, n]) and parameter sharing (§4)
    m.num_layers, m.num_heads, m.d_model = 4, 4, 256
    m.dropout_rate = m.attention_dropout_rate = 0.1
    m.pooling = "mean"  # the fine-tuned classifier pools the encoder's outputs
    if a["paper"]:  # RoBERTa-base-like (Linformer §5)
        m.num_layers, m.num_heads, m.d_model = 12, 12, 768
        d.batch_size = 256
    if a["smoke"]:
        m.num_layers, m.num_heads, m.d_model = 2, 2, 64
        m.dropout_rate = m.attention_dropout_rate = 0.0

    o = c.optimizer
    o.learning_rate = 1e-3 if a["smoke"] else 5e-4  # peak (RoBERTa base: 6e-4)
    o.warmup_steps = 20 if a["smoke"] else 2000
    o.b2 = 0.98  # RoBERTa §3.1
    o.weight_decay = 0.01

    t = c.train
    t.num_steps = 200 if a["smoke"] else 100_000
    t.eval_every = 50 if a["smoke"] else 2000
    t.eval_max_batches = 10 if a["smoke"] else 50
    t.checkpoint_every = 100 if a["smoke"] else 2000
    t.test_max_batches = 32 if a["smoke"] else 0  # smoke: 512 test reviews, not 25,000
    t.sample_length = 0  # an encoder: no text sample
    return c


def sweep():
    """Linformer Fig. 3 (a): dense and k in {64, 128, 256}; (c): the sharing modes at k = 128."""
    fig_a = [{"config.model.attention": "dense"}] + [
        {"config.model.attention": "linformer", "config.data.packing": False,
         "config.model.attention_options.linformer.k": k}
        for k in KS
    ]  # fmt: skip
    fig_c = [
        {"config.model.attention": "linformer", "config.data.packing": False,
         "config.model.attention_options.linformer.k": 128,
         "config.model.attention_options.linformer.sharing": s}
        for s in linformer.SHARING
    ]  # fmt: skip
    return fig_a + fig_c
