"""GPT-1's supervised fine-tuning (Radford et al. 2018, §3.2-3.3): a post-LN causal decoder
with learned positions, the input transforms, a linear classifier on the extract (last)
token and the auxiliary LM loss ``L3 = L2 + 0.5 L1`` (``seqjax.tasks.gpt1_finetune``).

    python -m seqjax.main --config configs/gpt1.py:smoke --workdir /tmp/gpt1_smoke
    python -m seqjax.main --config configs/gpt1.py:entailment,smoke --workdir /tmp/gpt1_ent
    python -m seqjax.main --config configs/gpt1.py --workdir /tmp/gpt1 \\
        --config.init_from=/tmp/lm_workdir   # a seqjax LM run of the same model and bytes

Classification (default): the IMDB reviews as bytes, ``[start] review [extract]``.
``entailment``: the English/German message pairs ``l10n_pairs`` (is B the translation of A?)
as ``[start] A [delim] B [extract]``. GPT-1's layout (``seqjax.models.gpt1.gpt1_config``):
post-LN, GELU (tanh), learned positions, tied output layer; λ = ``config.gpt1.lm_weight``.
``smoke``: 2 layers, width 32, 100 steps, under two minutes on a CPU. Other fields:
``seqjax/train/defaults.py``.
"""

import ml_collections

from seqjax import data
from seqjax.configs import common
from seqjax.tasks import gpt1_finetune
from seqjax.train import defaults


def parse_arg(arg: str | None) -> dict:
    return common.parse_args(arg, "configs/gpt1.py", flags=("smoke", "entailment"))


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    a = parse_arg(arg)
    smoke = a["smoke"]
    d = data.default_config()
    d.batch_size = 16 if smoke else 32  # GPT-1 §4.1: 32
    if a["entailment"]:
        d.name = "l10n_pairs"
        d.path = "../shared/data/software_l10n/en-de.jsonl.gz"
        d.max_len = 64 if smoke else 128
        n = 2 * d.max_len + 3
    else:
        d.name = "imdb_bytes"
        if d.manual_dir is None:  # the offline copy beside the repository
            d.manual_dir = "../shared/data/imdb"
        d.max_len = 128 if smoke else 512
        n = d.max_len + 2
    d.objective = "gpt1_finetune"
    c = defaults.base(d)
    c.init_from = None  # a seqjax LM run of the same model and bytes
    c.gpt1 = gpt1_finetune.default_config()

    m = c.model
    m.max_len = n
    m.num_layers, m.num_heads, m.d_model, m.d_ff = (2, 2, 32, 128) if smoke else (12, 12, 768, 3072)
    m.positional = "learned"
    m.tie_embeddings = True
    m.dropout_rate = m.attention_dropout_rate = 0.0 if smoke else 0.1  # GPT-1: 0.1
    m.layout = ml_collections.ConfigDict({
        "norm_position": "post", "norm_eps": 1e-5, "activation": "gelu_tanh",
        "attention_bias": True, "embed_scale": False,
    })  # fmt: skip

    o = c.optimizer
    o.learning_rate = 1e-3 if smoke else 6.25e-5  # GPT-1 §4.1: 6.25e-5, warm-up 0.2 %
    o.warmup_steps = 10 if smoke else 20
    o.schedule = "warmup_linear"

    t = c.train
    t.num_steps = 100 if smoke else 3000
    t.eval_every = 50 if smoke else 500
    t.eval_max_batches = 8 if smoke else 50
    t.checkpoint_every = 100 if smoke else 1000
    t.test_max_batches = 8 if smoke else 0
    t.sample_length = 0  # a classifier: no text sample
    return c
