"""Images as pixel sequences: TFDS builders, batch makers and `DataInfo` fields.

One example is an image of shape `[H, W, C]` stored flat in raster order with the channels
innermost (`tokens` uint8 `[H * W * C]`: row by row, left to right, R G B of one pixel before
the next), plus its class `label`. Two tasks read the same prepared files
(`config.data.image_task`):

- `'classification'`: one token per 8-bit pixel, ids 0..255 (LRA Image, Tay et al. 2020
  §2.2.4: CIFAR-10 as 1,024 grayscale pixels; here any of `IMAGE_DATASETS`), no padding;
- `'generation'`: autoregressive density modelling in raster order with each sub-pixel a token
  (Child et al. 2019 §7.2, Parmar et al. 2018): `inputs = [BOS, x_0 .. x_{D-2}]`,
  `targets = [x_0 .. x_{D-1}]`, the loss in bits per dimension (nats / ln 2 per sub-pixel).

Fashion-MNIST (Xiao et al. 2017) is read from its four gzipped IDX files (`manual_dir`, or a
`fashion_mnist/` sub-folder, or downloaded); its validation split is carved from the training
file deterministically: the LAST `FASHION_MNIST_VALIDATION` (5,000) training images in file
order are validation, the first 55,000 train; the 10,000 `t10k` images are the test split.

Legend: B global batch, b per-process batch, D = H * W * C dimensions (sub-pixels) per image.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import math
import pickle
import tarfile
import zlib
from pathlib import Path

import numpy as np

from seqjax.data import pipeline, registry, sources, store
from seqjax.data.classification import _ClassificationBuilder

BOS_ID = 256  # generation: the id that starts every image (never a target)
NUM_LEVELS = 256  # 8-bit sub-pixel values
IMAGE_TASKS = ("classification", "generation")
FASHION_MNIST_VALIDATION = 5_000


@dataclasses.dataclass(frozen=True)
class ImageSpec:
    """Shape and classes of an image data set (`[height, width, channels]` as generated)."""

    height: int
    width: int
    channels: int
    num_classes: int

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.height, self.width, self.channels)

    @property
    def num_pixels(self) -> int:
        """H * W: the classification sequence length (RGB is converted to grayscale)."""
        return self.height * self.width

    @property
    def num_dims(self) -> int:
        """D: sub-pixels per image (the generation sequence length)."""
        return self.height * self.width * self.channels


SPECS = {"fashion_mnist": ImageSpec(28, 28, 1, 10), "cifar10": ImageSpec(32, 32, 3, 10)}
IMAGE_DATASETS = tuple(SPECS)
FASHION_MNIST_CLASSES = (
    "t-shirt/top", "trouser", "pullover", "dress", "coat",
    "sandal", "shirt", "sneaker", "bag", "ankle boot",
)  # fmt: skip

_FMNIST_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
# sha256 of each file: Debian's dataset-fashion-mnist copy (../shared/data/README.md), then
# the download from Zalando's bucket (TFDS's url_checksums; the gzip headers differ, the
# decompressed IDX bytes are the same).
FASHION_MNIST_FILES = {
    "train-images-idx3-ubyte.gz": (
        "b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7",
        "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
    ),
    "train-labels-idx1-ubyte.gz": (
        "0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056",
        "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
    ),
    "t10k-images-idx3-ubyte.gz": (
        "cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa",
        "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
    ),
    "t10k-labels-idx1-ubyte.gz": (
        "8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05",
        "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
    ),
}

for _name, _sha in FASHION_MNIST_FILES.items():  # so that `find_source` knows the download URLs
    sources.KNOWN_SOURCES.setdefault(
        _name, sources.KnownSource(_name, _FMNIST_URL + _name, _sha[1], 0, "Fashion-MNIST")
    )


def read_idx(path, ndim: int) -> np.ndarray:
    """The uint8 array of a (gzipped) IDX file (LeCun's MNIST format: magic `00 00 08 ndim`,
    then `ndim` big-endian uint32 sizes, then the bytes).

    Raises:
      DataError: the file is not gzip/IDX of unsigned bytes with `ndim` dimensions, or its size
        disagrees with its header (one sentence naming the file).
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
        data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise sources.DataError(f"{path} cannot be read as a gzipped IDX file ({e}).") from e
    head = 4 + 4 * ndim
    if len(data) < head or data[:3] != b"\0\0\x08" or data[3] != ndim:
        raise sources.DataError(
            f"{path} is not an IDX file of unsigned bytes with {ndim} dimensions (its first bytes "
            f"are {data[:4].hex(' ')}, expected 00 00 08 {ndim:02x}); it is not a Fashion-MNIST "
            "image/label file."
        )
    dims = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    if len(data) - head != math.prod(dims):
        raise sources.DataError(
            f"{path}: its IDX header says {dims} ({math.prod(dims):,} bytes) but it holds "
            f"{len(data) - head:,} bytes; the file is truncated or corrupt."
        )
    return np.frombuffer(data, np.uint8, offset=head).reshape(dims)


