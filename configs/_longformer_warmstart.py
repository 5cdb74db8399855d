"""The Longformer warm-start recipe (Beltagy et al. 2020, §5): start an encoder from a
Hugging Face RoBERTa/BERT folder, copy its learned positions ``factor`` times, swap in an
efficient mechanism, and continue masked-LM pre-training at ``factor`` times the length.

Not a ``seqjax.main`` job (the leading underscore keeps it out of the job configs): the
study ``experiments/longformer_warmstart/run.py`` runs it::

    python experiments/longformer_warmstart/run.py --config configs/_longformer_warmstart.py
    python experiments/longformer_warmstart/run.py --config configs/_longformer_warmstart.py:smoke
    python experiments/longformer_warmstart/run.py --config configs/_longformer_warmstart.py \\
        --init_from hf:/path/to/roberta-base          # a real checkpoint and its tokenizer

``init_from``: ``"hf:<folder>"`` (its ``tokenizer.json`` encodes the text, so the
checkpoint's ids reach it), or None: the study first pre-trains a small RoBERTa-layout
model with seqjax's masked LM at ``short_len``, exports it to the Hugging Face layout and
imports it back (the whole path, no download). Results go to a fresh
``workdirs/longformer_warmstart/<UTC time>/`` unless ``--out`` names a folder. The full
study takes 7 to 13 minutes on a shared 2-core CPU (391 s and 774 s in two runs); variant
``smoke`` (20 + 10 steps per row, the test's) about 3 minutes, nearly all compilation.
"""

import ml_collections

from seqjax.configs import common


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    a = common.parse_args(arg, "configs/_longformer_warmstart.py", flags=("smoke",), options={})
    smoke = a["smoke"]
    c = ml_collections.ConfigDict()
    c.init_from = ml_collections.config_dict.placeholder(str)
    # bytes; 90% train / 10% eval; ../shared/data beside the repository or $SEQJAX_SHARED_DATA
    c.data_path = common.shared_data_file("tinyshakespeare/input.txt")
    c.seed = 0
    # The small "pretrained" model (init_from None): RoBERTa's layout at CPU size.
    c.model = ml_collections.ConfigDict(
        dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256)
    )
    c.short_len = 64  # the pretrained context n (RoBERTa: 512)
    c.factor = 4  # Longformer: 512 -> 4,096 is 8x; 4x here ("4x the original length")
    c.pretrain = ml_collections.ConfigDict(
        dict(
            steps=20 if smoke else 2000,
            batch_size=16,
            learning_rate=2e-3,
            warmup=100,
            log_every=0 if smoke else 250,
        )  # fmt: skip
    )
    c.position_init_scale = 0.2  # the pretrained table starts at 0.2 x sinusoids (run.py)
    # Continued MLM at factor * short_len: the same tokens per batch as pre-training.
    c.extend = ml_collections.ConfigDict(
        dict(
            steps=10 if smoke else 300,
            batch_size=4,
            learning_rate=3e-4,
            warmup=30,
            eval_every=5 if smoke else 50,
        )  # fmt: skip
    )
    c.eval_windows = 4 if smoke else 128  # held-out windows of factor * short_len tokens
    w = c.short_len // 2  # each token sees short_len + 1 neighbours, as in pre-training
    c.mechanisms = ml_collections.ConfigDict(
        {
            "dense": {"attention": "dense", "options": {}},
            "longformer": {  # §3: sliding window + global tokens (the first: <s>/CLS)
                "attention": "flex",
                "options": {
                    "pattern": "global_tokens",
                    "window": w,
                    "num_global": 1,
                    "block_size": 16,
                },  # fmt: skip
            },
            "bigbird": {  # Zaheer et al. 2020: window, global and random blocks
                "attention": "flex",
                "options": {
                    "pattern": "bigbird",
                    "window": 1,
                    "num_global": 1,
                    "num_random": 1,
                    "block_size": 16,
                },  # fmt: skip
            },
        }
    )
    # Beltagy et al. 2020 Table 5's ablation: random instead of copied positions.
    c.random_positions_for = ("longformer",)
    return c
