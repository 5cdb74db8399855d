"""Character LM with Sparse Transformer attention (Child et al. 2019): ``configs/char_lm.py``
with every layer's attention replaced by the fixed (default) or strided block-sparse pattern.

    python -m seqjax.main --config configs/sparse_lm.py --workdir /tmp/sparse_lm
    python -m seqjax.main --config configs/sparse_lm.py:strided --workdir /tmp/sparse_lm_str
    python -m seqjax.main --config configs/sparse_lm.py:smoke --workdir /tmp/sparse_lm_smoke

Expected: not yet measured at the default size (the lead's training-throughput study runs
it). ``smoke`` trains for 60 steps in about a minute on a 2-core CPU and should end near
``char_lm.py:smoke`` (about 3 bits per character): at 64 characters with stride 8 the
sparse model sees a subset of the dense context. ``tests/attention/test_sparse_model.py``
trains this config's smoke variant for a few steps on the synthetic duplication task.
The paper's enwik8 model (30 layers, d=512, 8 heads, context 12,288, fixed, stride 128,
c=32, dropout 0.4: 0.99 bits per byte) is far beyond a CPU; ``sweep()`` is the CPU study.

Variants (``:arg``, comma-separated): ``fixed`` (default) or ``strided`` (the pattern),
``split`` (half the heads on each half of the pattern instead of merged heads),
``smoke``. Fields not set here come from ``configs/char_lm.py``, ``seqjax/train/defaults.py``
and ``seqjax/data/config.py``.
"""

import ml_collections

from seqjax.configs import common

ARGS = ("fixed", "strided", "split", "smoke")


def get_config(arg: str | None = None):
    args = common.parse_args(arg, "configs/sparse_lm.py", flags=ARGS)
    if args["fixed"] and args["strided"]:
        raise ValueError("configs/sparse_lm.py: choose one of the variants fixed, strided")
    smoke = args["smoke"]
    kind = "strided" if args["strided"] else "fixed"
    c = common.load("char_lm", __file__).get_config("smoke" if smoke else "default")

    d, m = c.data, c.model
    d.seq_len = 64 if smoke else 1024  # characters of context (stride ≈ sqrt(seq_len))
    d.batch_size = 16 if smoke else 4  # 4 x 1024 = the tokens per step of char_lm (32 x 128)
    m.max_len = max(m.max_len, d.seq_len)  # positions cover the context
    m.attention = f"sparse_{kind}"  # every layer uses the sparse pattern (the LM is causal)
    shared = dict(
        stride=8 if smoke else 32,  # l ≈ sqrt(seq_len)
        head_mode="split" if args["split"] else "merged",  # §4.3 merged / multi-head
        implementation="blocksparse",  # only the blocks the pattern touches
    )
    # Options of both patterns (a sweep switches model.attention alone).
    m.attention_options = ml_collections.ConfigDict(
        {
            "sparse_strided": dict(shared),
            # c: summary cells per block, l / 4 (the paper: 32 of 128).
            "sparse_fixed": dict(shared, c=2 if smoke else 8),
        }
    )
    return c


def sweep():
    """Points of the study (``launch/`` runs one job per dict of field overrides)."""
    return [{"config.model.attention": f"sparse_{k}"} for k in ("fixed", "strided")]
