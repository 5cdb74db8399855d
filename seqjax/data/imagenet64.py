"""Downsampled ImageNet 64x64 (Chrabaszcz, Loshchilov & Hutter 2017, "A Downsampled Variant of
ImageNet as an Alternative to the CIFAR datasets") as a TFDS builder, read the way CIFAR-10 is
(`seqjax.data.images`): one example = 64 x 64 x 3 = 12,288 uint8 sub-pixels in raster order
with the channels innermost (row by row, pixel by pixel, R G B), plus its class 0..999.

The official release is three zip files of numpy `.npz` batches (`KNOWN_SOURCES` below, with
the sha256 TFDS's `imagenet_resized/64x64` records for them):

- `Imagenet64_train_part1_npz.zip`, `Imagenet64_train_part2_npz.zip`: `train_data_batch_1.npz`
  .. `train_data_batch_10.npz` (1,281,167 images in all);
- `Imagenet64_val_npz.zip`: `val_data.npz` (50,000 images).

Each `.npz` holds `data` uint8 `[n, 12288]` with every row channel-planar (the 4,096 R values
in raster order, then the G plane, then the B plane), `labels` `[n]` 1-based class ids 1..1000,
and (training batches) `mean`, the per-dimension mean image, which is not used here.

Where the files come from (`find_sources`): the extracted `.npz` files in
`config.data.manual_dir` (directly or in an `imagenet64/` sub-folder) when all eleven are
there (no published checksum: the fingerprint records their sha256), else the three zips from
`manual_dir` or downloaded with TFDS's download manager, each checked against its sha256.

Splits (the test split is the official validation set, which the Sparse Transformer and
Reformer report ImageNet 64x64 bits/dim on; a held-out validation is carved from training so
that model selection never sees it): train = batches 1..10 in order without the last
`VALIDATION` (10,000) images of `train_data_batch_10`, validation = those 10,000, test =
`val_data.npz`. The examples are streamed one `.npz` at a time (the training set is 15.7 GB
of pixels), so preparing needs about two batches' worth of memory, not the whole set.

Legend: n images in one file, D = 12,288 sub-pixels of one image.
"""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
import zlib
from pathlib import Path

import numpy as np

from seqjax.data import images, sources
from seqjax.data.classification import _ClassificationBuilder

SIZE = 64
NUM_CLASSES = 1_000
NUM_DIMS = SIZE * SIZE * 3  # D = 12,288
VALIDATION = 10_000  # the last images of train_data_batch_10 (held out from training)
TRAIN_FILES = tuple(f"train_data_batch_{i}.npz" for i in range(1, 11))
TEST_FILE = "val_data.npz"
NPZ_FILES = (*TRAIN_FILES, TEST_FILE)
_URL = "http://www.image-net.org/data/downsample/"
# (file name, sha256, bytes): TFDS's checksums of the official release.
ZIP_FILES = (
    ("Imagenet64_train_part1_npz.zip",
     "9422dc1dc5d092e9814a70a1cb7fc74880d2db5d88a0cb8a34ee363b12bde3f1", 6_783_426_789),
    ("Imagenet64_train_part2_npz.zip",
     "9fafc115afb7e6c301e66dc16b2d737152b427bd5dab26e1293487a6819c7f30", 6_780_506_068),
    ("Imagenet64_val_npz.zip",
     "e1e75133158a1924135a9c6f97a80d2d237b158945e0b34074e58e6c8430eeb8", 529_522_927),
)  # fmt: skip
for _name, _sha, _size in ZIP_FILES:
    sources.KNOWN_SOURCES.setdefault(
        _name,
        sources.KnownSource(_name, _URL + _name, _sha, _size,
                            "Downsampled ImageNet 64x64 npz release (Chrabaszcz et al. 2017)"),
    )  # fmt: skip
images.SPECS.setdefault("imagenet64", images.ImageSpec(SIZE, SIZE, 3, NUM_CLASSES))


def read_npz(file, where: str) -> tuple[np.ndarray, np.ndarray]:
    """One release `.npz` (a path or file object) -> (images uint8 `[n, 64, 64, 3]` with the
    channels innermost, labels int64 `[n]` in 0..999).

    Raises:
      DataError: one sentence naming `where` and the field: not an `.npz`, a missing field,
        `data` not uint8 `[n, 12288]`, `labels` not one integer per row or outside 1..1000.
    """
    try:
        npz = np.load(file, allow_pickle=False)
        fields = set(npz.files)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as e:
        raise sources.DataError(f"{where} is not a numpy .npz file ({e}).") from None
    for field in ("data", "labels"):
        if field not in fields:
            raise sources.DataError(
                f"{where} has no field {field!r} (it has {sorted(fields)}); a downsampled "
                "ImageNet 64x64 batch has 'data' uint8 [n, 12288] and 'labels' 1..1000."
            )
    try:
        x, y = npz["data"], np.asarray(npz["labels"])
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as e:
        raise sources.DataError(f"{where}: its arrays cannot be read ({e}).") from None
    if x.dtype != np.uint8 or x.ndim != 2 or x.shape[1] != NUM_DIMS:
        raise sources.DataError(
            f"{where}: field 'data' is {x.dtype}{list(x.shape)}; expected uint8 [n, {NUM_DIMS}] "
            "(64 x 64 RGB images, channel-planar)."
        )
    if y.ndim != 1 or len(y) != len(x) or not np.issubdtype(y.dtype, np.integer):
        raise sources.DataError(
            f"{where}: field 'labels' is {y.dtype}{list(y.shape)}; expected {len(x):,} integer "
            "labels, one per row of 'data'."
        )
    if len(y) and (int(y.min()) < 1 or int(y.max()) > NUM_CLASSES):
        bad = int(y.min()) if int(y.min()) < 1 else int(y.max())
        raise sources.DataError(
            f"{where}: field 'labels' holds {bad}, outside 1..{NUM_CLASSES} (the release's "
            f"1-based class ids, stored as 0..{NUM_CLASSES - 1})."
        )
    # Channel-planar rows [n, 3, 64, 64] -> raster order with the channels innermost.
    return x.reshape(-1, 3, SIZE, SIZE).transpose(0, 2, 3, 1), y.astype(np.int64) - 1


