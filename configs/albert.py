"""ALBERT pre-training (Lan et al. 2020): factorized embeddings (W = ``embed_dim`` < E) and
cross-layer parameter sharing (``num_hidden_groups`` groups of ``inner_group_num`` layers),
trained with ALBERT's objective, masked LM with n-gram masking plus sentence-order
prediction, on this Python's standard library as bytes (no download).

    python -m seqjax.main --config configs/albert.py:smoke --workdir /tmp/albert_smoke
    python -m seqjax.main --config configs/albert.py --workdir /tmp/albert
    python -m seqjax.main --config configs/albert.py:groups=2,smoke --workdir /tmp/albert_g2
    python -m seqjax.main --config configs/albert.py:mlm,smoke --workdir /tmp/albert_mlm

The model is ``config.model.family = 'albert'`` (``seqjax.models.albert``); its checkpoints
import from and export to Hugging Face's ``AlbertForPreTraining`` / ``AlbertForMaskedLM``
(``seqjax.convert``). Sharing saves parameters, not activations or FLOPs: the 4-step stack
below holds one layer's weights (``groups=1``) yet computes and stores as much as 4 unshared
layers. Variants (``:arg``, comma-separated): ``groups=1|2`` (``num_hidden_groups``),
``smoke`` (2 steps x 64 wide, 150 steps: about a minute on 2 CPU cores), ``mlm`` (BERT's
masked LM only, ``data.objective='mlm'``, no sentence-order head). The default objective is
``data.objective='sop'`` (``seqjax.data.sop``; task ``mlm_pair``): each row is ``[CLS] A
[SEP] B [SEP]``, two parts of a window cut at a line end, swapped with probability 1/2
(the SOP label), n-gram masked (n <= 3 words, P(n) ~ 1/n, 15 % of the tokens); the loss is
the masked-LM cross-entropy plus the sentence-order head's (``AlbertForPreTraining``).
Rows whose window holds fewer than two whole lines that fit carry no SOP loss (their order
would be readable from where the newlines fall): about 16 % of the stdlib's rows at 128
bytes, 71 % at the smoke's 64.
"""

import ml_collections

from seqjax import data
from seqjax.configs import common
from seqjax.models import registry
from seqjax.train import defaults


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    a = common.parse_args(
        arg, "configs/albert.py", flags=("smoke", "mlm"), options={"groups": (1, 2)},
        defaults={"groups": 1},
    )  # fmt: skip
    d = data.default_config()
    d.name = "pystdlib"  # this Python's stdlib .py files: embedded, no download
    d.vocab = "bytes"
    # ALBERT's SOP + n-gram masking (seqjax.data.sop), or BERT's 15% / 80-10-10 masking
    d.objective = "mlm" if a["mlm"] else "sop"
    d.seq_len = 64 if a["smoke"] else 128
    d.batch_size = 16 if a["smoke"] else 32
    c = defaults.base(d)
    width = 64 if a["smoke"] else 256
    keep = {k: c.model[k] for k in ("kind", "attention_options", "adaptive")}
    block = registry.model_block(
        "albert",
        attention="dense",
        num_layers=2 if a["smoke"] else 4,  # steps of the stack
        num_hidden_groups=a["groups"],
        num_heads=4,
        d_model=width,
        d_ff=4 * width,
        embed_dim=width // 4,  # W < E: the factorized table (ALBERT-base: 128 vs 768)
        max_len=d.seq_len,
    )
    block = {k: v for k, v in block.to_dict().items() if k != "adaptive"}  # bool here
    c.model = ml_collections.ConfigDict({**block, **keep})

    o = c.optimizer
    o.learning_rate = 1e-3
    o.warmup_steps = 20 if a["smoke"] else 500
    o.weight_decay = 0.01

    t = c.train
    t.num_steps = 150 if a["smoke"] else 20_000
    t.eval_every = 50 if a["smoke"] else 1000
    t.eval_max_batches = 4 if a["smoke"] else 50
    t.checkpoint_every = 150 if a["smoke"] else 2000
    t.test_max_batches = 4 if a["smoke"] else 0
    t.sample_length = 0  # an encoder: no text sample
    return c