def check_source(path: Path, known: tuple[str, ...], accept_mismatch: bool) -> bool:
    """Whether `path`'s sha256 is one of `known`; a different file is refused unless
    `accept_mismatch` (then False is returned)."""
    digest = sources.sha256_of_files([path])
    if digest in known:
        return True
    if not accept_mismatch:
        raise sources.ChecksumMismatchError(
            f"{path} has sha256 {digest}, but {path.name} is known as {' or '.join(known)}; "
            "the file is corrupt or a different version. Set "
            "config.data.accept_checksum_mismatch=True to use it anyway."
        )
    return False


def check_images(images, labels, num_classes: int, shape, where: str) -> None:
    """Raises DataError when images/labels disagree in count or shape or a label is out of range."""
    if images.shape[1:] != tuple(shape) or len(images) != len(labels):
        raise sources.DataError(
            f"{where}: {len(images):,} images of shape {images.shape[1:]} and {len(labels):,} "
            f"labels; expected one label per image of shape {tuple(shape)}."
        )
    if len(labels) and int(labels.max()) >= num_classes:
        raise sources.DataError(
            f"{where}: label {int(labels.max())} is out of range; valid labels are "
            f"0..{num_classes - 1}."
        )


class SeqjaxFashionMnist(_ClassificationBuilder):
    """Fashion-MNIST (Xiao et al. 2017): 28x28 grayscale, 10 classes, 55k/5k/10k."""

    ABOUT = (
        "Fashion-MNIST 28x28 grayscale images as 784 uint8 pixels in raster order; train = the "
        "first 55,000 training images, validation = the last 5,000, test = t10k (10,000)."
    )
    LABEL_NAMES = FASHION_MNIST_CLASSES
    MANUAL_DOWNLOAD_INSTRUCTIONS = "Put the four *-ubyte.gz files in config.data.manual_dir."

    def _split_generators(self, dl_manager):
        arrays, digests, all_known = {}, hashlib.sha256(), True
        for name, known in FASHION_MNIST_FILES.items():
            path = sources.find_source(
                [name],
                dataset="fashion_mnist",
                manual_dir=self._options.manual_dir,
                dl_manager=dl_manager,
                download=self._options.download,
            )
            all_known &= check_source(path, known, self._options.accept_checksum_mismatch)
            arrays[name] = read_idx(path, 3 if "images" in name else 1)
            digests.update(arrays[name].tobytes())  # the content: both releases agree
        out = {}
        for part in ("train", "t10k"):
            x = arrays[f"{part}-images-idx3-ubyte.gz"]
            y = arrays[f"{part}-labels-idx1-ubyte.gz"]
            check_images(x, y, 10, (28, 28), f"fashion_mnist {part}-*-ubyte.gz")
            out[part] = (x.reshape(len(x), -1), y)
        (x, y), cut = out["train"], len(out["train"][0]) - FASHION_MNIST_VALIDATION
        if cut < 1:
            raise sources.DataError(
                f"fashion_mnist: the training file has {len(x):,} images, too few to carve a "
                f"validation split of {FASHION_MNIST_VALIDATION:,}."
            )
        splits = {
            "train": (x[:cut], y[:cut]),
            "validation": (x[cut:], y[cut:]),
            "test": out["t10k"],
        }
        # Prepared from files of unknown checksums: refused later without the accept flag.
        fingerprint = digests.hexdigest()
        known = fingerprint if all_known else "the known Fashion-MNIST files"
        self.info.metadata.update(fingerprint=fingerprint, known_sha256=known)
        return {
            k: self._generate_examples((im.tobytes(), int(lab)) for im, lab in zip(*v))
            for k, v in splits.items()
        }


