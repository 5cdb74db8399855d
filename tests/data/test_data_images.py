"""Image data as pixel sequences: the Fashion-MNIST builder (on small IDX files the tests
write, and once on the real files), classification and generation batches, exact resume,
and the bad-input errors."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import numpy as np
import pytest

import seqjax.data as sd
from seqjax.data import images, sources, store

N_TRAIN, N_TEST = images.FASHION_MNIST_VALIDATION + 40, 24


def idx_bytes(array: np.ndarray) -> bytes:
    """An IDX file of uint8 `array` (magic 00 00 08 ndim, big-endian sizes, data)."""
    head = bytes([0, 0, 8, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return head + np.ascontiguousarray(array, np.uint8).tobytes()


def write_fashion_mnist(folder: Path, seed: int = 0, labels_max: int = 9, **override) -> dict:
    """Writes the four gz IDX files of a small Fashion-MNIST; returns the arrays."""
    rng = np.random.default_rng(seed)
    arrays = {
        "train-images-idx3-ubyte.gz": rng.integers(0, 256, (N_TRAIN, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte.gz": rng.integers(0, labels_max + 1, N_TRAIN, dtype=np.uint8),
        "t10k-images-idx3-ubyte.gz": rng.integers(0, 256, (N_TEST, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte.gz": rng.integers(0, 10, N_TEST, dtype=np.uint8),
    }
    folder.mkdir(parents=True, exist_ok=True)
    for name, a in arrays.items():
        data = override.get(name) or gzip.compress(idx_bytes(a), mtime=0)
        (folder / name).write_bytes(data)
    return arrays


@pytest.fixture(scope="module")
def fmnist(tmp_path_factory, make_cfg):
    root = tmp_path_factory.mktemp("fmnist")
    arrays = write_fashion_mnist(root / "src" / "fashion_mnist")

    def cfg(**kw):
        base = dict(name="fashion_mnist", manual_dir=str(root / "src"), batch_size=16,
                    accept_checksum_mismatch=True, data_dir=str(root / "tfds"))  # fmt: skip
        return make_cfg(**{**base, **kw})

    return cfg, arrays


def test_read_idx_round_trip_and_bad_formats(tmp_path):
    a = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    (tmp_path / "ok.gz").write_bytes(gzip.compress(idx_bytes(a)))
    np.testing.assert_array_equal(images.read_idx(tmp_path / "ok.gz", 3), a)
    (tmp_path / "png.gz").write_bytes(gzip.compress(b"\x89PNG\r\n\x1a\n" + bytes(100)))
    with pytest.raises(sources.DataError, match="not an IDX file of unsigned bytes"):
        images.read_idx(tmp_path / "png.gz", 3)
    (tmp_path / "short.gz").write_bytes(gzip.compress(idx_bytes(a)[:-5]))
    with pytest.raises(sources.DataError, match="truncated or corrupt"):
        images.read_idx(tmp_path / "short.gz", 3)
    (tmp_path / "badgz.gz").write_bytes(b"\x1f\x8b" + bytes(30))
    with pytest.raises(sources.DataError, match="cannot be read"):
        images.read_idx(tmp_path / "badgz.gz", 3)


def test_classification_batches_are_the_files_pixels(fmnist):
    cfg, arrays = fmnist
    info = sd.info(cfg())
    assert (info.task, info.vocab_size, info.num_classes, info.pad_id) == (
        "classification",
        256,
        10,
        None,
    )
    assert (info.seq_len, info.image_shape) == (784, (28, 28, 1))
    assert info.split_sizes == {"train": 40, "validation": 5_000, "test": N_TEST}
    x = arrays["train-images-idx3-ubyte.gz"].reshape(N_TRAIN, 784)
    y = arrays["train-labels-idx1-ubyte.gz"]
    val = next(iter(sd.make(cfg(), split="validation", train=False)))  # the LAST 5,000 of train
    np.testing.assert_array_equal(val["inputs"], x[40:56])
    np.testing.assert_array_equal(val["targets"], y[40:56])
    test = list(sd.make(cfg(), split="test", train=False))
    assert len(test) == 2 and test[1]["weights"].tolist() == [1] * 8 + [0] * 8
    np.testing.assert_array_equal(
        test[0]["inputs"], arrays["t10k-images-idx3-ubyte.gz"][:16].reshape(16, 784)
    )
    train = next(iter(sd.make(cfg(), split="train")))  # shuffled rows of the first 40 only
    where = {bytes(r): i for i, r in enumerate(x[:40])}
    rows = [where[bytes(r.astype(np.uint8))] for r in train["inputs"]]
    assert len(set(rows)) == 16
    np.testing.assert_array_equal(train["targets"], y[rows])


def test_generation_batches_shift_by_one_with_bos(fmnist):
    cfg, arrays = fmnist
    info = sd.info(cfg(image_task="generation"))
    assert (info.task, info.vocab_size, info.bos_id, info.seq_len) == (
        "image_generation",
        257,
        256,
        784,
    )
    batch = next(iter(sd.make(cfg(image_task="generation"), split="test", train=False)))
    x = arrays["t10k-images-idx3-ubyte.gz"][:16].reshape(16, 784)
    np.testing.assert_array_equal(batch["targets"], x)
    np.testing.assert_array_equal(batch["inputs"][:, 0], 256)
    np.testing.assert_array_equal(batch["inputs"][:, 1:], x[:, :-1])
    assert batch["weights"].shape == (16, 784) and batch["weights"].dtype == np.float32


def test_exact_resume(fmnist):
    cfg, _ = fmnist
    for task in images.IMAGE_TASKS:
        it = sd.make(cfg(image_task=task), split="train")
        for _ in range(3):  # past the end of the 40-image epoch
            next(it)
        state = it.get_state()
        want = [next(it) for _ in range(2)]
        again = sd.make(cfg(image_task=task), split="train")
        again.set_state(state)
        for w in want:
            got = next(again)
            for k in w:
                np.testing.assert_array_equal(got[k], w[k])


def test_bad_inputs(tmp_path, make_cfg):
    bad = [("image_task", "gen", "image_task='gen'"), ("max_len", 100, "max_len=100")]
    for field, value, match in bad:
        with pytest.raises(sources.DataError, match=match):
            sd.info(make_cfg(name="fashion_mnist", **{field: value}))
    write_fashion_mnist(tmp_path / "src", labels_max=12)
    cfg = make_cfg(name="fashion_mnist", manual_dir=str(tmp_path / "src"),
                   accept_checksum_mismatch=True, data_dir=str(tmp_path / "tfds"))  # fmt: skip
    with pytest.raises(
        sources.DataError, match="label 1[0-2] is out of range; valid labels are 0..9"
    ):
        sd.info(cfg)
    write_fashion_mnist(tmp_path / "src2")
    cfg.manual_dir, cfg.accept_checksum_mismatch = str(tmp_path / "src2"), False
    with pytest.raises(sources.ChecksumMismatchError, match="accept_checksum_mismatch"):
        sd.info(cfg)
    cfg.accept_checksum_mismatch = True
    sd.info(cfg)  # prepared from unknown files: reused only with the flag again
    cfg.accept_checksum_mismatch = False
    store.builder.cache_clear()
    with pytest.raises(sources.ChecksumMismatchError, match="prepared data"):
        sd.info(cfg)


@pytest.mark.slow
def test_real_fashion_mnist(shared_data, make_cfg, tmp_path):
    folder = shared_data / "fashion_mnist"
    for name, sha in images.FASHION_MNIST_FILES.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == sha[0]
    cfg = make_cfg(name="fashion_mnist", manual_dir=str(shared_data), data_dir=str(tmp_path))
    info = sd.info(cfg)
    assert info.split_sizes == {"train": 55_000, "validation": 5_000, "test": 10_000}
    labels = np.concatenate([b["targets"] for b in sd.make(cfg, split="test", train=False)])
    assert np.bincount(labels[:10_000], minlength=10).tolist() == [1000] * 10


def write_cifar10(path: Path, per_batch: int = 1_010, n_test: int = 12) -> dict:
    """A small `cifar-10-python.tar.gz` of the release's format: pickled dicts with
    b'data' uint8 [n, 3072] (R plane, G plane, B plane) and b'labels'."""
    import io
    import pickle
    import tarfile

    rng = np.random.default_rng(1)
    out = {}
    with tarfile.open(path, "w:gz") as tar:
        for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
            n = n_test if name == "test_batch" else per_batch
            batch = {b"batch_label": name.encode(), b"labels": rng.integers(0, 10, n).tolist(),
                     b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                     b"filenames": [b"x.png"] * n}  # fmt: skip
            data = pickle.dumps(batch, protocol=2)
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
            out[name] = batch
    return out


def test_cifar10_rgb_for_generation_and_lra_grayscale_for_classification(tmp_path, make_cfg):
    batches = write_cifar10(tmp_path / "cifar-10-python.tar.gz")
    cfg = make_cfg(name="cifar10", manual_dir=str(tmp_path), accept_checksum_mismatch=True,
                   data_dir=str(tmp_path / "tfds"), batch_size=4)  # fmt: skip
    info = sd.info(cfg)
    assert (info.seq_len, info.vocab_size, info.num_classes) == (1024, 256, 10)
    assert info.split_sizes == {"train": 50, "validation": 5_000, "test": 12}
    test = batches["test_batch"]
    planes = test[b"data"][:4].reshape(4, 3, 1024).astype(np.float64)
    gray = np.rint(0.2989 * planes[:, 0] + 0.5870 * planes[:, 1] + 0.1140 * planes[:, 2])
    batch = next(iter(sd.make(cfg, split="test", train=False)))
    assert np.abs(batch["inputs"] - gray).max() <= 1  # float32 vs float64 rounding
    np.testing.assert_array_equal(batch["targets"], test[b"labels"][:4])
    cfg.image_task = "generation"
    assert sd.info(cfg).seq_len == 3072 and sd.info(cfg).image_shape == (32, 32, 3)
    batch = next(iter(sd.make(cfg, split="test", train=False)))
    rgb = test[b"data"][:4].reshape(4, 3, 32, 32).transpose(0, 2, 3, 1).reshape(4, 3072)
    np.testing.assert_array_equal(batch["targets"], rgb)  # raster order, R G B innermost


def test_cifar10_refuses_foreign_pickles_and_wrong_archives(tmp_path):
    import pickle

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    with pytest.raises(sources.DataError, match="not a CIFAR-10 python batch"):
        images.read_cifar_batch(pickle.dumps({b"data": Evil()}), "x")
    with pytest.raises(sources.DataError, match=r"expected uint8 \[n, 3072\]"):
        images.read_cifar_batch(pickle.dumps({b"data": np.zeros((2, 10), np.uint8),
                                              b"labels": [0, 1]}), "x")  # fmt: skip
