"""Sequence classification with a bidirectional encoder (``DataInfo.task``
'classification'): the Long Range Arena's ListOps and byte-level Text tasks (Tay et al.
2020, §2.2), one label per padded sequence.

Batches: ``inputs`` int32 ``[B, T]`` (0 = pad), ``targets`` int32 ``[B]`` labels,
``weights`` float32 ``[B]`` (0 for the rows that pad the last batch). The model is
``TransformerClassifier`` (mean or CLS pooling, ``config.model.pooling``); evaluation
reports accuracy; throughput counts examples.

Legend: B batch, T = ``data.max_len`` (+1 for the CLS position inside the model).
"""

from __future__ import annotations

from seqjax.data.config import CLASSIFICATION_DATASETS, IMAGE_DATASETS
from seqjax.tasks import base, registry


class Classification(base.Task):
    name = "classification"
    datasets = CLASSIFICATION_DATASETS + IMAGE_DATASETS  # images: data.image_task (handles)
    batch_fields = {
        "inputs": ("int32", 2),
        "targets": ("int32", 1),
        "weights": ("float32", 1),
    }
    unit = "ex"
    causal = False
    length_field = "data.max_len"

    def handles(self, data_config) -> bool:
        """Image sets are classified unless ``data.image_task='generation'``."""
        return (
            data_config.get("image_task") != "generation" or data_config.name not in IMAGE_DATASETS
        )

    def input_length(self, config) -> int:
        """``data.max_len`` (the data set's default when None) + 1 with CLS pooling."""
        from seqjax.data import api as data_api

        return data_api.max_len(config.data) + (1 if config.model.pooling == "cls" else 0)

    def model_config(self, config, info):
        from seqjax.models import from_config

        return from_config.transformer_config(
            config, info, causal=False, num_classes=int(info.num_classes)
        )

    def make_model(self, model_cfg, *, decode: bool = False):
        from seqjax.models.transformer import TransformerClassifier

        if decode:
            raise ValueError("the classifier has no decoding mode")
        return TransformerClassifier(model_cfg)

    def init_shapes(self, config, info) -> tuple:
        """The padded tokens ``[1, max_len]`` (the model adds the CLS position itself)."""
        from seqjax.data import api as data_api

        return ((1, data_api.max_len(config.data)),)

    def tokens_per_step(self, config) -> int:
        """Examples per step (the progress line shows ex/s)."""
        return int(config.data.batch_size)


TASK = registry.register(Classification())
