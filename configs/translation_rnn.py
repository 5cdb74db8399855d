"""The RNN encoder-decoder on the translation data (software_l10n en-de, sentencepiece, beam
search, BLEU): Bahdanau et al. 2015's additive attention by default, Luong et al. 2015's
dot / general attention with input feeding, or no attention at all (the fixed vector of Cho
et al. 2014 / Sutskever et al. 2014): ``seqjax.models.rnn_seq2seq``.

    python -m seqjax.main --config configs/translation_rnn.py:smoke --workdir workdirs/rnn_mt
    python -m seqjax.main --config configs/translation_rnn.py --workdir workdirs/rnn_mt_bahdanau
    python -m seqjax.main --config configs/translation_rnn.py \
        --config.model.attention_type=general --workdir workdirs/rnn_mt_luong
    python -m seqjax.translate --workdir workdirs/rnn_mt --source "File not found"

Everything but ``config.model`` is ``configs/translation.py``'s (data, vocabulary, optimizer,
label smoothing, beam 4 with alpha 0.6), so BLEU compares with the Transformer's row. The
model: a bidirectional 1-layer LSTM encoder (128 units: 64 per direction), a 1-layer LSTM
decoder of 128 units, embeddings of 128, dropout 0.1. Adam without the Transformer's
inverse-sqrt warm-up: a constant-after-warm-up cosine to 10% (RNNs train with plain Adam).

Variants (``:arg``): ``cpu`` (default), ``smoke`` (a 64-unit model, 100 steps: 31 CPU-seconds,
2 min 40 s of wall time on the shared 2-core machine under a load of 15, with BLEU of the
validation and test splits), ``copy`` (the algorithmic copy task, no data file).
"""

from seqjax.configs import common
from seqjax.models import registry

VARIANTS = ("cpu", "smoke", "copy")


def get_config(arg: str | None = None):
    variant = common.variant(arg, VARIANTS, "configs/translation_rnn.py")
    base = common.load("translation").get_config("copy" if variant == "copy" else variant)
    c = base
    c.model = registry.model_block(
        "rnn_seq2seq",
        cell="lstm",  # lstm | gru | elman
        num_layers=1,
        hidden_dim=128,  # decoder width; the encoder's two directions are 64 each
        embed_dim=128,
        dropout_rate=0.1,
        attention_type="bahdanau",  # none | bahdanau | dot | general
        input_feeding=True,  # Luong §3.3 (dot/general)
        bidirectional_encoder=True,
        share_embeddings=True,  # the data's joint sentencepiece vocabulary
        max_len=int(c.data.max_source_len),
    )
    o = c.optimizer
    o.schedule = "warmup_cosine"
    o.b2, o.eps = 0.999, 1e-8
    o.learning_rate = 2e-3
    o.warmup_steps = 100
    if variant in ("smoke", "copy"):
        c.model.hidden_dim = c.model.embed_dim = 64
        c.model.dropout_rate = 0.0
        o.learning_rate = 5e-3
        o.warmup_steps = 10
    return c
