"""Sequence classification with a bidirectional encoder (``DataInfo.task``
'classification'): the Long Range Arena's ListOps and byte-level Text tasks (Tay et al.
2020, §2.2), one label per padded sequence.

Batches: ``inputs`` int32 ``[B, T]`` (0 = pad), ``targets`` int32 ``[B]`` labels,
``weights`` float32 ``[B]`` (0 for the rows that pad the last batch). The model is
``TransformerClassifier`` (mean or CLS pooling, ``config.model.pooling``); evaluation
reports accuracy; throughput counts examples.

Pixel classification (``data.image_task='classification'``) draws a picture at every
evaluation (``eval_pictures``): a few inputs with their predicted and true classes.

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

    def eval_pictures(self, run, params, split: str, *, num: int, seed: int = 0) -> dict:
        """Pixel classification (``info.image_shape`` set): ``{'predictions': picture}`` of
        the first ``num`` images of ``split`` as the model sees them, each titled with its
        predicted and true class (green when right, red when wrong). Text data: none."""
        import copy

        import jax
        import numpy as np

        from seqjax import data as data_lib
        from seqjax.data import store
        from seqjax.tasks import image_grid

        del seed
        h, w, _ = run.info.image_shape or (0, 0, 0)
        if not h:
            return {}
        data_cfg = copy.deepcopy(run.config.data)
        data_cfg.batch_size = int(num) * jax.process_count()  # num rows on every process
        it = data_lib.make(data_cfg, split=split, process_index=jax.process_index(),
                           process_count=jax.process_count(), train=False)  # fmt: skip
        try:
            batch = next(iter(it))
        finally:
            it.close()
        keep = batch["weights"] > 0  # not the rows padding a split shorter than num
        x_NT, y_N = batch["inputs"][keep], batch["targets"][keep]
        model = run.model
        logits_NK = jax.jit(lambda p, x: model.apply({"params": p}, x, deterministic=True))(
            params, x_NT
        )
        pred_N = np.asarray(jax.device_get(logits_NK)).argmax(-1)
        names = store.builder(store.dataset_key(data_cfg)).info.features["label"].names
        titles = [f"pred {names[p]}\ntrue {names[t]}" for p, t in zip(pred_N, y_N)]
        colors = ["tab:green" if p == t else "tab:red" for p, t in zip(pred_N, y_N)]
        pixels = x_NT[:, : h * w].reshape(-1, h, w, 1)
        return {"predictions": image_grid.labelled_grid(pixels, titles, colors)}


TASK = registry.register(Classification())
