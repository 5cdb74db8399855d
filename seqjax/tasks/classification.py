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

from seqjax.tasks import base, registry


class Classification(base.Task):
    name = "classification"
    batch_fields = {
        "inputs": ("int32", 2),
        "targets": ("int32", 1),
        "weights": ("float32", 1),
    }
    unit = "ex"

    def describe_data(self, config, info) -> str:
        """Examples (texts, or images of ``DataInfo.image_shape``) of ``max_len`` inputs."""
        d, shape = config.data, getattr(info, "image_shape", None)
        what = "images" if shape else "examples"
        one = (f"{'x'.join(map(str, shape))} pixels" if shape
               else f"{self.input_length(config)} tokens")  # fmt: skip
        classes = getattr(info, "num_classes", None)
        return (f"{d.name}, {what} of {one}, {classes} classes, batch {d.batch_size}; "
                f"splits ({what}): {base.split_sizes(info)}")  # fmt: skip

    causal = False
    length_field = "data.max_len"

    def input_length(self, config) -> int:
        """``data.max_len`` (the data set's default when None) + 1 with CLS pooling (packed
        rows: + K = ``data.max_examples_per_row``, one CLS slot per example)."""
        from seqjax.data import api as data_api

        cls = 1 if config.model.get("pooling") == "cls" else 0
        if cls and config.data.get("packing"):  # seqjax.models.transformer.packed_cls_rows
            cls = int(config.data.get("max_examples_per_row", 8))
        return data_api.max_len(config.data) + cls

    def needs(self, config, info):
        """A bidirectional encoder with ``info.num_classes`` outputs."""
        from seqjax.models.registry import Needs

        return Needs(self.name, causal=False, num_classes=int(info.num_classes))

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

    # ---- packing (config.data.packing; seqjax.data.packing) -------------------------------

    def configure(self, config):
        """With ``config.data.packing``: the packed rows' task (one label per example)."""
        return PACKED if config.data.get("packing") else self

    def validate(self, config, bad) -> None:
        """Packing only with mechanisms that honour segments (``packing_checks.model_problems``);
        CLS pooling shifts each example by its CLS slots, so it takes no block alignment."""
        from seqjax.tasks import packing_checks

        packing_checks.model_problems(config, bad)
        if config.data.get("packing") and config.model.get("pooling") == "cls":
            need = packing_checks.alignment(config)
            if need > 1:
                bad("model.pooling", "cls", f"'mean' with data.packing=True and model.attention="
                    f"{config.model.attention!r} (its blocks of {need} positions would cut "
                    "each example's CLS-shifted row differently than alone)")  # fmt: skip


class PackedClassification(Classification):
    """Classification of packed rows: ``inputs``/``segment_ids``/``positions`` ``[B, T]``,
    ``targets`` int32 and ``weights`` float32 ``[B, K]`` (K = ``data.max_examples_per_row``,
    weight 1 per real example); the model pools per segment and gives ``[B, K, C]`` logits,
    so loss and accuracy average over the real examples."""

    unit = "row"
    batch_fields = {
        "inputs": ("int32", 2),
        "segment_ids": ("int32", 2),
        "positions": ("int32", 2),
        "targets": ("int32", 2),
        "weights": ("float32", 2),
    }

    def apply(self, model, params, batch, *, rng, train: bool, memory=None):
        del memory
        rngs = {"dropout": rng} if train else {}
        out = model.apply(
            {"params": params}, batch["inputs"], segment_ids=batch["segment_ids"],
            positions_BT=batch["positions"], num_segments=batch["targets"].shape[1],
            rngs=rngs, deterministic=not train,
        )  # fmt: skip
        return out, None


TASK = registry.register(Classification())
PACKED = PackedClassification()  # not registered: ``TASK.configure`` returns it
