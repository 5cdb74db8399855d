"""Downsampled ImageNet 64x64: the builder on small files of the release's format that the
tests write (npz batches with `data` uint8 [n, 12288] channel-planar, 1-based `labels`,
`mean`; extracted or inside the three zips), the raster order of the generation sequence,
the held-out validation, checksums, and the bad-file errors; and the smoke variants of the
full-scale image configs (``configs/imagenet64.py``, ``configs/sparse_transformer_cifar10.py``)
training on such files."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

import seqjax.data as sd
from seqjax.data import corpora, imagenet64, sources, store

PER_BATCH, N_TEST, HELD_OUT = 3, 5, 2


def npz_bytes(data, labels, *, mean=True, **extra) -> bytes:
    """An `.npz` like the release's: `data`, `labels` (and `mean` in training batches)."""
    fields = {"data": data, "labels": labels, **extra}
    if mean:
        fields["mean"] = data.mean(axis=0) if len(data) else np.zeros(data.shape[1])
    buf = io.BytesIO()
    np.savez(buf, **fields)
    return buf.getvalue()


def release(seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{npz name: (data uint8 [n, 12288], labels 1..1000)} of a tiny release."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in imagenet64.NPZ_FILES:
        n = N_TEST if name == imagenet64.TEST_FILE else PER_BATCH
        data = rng.integers(0, 256, (n, 12288), dtype=np.uint8)
        out[name] = (data, rng.integers(1, 1001, n).astype(np.int64))
    return out


def write_extracted(folder: Path, files: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, (data, labels) in files.items():
        (folder / name).write_bytes(npz_bytes(data, labels, mean=name != imagenet64.TEST_FILE))


def write_zips(folder: Path, files: dict) -> None:
    """The three release zips (batches 1..5, 6..10, val) with a top folder inside each."""
    folder.mkdir(parents=True, exist_ok=True)
    parts = {
        "Imagenet64_train_part1_npz.zip": imagenet64.TRAIN_FILES[:5],
        "Imagenet64_train_part2_npz.zip": imagenet64.TRAIN_FILES[5:],
        "Imagenet64_val_npz.zip": (imagenet64.TEST_FILE,),
    }
    for zip_name, members in parts.items():
        with zipfile.ZipFile(folder / zip_name, "w") as z:
            for m in members:
                data, labels = files[m]
                z.writestr(f"{zip_name[:-4]}/{m}", npz_bytes(data, labels))


def hwc_reference(data_nD: np.ndarray) -> np.ndarray:
    """Raster order with R, G, B innermost, indexed by hand from the planar rows: the
    sub-pixel of row r, column c, channel k is at k * 4096 + r * 64 + c."""
    n = len(data_nD)
    r, c, k = np.meshgrid(np.arange(64), np.arange(64), np.arange(3), indexing="ij")
    planar_index = (k * 4096 + r * 64 + c).reshape(-1)  # in raster (r, c, k) order
    return data_nD[np.arange(n)[:, None], planar_index[None, :]]


@pytest.fixture
def held_out(monkeypatch):
    monkeypatch.setattr(imagenet64, "VALIDATION", HELD_OUT)


def test_extracted_files_give_raster_order_labels_and_splits(tmp_path, make_cfg, held_out):
    files = release()
    write_extracted(tmp_path / "src" / "imagenet64", files)
    cfg = make_cfg(name="imagenet64", image_task="generation", manual_dir=str(tmp_path / "src"),
                   data_dir=str(tmp_path / "tfds"), batch_size=4)  # fmt: skip
    info = sd.info(cfg)
    assert (info.task, info.seq_len, info.vocab_size, info.image_shape) == (
        "image_generation", 12288, 257, (64, 64, 3))  # fmt: skip
    n_train = 10 * PER_BATCH - HELD_OUT
    assert info.split_sizes == {"train": n_train, "validation": HELD_OUT, "test": N_TEST}
    test = next(iter(sd.make(cfg, split="test", train=False)))
    data, labels = files["val_data.npz"]
    np.testing.assert_array_equal(test["targets"], hwc_reference(data[:4]))
    np.testing.assert_array_equal(test["inputs"][:, 0], 256)  # BOS, then x_0 .. x_{D-2}
    np.testing.assert_array_equal(test["inputs"][:, 1:], test["targets"][:, :-1])
    # The first pixel is R, G, B of the top-left corner; the fourth value starts pixel (0, 1).
    np.testing.assert_array_equal(test["targets"][:, :4], data[:4][:, [0, 4096, 8192, 1]])
    # Validation = the last HELD_OUT images of train_data_batch_10.
    val = next(iter(sd.make(cfg, split="validation", train=False)))
    last, last_labels = files["train_data_batch_10.npz"]
    np.testing.assert_array_equal(val["targets"][:HELD_OUT], hwc_reference(last[-HELD_OUT:]))
    assert val["weights"][HELD_OUT:].sum() == 0  # padding rows of the last batch
    # Classification reads the same files: labels 0-based, pixels as grayscale.
    cfg.image_task = "classification"
    assert sd.info(cfg).num_classes == 1000 and sd.info(cfg).seq_len == 4096
    cls = next(iter(sd.make(cfg, split="test", train=False)))
    np.testing.assert_array_equal(cls["targets"], labels[:4] - 1)
    rgb = hwc_reference(data[:4]).reshape(4, 4096, 3).astype(np.float64)
    gray = np.rint(rgb @ np.array([0.2989, 0.5870, 0.1140]))
    assert np.abs(cls["inputs"] - gray).max() <= 1


def test_zips_are_checksum_checked(tmp_path, make_cfg, held_out):
    files = release(seed=1)
    write_zips(tmp_path / "src", files)
    cfg = make_cfg(name="imagenet64", image_task="generation", manual_dir=str(tmp_path / "src"),
                   data_dir=str(tmp_path / "tfds"), batch_size=4)  # fmt: skip
    with pytest.raises(sources.ChecksumMismatchError, match="Imagenet64_train_part1_npz.zip"):
        sd.info(cfg)
    cfg.accept_checksum_mismatch = True
    assert sd.info(cfg).split_sizes["train"] == 10 * PER_BATCH - HELD_OUT
    batch = next(iter(sd.make(cfg, split="test", train=False)))
    np.testing.assert_array_equal(batch["targets"], hwc_reference(files["val_data.npz"][0][:4]))
    cfg.accept_checksum_mismatch = False  # prepared from unknown zips: refused without the flag
    store.builder.cache_clear()
    with pytest.raises(sources.ChecksumMismatchError, match="prepared data"):
        sd.info(cfg)


def test_download_path_asks_for_the_official_zips(tmp_path):
    """Without the files in manual_dir, TFDS's download manager is asked for the three
    release URLs (a stand-in manager serves local copies), each then sha256-checked."""
    write_zips(tmp_path / "served", release(seed=4))
    asked = []

    class DownloadManager:
        def download(self, url):
            asked.append(url)
            return tmp_path / "served" / url.rsplit("/", 1)[1]

    options = corpora.SourceOptions(manual_dir=str(tmp_path / "empty"), download=True,
                                    accept_checksum_mismatch=True)  # fmt: skip
    openers, fingerprint, known = imagenet64.find_sources(options, DownloadManager())
    assert asked == [f"http://www.image-net.org/data/downsample/{name}"
                     for name, _, _ in imagenet64.ZIP_FILES]  # fmt: skip
    assert sorted(openers) == sorted(imagenet64.NPZ_FILES)
    assert known == "the published Imagenet64 zips" and len(fingerprint) == 64
    with openers["val_data.npz"]() as f:
        assert imagenet64.read_npz(f, "val")[0].shape == (N_TEST, 64, 64, 3)
    with pytest.raises(sources.ChecksumMismatchError, match="9422dc1dc5d0"):
        imagenet64.find_sources(corpora.SourceOptions(manual_dir=None, download=True),
                                DownloadManager())  # fmt: skip


def test_missing_files_name_the_zips_and_url(tmp_path, make_cfg):
    cfg = make_cfg(name="imagenet64", manual_dir=str(tmp_path), data_dir=str(tmp_path / "t"))
    with pytest.raises(sources.SourceMissingError, match=r"Imagenet64_train_part1_npz.zip.*"
                       r"image-net.org/data/downsample"):  # fmt: skip
        sd.info(cfg)


def test_label_out_of_range_names_the_file_and_field(tmp_path, make_cfg, held_out):
    files = release(seed=2)
    data, labels = files["train_data_batch_4.npz"]
    files["train_data_batch_4.npz"] = (data, np.where(np.arange(len(labels)) == 1, 0, labels))
    write_extracted(tmp_path / "src", files)
    cfg = make_cfg(name="imagenet64", manual_dir=str(tmp_path / "src"),
                   data_dir=str(tmp_path / "tfds"))  # fmt: skip
    with pytest.raises(
        sources.DataError, match=r"train_data_batch_4.npz: field 'labels' holds 0, outside 1..1000"
    ):
        sd.info(cfg)  # fmt: skip


@pytest.mark.parametrize(
    "fields, match",
    [
        ({"labels": np.array([1])}, "has no field 'data'"),
        ({"data": np.zeros((1, 12288), np.uint8)}, "has no field 'labels'"),
        ({"data": np.zeros((1, 12288), np.int32), "labels": [1]}, r"'data' is int32\[1, 12288\]"),
        ({"data": np.zeros((2, 3072), np.uint8), "labels": [1, 2]}, r"uint8 \[n, 12288\]"),
        ({"data": np.zeros((2, 12288), np.uint8), "labels": [1]}, "2 integer labels"),
        ({"data": np.zeros((1, 12288), np.uint8), "labels": [1001]}, "holds 1001"),
    ],
)
def test_read_npz_refuses_other_formats(fields, match):
    buf = io.BytesIO()
    np.savez(buf, **fields)
    with pytest.raises(sources.DataError, match=match):
        imagenet64.read_npz(io.BytesIO(buf.getvalue()), "x.npz")


def test_read_npz_refuses_a_non_npz_and_pickles():
    with pytest.raises(sources.DataError, match="not a numpy .npz"):
        imagenet64.read_npz(io.BytesIO(b"\x89PNG\r\n" + bytes(64)), "x.npz")
    buf = io.BytesIO()
    np.savez(buf, data=np.zeros((1, 12288), np.uint8), labels=np.array([{"a": 1}], object))
    with pytest.raises(sources.DataError, match="cannot be read"):  # no pickle is ever loaded
        imagenet64.read_npz(io.BytesIO(buf.getvalue()), "x.npz")


# ----------------------------------------- the full-scale image configs' smoke variants


def _smoke(config_file: str, manual_dir, data_dir):
    from seqjax.configs import common
    from tests.conftest import REPO

    config = common.load_file(REPO / "configs" / config_file, "smoke_cfg").get_config("smoke")
    config.data.manual_dir, config.data.data_dir = str(manual_dir), str(data_dir)
    config.data.accept_checksum_mismatch, config.data.download = True, False
    config.mesh.data = 1
    return config


@pytest.mark.slow  # 12,288-token sequences: about 30 s on a 2-core CPU
def test_imagenet64_smoke_config_trains_on_release_format_files(tmp_path, held_out):
    from seqjax.train import loop

    write_zips(tmp_path / "src", release(seed=3))
    config = _smoke("imagenet64.py", tmp_path / "src", tmp_path / "tfds")
    result = loop.train_and_evaluate(config, str(tmp_path / "work"))
    assert result["step"] == 2
    metrics = (tmp_path / "work" / "metrics.jsonl").read_text()
    assert "validation/bits_per_dim" in metrics


@pytest.mark.slow  # 5,062 images to prepare and 3,072-token sequences
def test_cifar10_smoke_config_trains_on_release_format_files(tmp_path):
    from seqjax.train import loop
    from tests.data.test_data_images import write_cifar10

    (tmp_path / "src").mkdir()
    write_cifar10(tmp_path / "src" / "cifar-10-python.tar.gz")
    config = _smoke("sparse_transformer_cifar10.py", tmp_path / "src", tmp_path / "tfds")
    result = loop.train_and_evaluate(config, str(tmp_path / "work"))
    assert result["step"] == 2
    assert "validation/bits_per_dim" in (tmp_path / "work" / "metrics.jsonl").read_text()
