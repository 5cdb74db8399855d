"""The text-classification baselines before attention on IMDB sentiment (Iyyer et al. 2015,
Table 1: NBOW 89.0, DAN 89.4 on IMDB): bag of words, CBOW, deep CBOW, the Deep Averaging
Network with word dropout and Kim 2014's CNN, the ``baselines`` family
(``seqjax.models.baselines``); the RNN classifier is ``--config.model.family=rnn`` with
``model_block("rnn")`` (``:lstm``).

    python -m seqjax.main --config configs/text_baselines.py --workdir /tmp/dan
    python -m seqjax.main --config configs/text_baselines.py:smoke --workdir /tmp/dan_smoke
    python -m seqjax.main --config configs/text_baselines.py \\
        --config.model.architecture=cnn --workdir /tmp/kim_cnn
    python -m seqjax.main --config configs/text_baselines.py:lstm --workdir /tmp/imdb_lstm
    python -m seqjax.main --config configs/text_baselines.py:transformer --workdir /tmp/imdb_tf

The reviews (``../shared/data/imdb``, as ``configs/lra_text.py``) as sentencepiece
subwords (8,000 pieces trained on the training split), the first 400 pieces of each review;
DAN as Iyyer et al. §4: 300-wide embeddings averaged, word dropout 0.3, ReLU layers
(2 here, of 300), Adam. Kim's CNN: widths 3/4/5 with 100 maps each, dropout 0.5.

Variants (``:arg``): ``default`` (DAN), ``lstm`` (a bidirectional LSTM classifier, the
``rnn`` family), ``transformer`` (a 2-layer, 64-wide Transformer encoder with mean pooling,
the attention row of ``experiments/iyyer_imdb``), ``smoke`` (a 2-layer 32-wide DAN on 64
pieces, 60 steps: 1.5 min of wall time, 20 CPU-seconds, under load; the vocabulary is
trained on first use, so the first run takes longer). Every field not set here is in
``seqjax/train/defaults.py``, ``seqjax/data/config.py`` and
``seqjax.models.baselines.BaselineConfig``.
"""

from seqjax import data
from seqjax.configs import common
from seqjax.models import registry
from seqjax.train import defaults

VARIANTS = ("default", "lstm", "transformer", "smoke")


def get_config(arg: str | None = None):
    variant = common.variant(arg, VARIANTS, "configs/text_baselines.py")
    d = data.default_config()
    d.name = "imdb_bytes"  # IMDB sentiment (binary)
    d.vocab = "sentencepiece"  # subwords trained on the training split
    d.vocab_size = 8000
    d.max_len = 400  # pieces per review (longer ones are truncated)
    d.batch_size = 32
    if d.manual_dir is None:
        d.manual_dir = common.shared_data_file("imdb")
    c = defaults.base(d)
    c.seed = 0
    c.model = registry.model_block(
        "baselines",
        architecture="dan",  # bow | cbow | deep_cbow | dan | cnn
        embed_dim=300,
        hidden_dim=300,
        num_layers=2,
        word_dropout=0.3,
        dropout_rate=0.0,  # before the output layer (cnn: 0.5)
    )
    o = c.optimizer
    o.learning_rate = 1e-3
    o.warmup_steps = 100
    o.weight_decay = 0.0
    t = c.train
    t.num_steps = 3000
    t.log_every = 50
    t.eval_every = 1000
    t.eval_max_batches = 20
    t.eval_batch_size = 64
    t.checkpoint_every = 1000
    if variant == "lstm":
        c.model = registry.model_block(
            "rnn", cell="lstm", num_layers=1, hidden_dim=128, bidirectional=True, pooling="max"
        )
    if variant == "transformer":  # the attention row of the same table (same data)
        c.model = defaults.base(d).model  # the transformer family's job block
        m = c.model
        m.num_layers, m.num_heads, m.d_model, m.d_ff = 2, 4, 64, 256
        m.max_len = d.max_len
        m.pooling = "mean"
        m.dropout_rate = 0.1
    if variant == "smoke":
        d.vocab_size = 1000
        d.max_len = 64
        d.batch_size = 16
        c.model.embed_dim = c.model.hidden_dim = 32
        o.learning_rate = 3e-3
        o.warmup_steps = 5
        t.num_steps = 60
        t.log_every = 10
        t.eval_every = 30
        t.eval_max_batches = 2
        t.checkpoint_every = 30
    return c
