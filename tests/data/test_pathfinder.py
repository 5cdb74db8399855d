"""Pathfinder / Path-X: the seeded contour generator (determinism, balanced labels, labels
that match the images' connectivity, class-independent pixel statistics), the TFDS builder
through `seqjax.data` (batches = generated images, exact resume, versioned metadata), the
bad-input errors, and the configs' smoke runs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import seqjax.data as sd
from seqjax.data import pathfinder as pf
from seqjax.data import pathfinder_data, sources, store
from seqjax.train import config_validation
from tests.conftest import REPO


def spec32(n: int = 200, **kw) -> pf.PathfinderSpec:
    return dataclasses.replace(pf.PRESETS["pathfinder32"], train_size=n, **kw)


@pytest.fixture(scope="module")
def lra32():
    """400 Pathfinder-32 images at LRA's difficulty (14 dashes)."""
    return pf.generate(spec32(400), "train")


def test_generator_is_a_function_of_seed_split_and_index():
    spec = spec32(24)
    x, y, m = pf.generate(spec, "train")
    assert x.shape == (24, 32, 32) and x.dtype == np.uint8 and m.shape == (24, 2, 2)
    a = pf.generate(spec, "train", 0, 10, chunk=3)  # other chunks, other slices: same images
    b = pf.generate(spec, "train", 10, 24, chunk=5)
    np.testing.assert_array_equal(np.concatenate([a[0], b[0]]), x)
    np.testing.assert_array_equal(np.concatenate([a[1], b[1]]), y)
    other_split = pf.generate(dataclasses.replace(spec, test_size=24), "test")[0]
    other_seed = pf.generate(dataclasses.replace(spec, seed=1), "train")[0]
    assert not np.array_equal(other_split, x) and not np.array_equal(other_seed, x)


