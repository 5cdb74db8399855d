"""Attention mechanisms behind one interface.

``seqjax.attention.get(name)`` returns a pure function
``fn(q, k, v, *, causal=False, mask=None, segment_ids=None, dropout_rate=0.0,
dropout_rng=None, **options) -> out`` on ``[batch, seq, heads, head_dim]`` arrays;
``seqjax.attention.names()`` lists what is registered. Importing this package registers
every built-in mechanism. The numerics they share (masked softmax, dropout, log-sum-exp
merge, padding) live in ``seqjax.attention.numerics``.
"""

# Importing a mechanism's module registers it (one file and one name per mechanism).
from seqjax.attention import (  # noqa: F401
    additive,  # "additive" (Bahdanau et al. 2015 scores)
    dense,  # "dense", "causal"
    flex,  # "flex" (any pattern: mask function or block mask)
    linear,  # "linear" (Katharopoulos et al. 2020)
    linformer,  # "linformer"
    local,  # "local" (LRA block-local, a flex pattern)
    lsh,  # "lsh"
    performer,  # "performer" (FAVOR+)
    relative,  # "relative" (Transformer-XL)
    sparse,  # "sparse_strided", "sparse_fixed"
)
from seqjax.attention.registry import (
    Mechanism,
    check_options,
    describe,
    get,
    names,
    register,
    spec,
)

__all__ = ["Mechanism", "check_options", "describe", "get", "names", "register", "spec"]
