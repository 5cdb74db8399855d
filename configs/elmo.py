"""ELMo (Peters et al. 2018), the ``elmo`` family (``seqjax.models.elmo_family``): a
character-CNN token encoder and a two-layer biLM of projected LSTMs pre-trained as a
forward and a backward LM (``data.objective='bilm'``, task ``bilm``), then its frozen layers,
scalar-mixed with learned task weights (eq. 1), as the features of an IMDB classifier.

    python -m seqjax.main --config configs/elmo.py --workdir /tmp/elmo_bilm
    python -m seqjax.main --config configs/elmo.py:classify --workdir /tmp/elmo_imdb \\
        --config.init_from=/tmp/elmo_bilm
    python -m seqjax.main --config configs/elmo.py:smoke --workdir /tmp/elmo_smoke
    python -m seqjax.main --config configs/elmo.py:classify,smoke --workdir /tmp/elmo_cls \\
        --config.init_from=/tmp/elmo_smoke

The corpus is the IMDB training reviews themselves (``../shared/data/imdb``; ELMo's own is
the 1B Word Benchmark): sentencepiece subwords (8,000 pieces, as
``configs/text_baselines.py``, so that ``init_from`` finds the same vocabulary), one review
of at most ``max_len`` pieces per row. Each piece reaches the model as its characters
(``data.token_chars``, filled in from the family: 50 per token with begin/end-of-word marks,
AllenNLP's ``ELMoCharacterMapper``; ``seqjax.data.token_chars``). The classifier loads the
biLM (``encoder/``) with ``config.init_from`` and keeps it frozen (``model.freeze_bilm``:
``stop_gradient`` and an optax mask; only the mix, γ and the 1-hidden-layer head over the
mean of the tokens learn).

Variants (``:arg``, comma-separated): ``classify`` (the transfer), ``smoke`` (a 64-cell
biLM with 32-wide projections on 64 pieces of each review, 16 characters per token, 40
steps: 14 CPU-seconds, 46 s of wall time on the shared 2-core machine; ``classify,smoke``
13 CPU-seconds, 52 s; once the 1,000-piece vocabulary is trained, which the first run of
``configs/text_baselines.py:smoke`` shares). ``experiments/iyyer_imdb`` runs both at a
larger size (its README: a 300-step biLM's frozen features stay near chance in this
classifier; a standardized linear probe of them reaches 60 %). Every field not set here is in
``seqjax/train/defaults.py``, ``seqjax/data/config.py`` and
``seqjax.models.elmo_family.ELMoConfig``.
"""

import ml_collections

from seqjax import data
from seqjax.configs import common
from seqjax.models import registry
from seqjax.train import defaults

FLAGS = ("smoke", "classify")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    a = common.parse_args(arg, "configs/elmo.py", flags=FLAGS)
    smoke, classify = a["smoke"], a["classify"]
    d = data.default_config()
    d.name = "imdb_bytes"  # the reviews (binary sentiment)
    d.vocab = "sentencepiece"
    d.vocab_size = 1000 if smoke else 8000
    d.max_len = 64 if smoke else 400
    d.batch_size = 16 if smoke else 32
    d.objective = "" if classify else "bilm"  # ELMo's two LMs (seqjax.data.bilm)
    d.token_chars = 16 if smoke else 50  # characters per piece (0: the family's 50)
    if d.manual_dir is None:
        d.manual_dir = common.shared_data_file("imdb")
    c = defaults.base(d)
    c.seed = 0
    c.init_from = None  # classify: the pre-training workdir (None: a random biLM)
    c.model = registry.model_block(
        "elmo",
        num_layers=2,
        hidden_dim=64 if smoke else 512,
        proj_dim=32 if smoke else 128,
        char_dim=8 if smoke else 16,
        filters=((1, 16), (2, 16), (3, 32)) if smoke else ((1, 32), (2, 32), (3, 64), (4, 128)),
        num_highway=1 if smoke else 2,
        classifier_hidden=32 if smoke else 128,
        freeze_bilm=True,
    )
    o = c.optimizer
    o.learning_rate = 3e-3 if smoke else 1e-3
    o.warmup_steps = 5 if smoke else 100
    o.weight_decay = 0.0
    o.grad_clip = 1.0
    t = c.train
    t.num_steps = 40 if smoke else 3000
    t.log_every = 10 if smoke else 50
    t.eval_every = 20 if smoke else 500
    t.eval_max_batches = 2 if smoke else 20
    t.eval_batch_size = 16 if smoke else 64
    t.checkpoint_every = t.num_steps if smoke else 1000
    t.test_max_batches = 8 if smoke else 0  # smoke: 128 of the 25,000 test reviews
    t.sample_length = 0  # the biLM is no sampler
    return c
