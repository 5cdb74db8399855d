"""Pathfinder and Path-X as seqjax data sets: TFDS builders, `config.data` checks, `DataInfo`
fields and batches (the images come from `seqjax.data.pathfinder`).

`config.data.name`: `'pathfinder32'` (LRA Pathfinder, 32x32 = 1,024 pixel tokens) or
`'pathx'` (LRA Path-X, 128x128 = 16,384 tokens). Classification (task 'classification'),
vocabulary 256 (one token per 8-bit pixel, no padding), 2 classes (1 = the markers are
connected). The splits are generated once into `config.data.data_dir` (array_record, the
same `tokens`/`label` features as the other LRA builders) and reused; the builder config's
name holds the side, difficulty, seed, split sizes and a hash of the generator's geometry,
and the builder's version is the generator's (`pathfinder.GENERATOR_VERSION`), so changed
parameters or a changed generator are prepared anew instead of silently reusing old files.
The metadata records both (`generator_version`, `parameters`).

    python -m seqjax.data.pathfinder_data experiments/lra_accuracy/results/samples_pathfinder.png

Legend: S image side, P = S * S pixels, b per-process batch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import multiprocessing
import numbers
import os
import sys

import numpy as np
import tensorflow_datasets as tfds

from seqjax.data import images, pathfinder, pipeline, registry, store
from seqjax.data.classification import _ClassificationBuilder

DATASETS = ("pathfinder32", "pathx")
CHUNK = {32: 1024, 128: 128}  # images per generation job (not part of the data's definition)


@dataclasses.dataclass(eq=False)
class PathfinderConfig(tfds.core.BuilderConfig):
    """Config of `seqjax_pathfinder32` / `seqjax_pathx` (named by the generator's spec)."""

    spec: pathfinder.PathfinderSpec = dataclasses.field(default_factory=pathfinder.PathfinderSpec)
    num_procs: int = 0


def _job(args) -> list[tuple[bytes, int]]:
    spec, split, start, stop = args
    x, y, _ = pathfinder.generate(spec, split, start, stop)
    return [(im.tobytes(), int(lab)) for im, lab in zip(x, y)]


def examples(spec: pathfinder.PathfinderSpec, split: str, num_procs: int = 1):
    """(pixel bytes, label) of a split in index order; `num_procs` > 1 generates chunks in
    spawned worker processes (the images do not depend on it)."""
    n, step = spec.split_size(split), CHUNK.get(spec.size, 256)
    jobs = [(spec, split, a, min(n, a + step)) for a in range(0, n, step)]
    num_procs = num_procs or os.cpu_count() or 1
    if num_procs > 1 and len(jobs) > 2:
        with multiprocessing.get_context("spawn").Pool(min(num_procs, len(jobs))) as pool:
            for chunk in pool.imap(_job, jobs):
                yield from chunk
    else:
        for job in jobs:
            yield from _job(job)


class _PathfinderBuilder(_ClassificationBuilder, skip_registration=True):
    """Generated contour images (`seqjax.data.pathfinder`); label 1 = connected."""

    VERSION = tfds.core.Version(pathfinder.GENERATOR_VERSION)
    RELEASE_NOTES = {pathfinder.GENERATOR_VERSION: "seqjax's contour generator."}
    LABEL_NAMES = ("disconnected", "connected")

    def _split_generators(self, dl_manager):
        spec, procs = self.builder_config.spec, self.builder_config.num_procs
        self.info.metadata.update(
            fingerprint=fingerprint(spec),
            generator_version=pathfinder.GENERATOR_VERSION,
            parameters=dataclasses.asdict(spec),
        )
        return {s: self._generate_examples(examples(spec, s, procs)) for s in pathfinder.SPLITS}


class SeqjaxPathfinder32(_PathfinderBuilder):
    ABOUT = "LRA Pathfinder: 32x32 contour images (seqjax's generator), 1,024 uint8 pixels."


class SeqjaxPathx(_PathfinderBuilder):
    ABOUT = "LRA Path-X: 128x128 contour images (seqjax's generator), 16,384 uint8 pixels."


def fingerprint(spec: pathfinder.PathfinderSpec) -> str:
    """sha256 of the generator version and every parameter (the images are a function of it)."""
    text = json.dumps([pathfinder.GENERATOR_VERSION, dataclasses.asdict(spec)], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def spec_of(cfg) -> pathfinder.PathfinderSpec:
    """The generator spec of `config.data` (LRA's preset with the config's difficulty, seed
    and split sizes)."""
    return dataclasses.replace(
        pathfinder.PRESETS[cfg.name],
        contour_length=int(cfg.pathfinder_contour_length),
        seed=int(cfg.seed),
        train_size=int(cfg.pathfinder_train_size),
        validation_size=int(cfg.pathfinder_validation_size),
        test_size=int(cfg.pathfinder_test_size),
    )


def builder_config(cfg) -> PathfinderConfig:
    """The TFDS builder config of a Pathfinder `config.data` (`store.dataset_key` uses it)."""
    spec = spec_of(cfg)
    return PathfinderConfig(name=spec.name, spec=spec, num_procs=int(cfg.pathfinder_num_procs))


def dataset_key(cfg) -> store.DatasetKey:
    """`store.DatasetKey` of a Pathfinder `config.data` (builder config: `builder_config`)."""
    return store.dataset_key(cfg)


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def config_problems(cfg, bad) -> None:
    """Calls `bad(field, value, valid)` for the Pathfinder fields of `config.data`."""
    side = pathfinder.PRESETS[cfg.name].size
    length = cfg.get("pathfinder_contour_length")
    if not _is_int(length) or not 2 <= length <= 20:
        bad("pathfinder_contour_length", length,
            "an integer 2..20 (dashes per target contour; LRA: 14 hard, 9, 6 easy)")  # fmt: skip
    for split in pathfinder.SPLITS:
        field = f"pathfinder_{split}_size"
        if not _is_int(cfg.get(field)) or cfg.get(field) < 2:
            bad(field, cfg.get(field), "an integer >= 2 (both labels in every split)")
    if not _is_int(cfg.get("pathfinder_num_procs")) or cfg.get("pathfinder_num_procs") < 0:
        bad("pathfinder_num_procs", cfg.get("pathfinder_num_procs"), "0 (all cores) or more")
    if (cfg.get("image_task") or "classification") != "classification":
        bad("image_task", cfg.get("image_task"), f"'classification' for {cfg.name}")
    if cfg.get("max_len") and int(cfg.max_len) != side * side:
        bad("max_len", cfg.max_len, f"None or {side * side} (the pixels of a {cfg.name} image)")
    if cfg.get("objective") or cfg.get("packing"):
        field = "objective" if cfg.get("objective") else "packing"
        bad(field, cfg.get(field), f"'' / False for {cfg.name} (labelled images only)")


def info_fields(cfg) -> dict:
    """`DataInfo` fields (prepares the data set on first use)."""
    key = dataset_key(cfg)
    side = pathfinder.PRESETS[cfg.name].size
    splits = store.builder(key).info.splits
    return dict(
        name=cfg.name,
        task="classification",
        vocab_size=pathfinder.VOCAB_SIZE,
        seq_len=side * side,
        num_classes=pathfinder.NUM_CLASSES,
        pad_id=None,
        fingerprint=store.metadata(key)["fingerprint"],
        split_sizes={s: splits[s].num_examples for s in pathfinder.SPLITS},
        encode=images.encode,
        decode=images.decode,
        image_shape=(side, side, 1),
    )


def maker(cfg, split: str, train: bool, layout, source_cls=store.Source):
    """`(maker, num_steps, spec_extra)` of a split; `source_cls(key, split)` is a picklable
    data-source handle (`store.Source`)."""
    key = dataset_key(cfg)
    side = pathfinder.PRESETS[cfg.name].size
    n = store.builder(key).info.splits[split].num_examples
    seed = int(cfg.seed) if train else None
    m = pipeline.Classification(source_cls(key, split), n, side * side, 0, seed, *layout)
    extra = dict(
        fingerprint=store.metadata(key)["fingerprint"],
        contour_length=key.config.spec.contour_length,
    )
    return m, (None if train else math.ceil(n / layout[0])), extra


for _name, _builder in (("pathfinder32", SeqjaxPathfinder32), ("pathx", SeqjaxPathx)):
    registry.register(
        registry.DataSet(
            _name,
            kind="images",
            task="classification",
            info=info_fields,
            make=maker,
            validate=config_problems,
            builder=_builder,
            builder_config=builder_config,
            default_max_len=pathfinder.PRESETS[_name].size ** 2,  # all pixels
        )
    )


def save_examples(path, per_class: int = 4, seed: int = 0) -> None:
    """A PNG grid: `per_class` positive then negative examples per row, one row per
    difficulty of Pathfinder-32 (6, 9, 14 dashes) and one of Path-X (14)."""
    import matplotlib  # noqa: PLC0415 (only for this picture)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    rows = [("pathfinder32", 6), ("pathfinder32", 9), ("pathfinder32", 14), ("pathx", 14)]
    fig, axes = plt.subplots(
        len(rows), 2 * per_class, figsize=(1.5 * 2 * per_class, 1.7 * len(rows))
    )
    for ax_row, (name, length) in zip(axes, rows):
        spec = dataclasses.replace(pathfinder.PRESETS[name], contour_length=length, seed=seed,
                                   train_size=8 * per_class)  # fmt: skip
        x, y, marks = pathfinder.generate(spec, "train")
        order = [*np.flatnonzero(y == 1)[:per_class], *np.flatnonzero(y == 0)[:per_class]]
        for ax, i in zip(ax_row, order):
            ax.imshow(x[i], cmap="gray", vmin=0, vmax=255, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"{name} {length}: {'connected' if y[i] else 'not'}", fontsize=6)
    fig.suptitle(
        "seqjax Pathfinder generator: label 1 (left) / 0 (right) per difficulty", fontsize=9
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    save_examples(sys.argv[1] if len(sys.argv) > 1 else "samples_pathfinder.png")
