"""Fixtures of the fault suite: the training tests' tiny corpus and subprocess helpers.

``tests/train/conftest.py`` is loaded by path and its fixtures re-exported (test modules
cannot import a conftest by name under ``--import-mode=importlib``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "seqjax_tests_train_conftest", Path(__file__).parents[1] / "train" / "conftest.py"
)
_train = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_train)

corpus = _train.corpus
helpers = _train.helpers
reference_losses = _train.reference_losses
