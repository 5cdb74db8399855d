"""BERT's fine-tuning heads on tasks a BERT user expects (Devlin et al. 2019, §4, Fig. 4):
extractive QA (start/end logits), token tagging (per-token labels) and, in ``cross``, the
sentence-pair cross-encoder (``[CLS] A [SEP] B [SEP]`` with segment ids -> pooler ->
classifier).

    python -m seqjax.main --config configs/bert_finetune.py:qa,smoke --workdir /tmp/qa_smoke
    python -m seqjax.main --config configs/bert_finetune.py:tagging,smoke --workdir /tmp/tag
    python -m seqjax.main --config configs/bert_finetune.py:cross,smoke --workdir /tmp/cross

The data (``../shared/data`` has no SQuAD, CoNLL or NLI set, so QA and tagging are synthetic
tasks on real text, ``seqjax.data.finetune_data``):

* ``qa``: "find the span" on Tiny Shakespeare windows (``data.objective='span_qa'``: the
  question is a span copied from the context, the answer its first occurrence), bytes,
  ``[CLS] question [SEP] context [SEP]`` with segment ids (``model.layout.type_vocab_size=2``);
  loss as ``BertForQuestionAnswering`` (``seqjax.tasks.token_tasks``); accuracy = exact match.
* ``tagging``: each word of Tiny Shakespeare tagged on its first byte by capitalisation and
  length (``data.objective='word_tags'``, 6 tags; other bytes ignored, HF's ``-100``); loss as
  ``BertForTokenClassification``.
* ``cross``: the real English/German message pairs ``l10n_pairs`` (is B the translation of
  A? ``seqjax.data.retrieval``) read by one encoder as ``[CLS] A [SEP] B [SEP]`` with segment
  ids (``model.towers=1``; ``seqjax.tasks.pair_classification``); loss as
  ``BertForSequenceClassification`` with ``token_type_ids``.

``smoke``: 2 layers, width 64, 300 steps, under two minutes on a CPU. Measured once each
(a 2-core machine loaded by other jobs; 13-20 s of CPU, 25-60 s of wall time): ``qa`` test
exact match 7 % (loss 3.0 from ln 71 = 4.26 at the start), ``tagging`` test tag accuracy 63 %,
``cross`` at chance (54 %: the smoke shows the path, not a translation detector).
Start from a masked-LM run of the same model and bytes with ``--config.init_from=<workdir>``
(its encoder is loaded, ``seqjax.train.init_from``); a frozen encoder (feature-based
transfer) is ``--config.optimizer.freeze="('encoder',)"``.
Other fields: ``seqjax/train/defaults.py``.
"""

import ml_collections

from seqjax import data
from seqjax.configs import common
from seqjax.train import defaults


def parse_arg(arg: str | None) -> dict:
    return common.parse_args(arg, "configs/bert_finetune.py",
                             flags=("smoke", "qa", "tagging", "cross"))  # fmt: skip


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    a = parse_arg(arg)
    smoke = a["smoke"]
    kind = "cross" if a["cross"] else "tagging" if a["tagging"] else "qa"
    d = data.default_config()
    d.batch_size = 16 if smoke else 64
    if kind == "cross":
        d.name = "l10n_pairs"
        d.max_len = 64 if smoke else 128  # bytes per message (median English: 33)
        d.path = "../shared/data/software_l10n/en-de.jsonl.gz"
        n = 2 * d.max_len + 3
    else:
        d.name = "text_file"
        d.path = "../shared/data/tinyshakespeare/input.txt"
        d.seq_len = 64 if smoke else 256  # context bytes
        d.objective = "span_qa" if kind == "qa" else "word_tags"
        d.qa_max_answer = 4
        n = d.seq_len + d.qa_max_answer + 3
    c = defaults.base(d)
    c.init_from = None  # a masked-LM workdir of the same model and bytes

    m = c.model
    m.max_len = n
    m.num_layers, m.num_heads, m.d_model, m.d_ff = (2, 4, 64, 128) if smoke else (4, 4, 256, 1024)
    m.positional = "learned"
    m.dropout_rate = m.attention_dropout_rate = 0.0 if smoke else 0.1
    if kind != "tagging":
        m.layout = ml_collections.ConfigDict({"type_vocab_size": 2})  # segment ids
    if kind == "cross":
        m.towers = 1  # one encoder over [CLS] A [SEP] B [SEP]
        m.pooling = "cls"

    o = c.optimizer
    o.learning_rate = 2e-3 if smoke else 3e-4
    o.warmup_steps = 10 if smoke else 500

    t = c.train
    t.num_steps = 300 if smoke else 10_000
    t.eval_every = 100 if smoke else 1000
    t.eval_max_batches = 8 if smoke else 50
    t.checkpoint_every = 300 if smoke else 1000
    t.test_max_batches = 8 if smoke else 0
    t.sample_length = 0  # an encoder: no text sample
    return c