@pytest.mark.parametrize("length", [6, 14])
def test_labels_balanced_and_match_connectivity(length, lra32):
    """Label 1 iff the markers are in one component of the non-zero pixels dilated by the
    gap-closing radius (positives connected through the dashes, negatives not touching)."""
    x, y, m = lra32 if length == 14 else pf.generate(spec32(101, contour_length=length), "train")
    n = len(y)
    assert np.bincount(y).tolist() == [n // 2, n - n // 2]  # exactly balanced
    dilation = pf.PRESETS["pathfinder32"].dilation
    connected = np.array([pf.markers_connected(im, mk, dilation) for im, mk in zip(x, m)])
    np.testing.assert_array_equal(connected, y.astype(bool))
    # Without the dilation of the gaps the positives would not all be connected (the dashes
    # are separate) only when the gap exceeds a pixel; at 32x32 the gap is one pixel (r = 0).
    assert dilation == 0 and pf.PRESETS["pathx"].dilation == 1
    # The markers are drawn: full-intensity pixels at both centres.
    for im, mk in zip(x[:20], m[:20]):
        for cx, cy in np.floor(mk).astype(int):
            assert im[cy, cx] >= 200


def test_pathx_labels_match_connectivity():
    spec = dataclasses.replace(pf.PRESETS["pathx"], train_size=12)
    x, y, m = pf.generate(spec, "train")
    assert x.shape == (12, 128, 128) and np.bincount(y).tolist() == [6, 6]
    connected = [pf.markers_connected(im, mk, spec.dilation) for im, mk in zip(x, m)]
    assert connected == y.astype(bool).tolist()
    # A dilation that does not close the 2.5-pixel gaps leaves positives split into dashes.
    assert not all(pf.markers_connected(im, mk, 0) for im, mk in zip(x[y == 1], m[y == 1]))


def test_pixel_statistics_do_not_reveal_the_label(lra32):
    """Mean intensity and the share of lit pixels agree between the classes within sampling
    error, and the best threshold on the lit-pixel count (chosen on half the images) is near
    chance on the other half."""
    x, y, _ = lra32
    for stat in (x.reshape(len(x), -1).mean(1), (x > 0).reshape(len(x), -1).mean(1)):
        a, b = stat[y == 1], stat[y == 0]
        se = np.sqrt(a.var() / len(a) + b.var() / len(b))
        assert abs(a.mean() - b.mean()) < 4 * se + 1e-9
    count = (x > 0).reshape(len(x), -1).sum(1)
    fit, held = slice(0, 200), slice(200, 400)

    def accuracy(t, s, part):
        guess = (count[part] > t) if s else (count[part] <= t)
        return float(np.mean(guess == y[part].astype(bool)))

    best = max(((t, s) for t in np.unique(count[fit]) for s in (0, 1)),
               key=lambda ts: accuracy(*ts, fit))  # fmt: skip
    assert accuracy(*best, held) < 0.62  # chance 0.5; 2.5 SE at n=200 is 0.59


@pytest.fixture(scope="module")
def pf_cfg(tmp_path_factory):
    tfds = tmp_path_factory.mktemp("pf_tfds")

    def cfg(**kw):
        c = sd.default_config()
        c.name, c.data_dir, c.batch_size, c.prefetch = "pathfinder32", str(tfds), 8, 2
        c.pathfinder_train_size, c.pathfinder_validation_size = 20, 10
        c.pathfinder_test_size, c.pathfinder_num_procs = 10, 1
        for k, v in kw.items():
            c[k] = v
        return c

    return cfg


def test_builder_batches_are_the_generated_images(pf_cfg):
    cfg = pf_cfg()
    info = sd.info(cfg)
    assert (info.task, info.vocab_size, info.num_classes, info.seq_len) == (
        "classification", 256, 2, 1024)  # fmt: skip
    assert info.split_sizes == {"train": 20, "validation": 10, "test": 10}
    assert info.image_shape == (32, 32, 1) and info.pad_id is None
    key = pathfinder_data.dataset_key(cfg)
    meta = store.metadata(key)
    assert meta["generator_version"] == pf.GENERATOR_VERSION
    assert meta["parameters"]["contour_length"] == 14 and meta["fingerprint"] == info.fingerprint
    x, y, _ = pf.generate(pathfinder_data.spec_of(cfg), "test")
    batches = list(sd.make(cfg, split="test", train=False))
    assert len(batches) == 2
    inputs = np.concatenate([b["inputs"] for b in batches])[:10]
    np.testing.assert_array_equal(inputs, x.reshape(10, -1))
    np.testing.assert_array_equal(np.concatenate([b["targets"] for b in batches])[:10], y)
    np.testing.assert_array_equal(batches[1]["weights"], [1, 1, 0, 0, 0, 0, 0, 0])
    # Another difficulty or generator parameter is another prepared data set.
    other = pathfinder_data.dataset_key(pf_cfg(pathfinder_contour_length=9))
    assert other.config_name != key.config_name and "len9" in other.config_name


def test_exact_resume(pf_cfg):
    it = sd.make(pf_cfg(), split="train")
    for _ in range(3):  # past the end of the 20-image epoch
        next(it)
    state = it.get_state()
    want = [next(it) for _ in range(2)]
    again = sd.make(pf_cfg(), split="train")
    again.set_state(state)
    for w in want:
        got = next(again)
        for k in w:
            np.testing.assert_array_equal(got[k], w[k])


@pytest.mark.parametrize(
    "field,value",
    [("pathfinder_contour_length", 1), ("pathfinder_contour_length", 21),
     ("pathfinder_test_size", 1), ("pathfinder_num_procs", -1), ("max_len", 100),
     ("image_task", "generation"), ("objective", "mlm")],
)  # fmt: skip
def test_bad_fields_name_the_field(pf_cfg, field, value):
    """One error naming `config.data.<field>` and the valid values, before any data is made
    (`seqjax.main` turns the validation error into exit status 2)."""
    with pytest.raises(sources.DataError, match=rf"config\.data\.{field}=.* valid: "):
        sd.info(pf_cfg(**{field: value}))
    config = pathfinder_config("smoke")
    config.data[field] = value
    with pytest.raises(config_validation.ConfigError, match=rf"data\.{field}"):
        config_validation.validate(config)


def test_no_room_is_a_clear_error():
    with pytest.raises(sources.DataError, match="no room for two contours of 20 dashes"):
        pf.generate(spec32(2, contour_length=20, size=16, target_candidates=2), "train")


def pathfinder_config(variant, name="lra_pathfinder.py"):
    from seqjax.configs import common

    config = common.load_file(REPO / "configs" / name, f"cfg_{name[:-3]}").get_config(variant)
    config.mesh.data = 1
    return config


def _smoke_train(config, tmp_path):
    from seqjax import main as seqjax_main

    config.data.data_dir = str(tmp_path / "tfds")
    result = seqjax_main.train(config, str(tmp_path / "work"))
    assert result["step"] == config.train.num_steps
    assert "validation/accuracy" in (tmp_path / "work" / "metrics.jsonl").read_text()


def test_lra_pathfinder_smoke_trains(tmp_path):
    _smoke_train(pathfinder_config("smoke"), tmp_path)


@pytest.mark.slow
def test_lra_pathx_smoke_trains(tmp_path):
    """Dense attention over 16,384 pixels: tens of seconds a step on a CPU."""
    _smoke_train(pathfinder_config("smoke", "lra_pathx.py"), tmp_path)
