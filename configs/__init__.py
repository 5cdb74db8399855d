"""The shipped job configs, also importable from an installed package as ``seqjax.configs``.

``seqjax-train --config seqjax.configs.char_lm:smoke --workdir runs/smoke`` works from any
directory; ``--config configs/char_lm.py`` is the same file in a checkout.
"""
