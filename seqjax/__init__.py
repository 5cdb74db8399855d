"""seqjax: long-sequence Transformers in JAX/Flax."""

__version__ = "0.1.0"
