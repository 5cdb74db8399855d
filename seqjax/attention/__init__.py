"""Attention mechanisms behind one interface.

``seqjax.attention.get(name)`` returns a pure function
``fn(q, k, v, *, causal=False, mask=None, segment_ids=None, dropout_rate=0.0,
dropout_rng=None, **options) -> out`` on ``[batch, seq, heads, head_dim]`` arrays;
``seqjax.attention.names()`` lists what is registered. Importing this package registers
every built-in mechanism.
"""

from seqjax.attention import dense  # noqa: F401  (registers "dense", "causal")
from seqjax.attention import sparse  # noqa: F401
from seqjax.attention import linformer  # noqa: F401
from seqjax.attention import lsh  # noqa: F401  (registers "lsh")
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
