"""XLNet permutation-LM pre-training on tiny shakespeare characters, sized for a 2-core CPU
(Yang et al. 2019; ``seqjax.models.xlnet``, ``seqjax.data.plm``, ``seqjax.tasks.plm``).

    python -m seqjax.main --config configs/xlnet.py:smoke --workdir /tmp/xlnet_smoke
    python -m seqjax.main --config configs/xlnet.py --workdir /tmp/xlnet

Each window of 64 characters gets a sampled factorization order: the first half
(``plm_reuse_len = 32``, what a next segment would reuse) never sees the second, orders are
permutations within each half, and about 1/6 of the tokens (``plm_num_predict = 10``, K = 6
of §2.3) in spans of up to 5 characters are predicted by the query stream, which starts from
``mask_emb`` and sees the non-targets and the targets earlier in the order; the content
stream reads the original characters (nothing is replaced by a mask token). The loss is the
cross-entropy of the predicted characters; evaluation reports it (and its perplexity) on
fixed orders of the validation windows. Training runs without memory across batches
(``model.mem_len = 0``; the model's memory equals ``transformers``' in the tests), unless
``memory``: ``model.kind = "xlnet"`` (``seqjax.models.xlnet_memory``), every row continuing a
contiguous stream of the corpus by ``plm_reuse_len`` characters per step
(``data.lm_batching = "stream"``) and attending to the memory of the previous windows' first
halves (``model.mem_len = 64``), as the reference trains::

    python -m seqjax.main --config configs/xlnet.py:memory,smoke --workdir /tmp/xlnet_mem

Variants (``:arg``, comma-separated flags): none (4 layers x 128, 2,000 steps), ``smoke``
(2 layers x 64, 60 steps: about a minute on 2 cores); ``imdb``: pre-train on the IMDB
reviews' bytes instead (``imdb_bytes``, 256 bytes per review, right-padded; targets among a
review's real bytes); ``subword``: the reviews as the SentencePiece BPE pieces of
``configs/mlm.py:subword`` (8000 pieces; the same ``data`` options give the same model file,
so the XLNet and BERT studies read the same ids; n counts pieces); ``finetune``: the IMDB
sentiment classifier of the same network (``XLNetClassifier``: the last real token's
summary, §3.3), started from ``config.init_from`` (an ``imdb`` pre-training workdir;
``seqjax.train.init_from``) or from scratch::

    python -m seqjax.main --config configs/xlnet.py:imdb,smoke --workdir /tmp/xlnet_imdb
    python -m seqjax.main --config configs/xlnet.py:finetune,smoke --workdir /tmp/xlnet_ft \
        --config.init_from=/tmp/xlnet_imdb
 Every field not set here is documented in
``seqjax/train/defaults.py`` and ``seqjax/data/config.py``.
"""

import ml_collections

from seqjax import data
from seqjax.configs import common
from seqjax.models import registry
from seqjax.train import defaults

FLAGS = ("smoke", "imdb", "finetune", "subword", "memory")
SUBWORD_VOCAB_SIZE = 8000  # ``subword``: as configs/mlm.py (4 special + 256 bytes + merges)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    a = common.parse_args(arg, "configs/xlnet.py", flags=FLAGS)
    smoke, imdb = a["smoke"], a["imdb"] or a["finetune"] or a["subword"]
    d = data.default_config()
    if imdb:
        n = 256 if smoke else 512  # bytes per review
        d.name = "imdb_bytes"  # bytes + 1, 0 = padding
        d.max_len = n
        if d.manual_dir is None:  # the offline copy beside the repository
            d.manual_dir = "../shared/data/imdb"
        if a["subword"]:  # SentencePiece BPE over the train reviews, n pieces per review
            d.vocab, d.spm_model_type = "sentencepiece", "bpe"
            d.vocab_size = SUBWORD_VOCAB_SIZE
    else:
        n = 64  # window length T
        d.name = "text_file"  # tiny shakespeare (1.1M characters), split 90/5/5
        d.path = common.shared_data_file("tinyshakespeare/input.txt")
        d.vocab = "chars"  # 65 characters
        d.seq_len = n
    d.batch_size = 8 if smoke else 16
    if not a["finetune"]:
        d.objective = "plm"  # XLNet's permutation LM (seqjax.data.plm)
    d.plm_reuse_len = n // 2  # the two halves (the first never sees the second)
    d.plm_perm_size = n // 2  # a whole half per permutation
    d.plm_num_predict = n // 6  # predicted tokens per row (K = 6)
    d.plm_mask_alpha = 6  # spans: about 1 predicted token per 6 ...
    d.plm_mask_beta = 1  # ... in n-grams of up to plm_max_gram tokens
    d.plm_max_gram = 5
    d.plm_ranks = False  # True: the order as two rank vectors (no [T, T] mask; blockwise)
    c = defaults.base(d)
    c.seed = 0
    c.init_from = None  # finetune: an ``imdb`` pre-training workdir
    c.model = registry.model_block(
        "xlnet",
        num_layers=2 if smoke else 4,
        num_heads=4,
        d_model=64 if smoke else 128,
        d_inner=256 if smoke else 512,
        dropout_rate=0.0,
        implementation="auto",  # blockwise relative attention (reference with dropout)
    )
    c.model.kind = "transformer"  # "xlnet": memory across batches (``memory`` flag)
    if a["memory"]:  # §2.4: each row continues a stream by reuse_len; the memory its halves
        if imdb:
            raise ValueError("configs/xlnet.py: 'memory' reads a corpus; drop 'imdb'/'subword'")
        c.model.kind, c.model.mem_len = "xlnet", n  # the reference: mem_len < seq_len
        d.lm_batching = "stream"

    o = c.optimizer
    o.learning_rate = 1e-3
    o.warmup_steps = 10 if smoke else 100
    o.min_lr_ratio = 0.1
    o.weight_decay = 0.01

    t = c.train
    t.num_steps = (200 if imdb else 60) if smoke else 2000
    t.log_every = 10 if smoke else 20
    t.eval_every = 30 if smoke else 500
    t.eval_max_batches = 5 if smoke else 50
    t.checkpoint_every = t.num_steps if smoke else 500
    t.test_max_batches = 32 if smoke and imdb else 0  # smoke: 256 of the 25,000 test reviews
    t.sample_length = 0  # no end-of-run sample (python -m seqjax.sample generates: xlnet_generate)
    return c
