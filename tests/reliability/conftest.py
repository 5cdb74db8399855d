"""Fixtures of the fault suite: the training tests' tiny corpus and subprocess helpers.

``tests/train/conftest.py`` is loaded by path and its fixtures re-exported (test modules
cannot import a conftest by name under ``--import-mode=importlib``).
"""

from __future__ import annotations

from pathlib import Path

from seqjax.configs import common

_train = common.load_file(
    Path(__file__).parents[1] / "train" / "conftest.py", "seqjax_tests_train_conftest"
)

corpus = _train.corpus
helpers = _train.helpers
reference_losses = _train.reference_losses