# ---------------------------------------------------------------------------------- CIFAR-10

CIFAR10_FILE = "cifar-10-python.tar.gz"
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer",
                   "dog", "frog", "horse", "ship", "truck")  # fmt: skip
CIFAR10_VALIDATION = 5_000
sources.KNOWN_SOURCES.setdefault(
    CIFAR10_FILE,
    sources.KnownSource(
        CIFAR10_FILE,
        "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
        "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce",
        170_498_071,
        "CIFAR-10 python version (Krizhevsky 2009)",
    ),
)


class _ArraysOnly(pickle.Unpickler):
    """Unpickles the CIFAR batches (dicts of bytes, lists and numpy arrays) and nothing else:
    no other global can be loaded, so a foreign pickle cannot run code."""

    ALLOWED = {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("_codecs", "encode"),
    }  # fmt: skip  (bytes in Python 3 protocol-2 pickles)

    def find_class(self, module, name):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed")
        return super().find_class(module, name)


def read_cifar_batch(data: bytes, where: str) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR-10 python batch -> (images uint8 `[n, 32, 32, 3]`, labels `[n]`).

    The release stores `data` as `[n, 3072]` rows of 1,024 R, then G, then B values in raster
    order; they are reordered to channels innermost.
    """
    try:
        batch = _ArraysOnly(io.BytesIO(data), encoding="bytes").load()
        x, y = np.asarray(batch[b"data"]), np.asarray(batch[b"labels"])
    except Exception as e:  # noqa: BLE001 - any unpickling failure is the same bad file
        raise sources.DataError(
            f"{where} is not a CIFAR-10 python batch (a pickled dict with b'data' uint8 "
            f"[n, 3072] and b'labels'): {type(e).__name__}: {e}"
        ) from None
    if x.dtype != np.uint8 or x.ndim != 2 or x.shape[1] != 3072 or len(y) != len(x):
        raise sources.DataError(
            f"{where}: data {x.dtype}{list(x.shape)} and {len(y)} labels; expected uint8 "
            "[n, 3072] and one label per row (the CIFAR-10 python release)."
        )
    return x.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), y.astype(np.int64)


class SeqjaxCifar10(_ClassificationBuilder):
    """CIFAR-10 (Krizhevsky 2009) from the python-pickle release: 32x32 RGB, 10 classes;
    train = the first 45,000 training images (data_batch_1..5 in order), validation = the
    last 5,000 (LRA's 45k/test setup plus a held-out validation), test = test_batch."""

    ABOUT = "CIFAR-10 as 3,072 uint8 sub-pixels (raster order, RGB innermost); 45k/5k/10k."
    LABEL_NAMES = CIFAR10_CLASSES
    MANUAL_DOWNLOAD_INSTRUCTIONS = f"Put {CIFAR10_FILE} in config.data.manual_dir."

    def _split_generators(self, dl_manager):
        path = sources.find_source(
            [CIFAR10_FILE],
            dataset="cifar10",
            manual_dir=self._options.manual_dir,
            dl_manager=dl_manager,
            download=self._options.download,
        )
        digest = sources.check_sha256(path, accept_mismatch=self._options.accept_checksum_mismatch)
        wanted = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
        found = {}
        try:
            with tarfile.open(path, "r:gz") as tar:
                for member in tar:
                    base = member.name.rsplit("/", 1)[-1]
                    if member.isfile() and base in wanted:
                        found[base] = tar.extractfile(member).read()
        except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
            raise sources.DataError(f"{path} is not a readable .tar.gz ({e}).") from e
        missing = [w for w in wanted if w not in found]
        if missing:
            raise sources.DataError(
                f"{path} lacks {', '.join(missing)}; it is not the CIFAR-10 python release "
                f"({CIFAR10_FILE}: cifar-10-batches-py/data_batch_1..5, test_batch)."
            )
        parts = {w: read_cifar_batch(found[w], f"{path}:{w}") for w in wanted}
        for w, (x, y) in parts.items():
            check_images(x, y, 10, (32, 32, 3), f"{path}:{w}")
        x = np.concatenate([parts[w][0] for w in wanted[:5]])
        y = np.concatenate([parts[w][1] for w in wanted[:5]])
        cut = len(x) - CIFAR10_VALIDATION
        if cut < 1:
            raise sources.DataError(f"{path}: too few training images ({len(x)}) for validation")
        splits = {"train": (x[:cut], y[:cut]), "validation": (x[cut:], y[cut:]),
                  "test": parts["test_batch"]}  # fmt: skip
        self.info.metadata.update(fingerprint=digest, known_sha256=sources.known_sha256(path))
        return {
            k: self._generate_examples((im.tobytes(), int(lab)) for im, lab in zip(*v))
            for k, v in splits.items()
        }


# ---------------------------------------------------------------------------------- batches


class PixelSequences(pipeline.Classification):
    """Generation batches: `inputs [b, D]` = BOS then the image's first D - 1 sub-pixels,
    `targets [b, D]` the D sub-pixels, `weights [b, D]` 1 (0 on rows padding the last
    evaluation batch). Row order, epochs and resume are those of `pipeline.Classification`."""

    def __init__(self, source, size: int, num_dims: int, seed, *layout):
        super().__init__(source, size, num_dims, 0, seed, *layout)

    def __call__(self, step):
        b = super().__call__(step)
        x_bD = b["inputs"]
        bos_b1 = np.full((len(x_bD), 1), BOS_ID, np.int32)
        weights_bD = np.repeat(b["weights"][:, None], x_bD.shape[1], axis=1)
        return {
            "inputs": np.concatenate([bos_b1, x_bD[:, :-1]], axis=1),
            "targets": x_bD,
            "weights": weights_bD,
        }


class GrayPixels(pipeline.Classification):
    """Classification batches of RGB images as grayscale pixel sequences (LRA Image:
    `tf.image.rgb_to_grayscale`, ITU-R 601 luma 0.2989 R + 0.5870 G + 0.1140 B, rounded):
    `inputs [b, H * W]` in 0..255."""

    def __init__(self, source, size: int, num_dims: int, seed, *layout):
        super().__init__(source, size, num_dims, 0, seed, *layout)

    def __call__(self, step):
        b = super().__call__(step)
        rgb_bP3 = b["inputs"].reshape(len(b["inputs"]), -1, 3).astype(np.float32)
        gray_bP = np.rint(rgb_bP3 @ np.array([0.2989, 0.5870, 0.1140], np.float32))
        return {**b, "inputs": np.clip(gray_bP, 0, 255).astype(np.int32)}


def encode(text: str) -> np.ndarray:
    """Text -> int32 ids `[n]`: each UTF-8 byte is the 8-bit value of one sub-pixel (so any
    prompt round-trips; `seqjax.sample` passes the PNG path of the grid as the prompt)."""
    return np.frombuffer(text.encode("utf-8"), np.uint8).astype(np.int32)


def decode(ids) -> str:
    """Ids -> text (`encode`'s inverse; BOS dropped)."""
    ids = np.asarray(ids).reshape(-1)
    return bytes(ids[ids != BOS_ID].astype(np.uint8).tolist()).decode("utf-8", errors="replace")


def image_task(cfg) -> str:
    """`config.data.image_task` ('classification' when the field is absent)."""
    return cfg.get("image_task") or "classification"


def config_problems(cfg, bad) -> None:
    """Calls `bad(field, value, valid)` for the image fields of `config.data`."""
    if image_task(cfg) not in IMAGE_TASKS:
        bad("image_task", cfg.get("image_task"), "'classification' or 'generation'")
    spec = SPECS[cfg.name]
    if cfg.get("max_len") and int(cfg.max_len) != spec.num_pixels:
        bad("max_len", cfg.max_len, f"None or {spec.num_pixels} (the pixels of a {cfg.name} image)")


def info_fields(cfg, key, store) -> dict:
    """`DataInfo` fields of an image data set (prepares it on first use)."""
    spec = SPECS[cfg.name]
    splits = store.builder(key).info.splits
    sizes = {s: splits[s].num_examples for s in ("train", "validation", "test")}
    generate = image_task(cfg) == "generation"
    common = dict(
        name=cfg.name,
        seq_len=spec.num_dims if generate else spec.num_pixels,
        pad_id=None,
        fingerprint=store.metadata(key)["fingerprint"],
        split_sizes=sizes,
        encode=encode,
        decode=decode,
        image_shape=spec.shape if generate else (spec.height, spec.width, 1),
    )
    if generate:
        return dict(task="image_generation", vocab_size=NUM_LEVELS + 1, num_classes=None,
                    bos_id=BOS_ID, **common)  # fmt: skip
    return dict(
        task="classification", vocab_size=NUM_LEVELS, num_classes=spec.num_classes, **common
    )


def maker(cfg, split: str, train: bool, layout, key, source, store):
    """`(maker, num_steps, spec_extra)` of an image split (`api.make`'s image branch)."""
    spec = SPECS[cfg.name]
    n = store.builder(key).info.splits[split].num_examples
    seed = int(cfg.seed) if train else None
    if image_task(cfg) == "generation":
        m = PixelSequences(source, n, spec.num_dims, seed, *layout)
    elif spec.channels == 3:
        m = GrayPixels(source, n, spec.num_dims, seed, *layout)
    else:
        m = pipeline.Classification(source, n, spec.num_dims, 0, seed, *layout)
    extra = dict(image_task=image_task(cfg), fingerprint=store.metadata(key)["fingerprint"])
    return m, (None if train else math.ceil(n / layout[0])), extra


# ------------------------------------------------------------ the registered data sets


def _validate(cfg, bad) -> None:
    config_problems(cfg, bad)


def _info(cfg) -> dict:
    return info_fields(cfg, store.dataset_key(cfg), store)


def _make(cfg, split: str, train: bool, layout: tuple):
    key = store.dataset_key(cfg)
    made, num_steps, _ = maker(cfg, split, train, layout, key, store.Source(key, split), store)
    return made, num_steps, {}  # the batches' spec: the common fields (as it always was)


def register_images(name: str, builder: type) -> registry.DataSet:
    """Registers the image data set ``name`` (its ``SPECS`` entry and TFDS builder)."""
    return registry.register(
        registry.DataSet(
            name,
            kind="images",
            task=lambda cfg: (
                "image_generation" if image_task(cfg) == "generation" else "classification"
            ),
            info=_info,
            make=_make,
            validate=_validate,
            builder=builder,
            default_max_len=SPECS[name].num_pixels,  # all pixels
        )
    )


register_images("fashion_mnist", SeqjaxFashionMnist)
register_images("cifar10", SeqjaxCifar10)