def _extracted(manual_dir) -> dict[str, Path] | None:
    """The eleven `.npz` files in `manual_dir` or `manual_dir/imagenet64`, if all are there."""
    if not manual_dir:
        return None
    root = Path(os.path.expanduser(manual_dir))
    for folder in (root, root / "imagenet64"):
        found = {n: folder / n for n in NPZ_FILES}
        if all(p.is_file() for p in found.values()):
            return found
    return None


def _zip_member(path, member: str) -> io.BytesIO:
    """The bytes of one zip member as a seekable file (`np.load` seeks inside the `.npz`)."""
    try:
        with zipfile.ZipFile(path) as z:
            return io.BytesIO(z.read(member))
    except (zipfile.BadZipFile, OSError, zlib.error) as e:
        raise sources.DataError(f"{path}: {member} cannot be read ({e}).") from None


def find_sources(options, dl_manager) -> tuple[dict, str, str | None]:
    """`({npz name: opener}, fingerprint, known_sha256)` of the release files.

    An opener is a no-argument function returning a readable file object of that `.npz`.
    `known_sha256` is the fingerprint when every zip matched its published sha256, a
    description when a mismatch was accepted (the prepared set is then refused without
    `accept_checksum_mismatch`), and None for extracted files (no published checksum).
    """
    found = _extracted(options.manual_dir)
    if found is not None:
        digest = sources.sha256_of_files(found[n] for n in NPZ_FILES)
        return {n: (lambda p=p: open(p, "rb")) for n, p in found.items()}, digest, None
    openers, digests, all_known = {}, hashlib.sha256(), True
    for name, sha, _ in ZIP_FILES:
        path = sources.find_source(
            [name], dataset="imagenet64", manual_dir=options.manual_dir, dl_manager=dl_manager,
            download=options.download,
        )  # fmt: skip
        digest = sources.check_sha256(path, accept_mismatch=options.accept_checksum_mismatch)
        digests.update(digest.encode())
        all_known &= digest == sha
        try:
            with zipfile.ZipFile(path) as z:
                members = [m for m in z.namelist() if Path(m).name in NPZ_FILES]
        except (zipfile.BadZipFile, OSError) as e:
            raise sources.DataError(f"{path} is not a readable zip file ({e}).") from None
        for m in members:
            openers[Path(m).name] = lambda p=path, m=m: _zip_member(p, m)
    missing = [n for n in NPZ_FILES if n not in openers]
    if missing:
        raise sources.DataError(
            f"the downsampled ImageNet 64x64 zips lack {', '.join(missing)}; expected "
            f"train_data_batch_1..10.npz and {TEST_FILE} in {', '.join(z[0] for z in ZIP_FILES)}."
        )
    fingerprint = digests.hexdigest()
    return openers, fingerprint, fingerprint if all_known else "the published Imagenet64 zips"


class SeqjaxImagenet64(_ClassificationBuilder):
    """Downsampled ImageNet 64x64 (Chrabaszcz et al. 2017): 1,000 classes; train =
    train_data_batch_1..10 less the last 10,000 images (validation), test = val_data."""

    ABOUT = (
        "Downsampled ImageNet 64x64 as 12,288 uint8 sub-pixels (raster order, RGB innermost), "
        "labels 0..999; 1,271,167 train / 10,000 validation / 50,000 test."
    )
    NUM_CLASSES = NUM_CLASSES
    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        "Put Imagenet64_train_part1_npz.zip, Imagenet64_train_part2_npz.zip and "
        "Imagenet64_val_npz.zip (or the extracted train_data_batch_*.npz and val_data.npz) in "
        "config.data.manual_dir."
    )

    def _split_generators(self, dl_manager):
        openers, fingerprint, known = find_sources(self._options, dl_manager)

        def load(name):
            with openers[name]() as f:
                return read_npz(f, f"imagenet64 {name}")

        last = TRAIN_FILES[-1]

        def train():
            for name in TRAIN_FILES:
                x, y = load(name)
                if name == last:
                    if len(x) <= VALIDATION:
                        raise sources.DataError(
                            f"imagenet64 {name} has {len(x):,} images, too few to hold out a "
                            f"validation split of its last {VALIDATION:,}."
                        )
                    x, y = x[:-VALIDATION], y[:-VALIDATION]
                yield from ((im.tobytes(), int(lab)) for im, lab in zip(x, y))

        def held_out(name, keep_last: int | None):
            x, y = load(name)
            if keep_last is not None:
                x, y = x[-keep_last:], y[-keep_last:]
            yield from ((im.tobytes(), int(lab)) for im, lab in zip(x, y))

        self.info.metadata.update(fingerprint=fingerprint, known_sha256=known)
        return {
            "train": self._generate_examples(train()),
            "validation": self._generate_examples(held_out(last, VALIDATION)),
            "test": self._generate_examples(held_out(TEST_FILE, None)),
        }


images.register_images("imagenet64", SeqjaxImagenet64)
