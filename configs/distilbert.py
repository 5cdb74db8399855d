"""DistilBERT: distil a masked-LM teacher into a student of half its depth (Sanh et al. 2019,
§2-3), on the IMDB reviews (the masked-LM batches of ``data.objective='distill'``).

    python -m seqjax.main --config configs/distilbert.py:smoke --workdir /tmp/distil_smoke
    python -m seqjax.main --config configs/distilbert.py --workdir /tmp/distil \\
        --config.init_from=hf:/path/to/bert-base-uncased
    python -m seqjax.main --config configs/distilbert.py:smoke --workdir /tmp/distil2 \\
        --config.init_from=/tmp/mlm_smoke_teacher   # a seqjax masked-LM run of this model

``config.model`` is the **teacher** (``init_from=hf:<folder>`` fills it from the folder, and
the folder's tokenizer becomes the data's vocabulary); the student is the teacher with the
blocks ``config.distill.student_layers`` (default one in two), no pooler and no segment table,
initialised from those teacher blocks (``seqjax.models.distill_pair``). The teacher is frozen
(``optimizer.freeze=('teacher',)``: its parameters are in the train state but receive no
updates). Loss (``seqjax.tasks.distill``): ``α_ce·T²·KL(softmax(t/T) ‖ softmax(s/T)) +
α_mlm·MLM + α_cos·(1 − cos(h_s, h_t))`` with DistilBERT's T = 2, α = 5 / 2 / 1.

``smoke``: the teacher is a **random-init** 4-layer BERT-layout encoder (width 32) made on the
fly (no ``init_from``), the student its blocks 0 and 2; reviews as bytes, 64 per row, 40 steps:
well under two minutes on a CPU. It shows the path, not a good student (a random teacher has
nothing to teach). Without ``smoke``: BERT-base's sizes (12 layers, 768 wide) for a teacher
imported with ``init_from=hf:<folder>``. Other fields: ``seqjax/train/defaults.py``.
"""

import ml_collections

from seqjax import data
from seqjax.configs import common
from seqjax.tasks import distill
from seqjax.train import defaults


def parse_arg(arg: str | None) -> dict:
    return common.parse_args(arg, "configs/distilbert.py", flags=("smoke",))


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    a = parse_arg(arg)
    smoke = a["smoke"]
    n = 64 if smoke else 512
    d = data.default_config()
    d.name = "imdb_bytes"
    d.max_len = n
    d.batch_size = 8 if smoke else 64
    if d.manual_dir is None:  # the offline copy beside the repository
        d.manual_dir = "../shared/data/imdb"
    d.objective = "distill"  # BERT's masking (15%, 80/10/10), read by the distillation task
    c = defaults.base(d)
    c.init_from = None  # the teacher: a seqjax masked-LM workdir or hf:<folder>
    c.distill = distill.default_config()

    m = c.model
    m.max_len = n
    m.num_layers, m.num_heads, m.d_model, m.d_ff = (4, 2, 32, 64) if smoke else (12, 12, 768, 3072)
    m.positional = "learned"
    m.dropout_rate = m.attention_dropout_rate = 0.0 if smoke else 0.1

    o = c.optimizer
    o.freeze = ("teacher",)  # the teacher's parameters receive no updates
    o.learning_rate = 1e-3 if smoke else 5e-4  # DistilBERT: 5e-4
    o.warmup_steps = 5 if smoke else 2000
    o.b2 = 0.98

    t = c.train
    t.num_steps = 40 if smoke else 100_000
    t.eval_every = 20 if smoke else 2000
    t.eval_max_batches = 4 if smoke else 50
    t.checkpoint_every = 40 if smoke else 2000
    t.test_max_batches = 4 if smoke else 0
    t.sample_length = 0  # an encoder: no text sample
    return c
