"""Source files: where they are looked for, their known checksums, and the errors that name the fix.

Every builder that reads a file from outside seqjax goes through `find_source` (manual_dir first,
then TFDS's download manager when downloads are allowed) and `check_sha256` (the file must match
the known checksum unless the user accepts a mismatch). The sha256 of the source bytes becomes the
dataset's fingerprint, recorded in the TFDS dataset info.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path


class DataError(ValueError):
    """The data named by `config.data` cannot be used (the message names the file and the fix)."""


class SourceMissingError(FileNotFoundError):
    """A source file is neither in `manual_dir` nor downloadable."""


class ChecksumMismatchError(ValueError):
    """A source file's sha256 differs from the known one."""


@dataclasses.dataclass(frozen=True)
class KnownSource:
    """A source file with a published checksum.

    Attributes:
      filename: file name as distributed.
      url: where to get it (empty when it is not downloadable).
      sha256: hex digest of the whole file.
      num_bytes: its size.
      about: one line that says what it is.
    """

    filename: str
    url: str
    sha256: str
    num_bytes: int
    about: str


# Checksums of the standard archives (mattmahoney.net for enwik8/text8, the TFDS `imdb_reviews`
# checksum for the official aclImdb tarball) and of the files in ../shared/data (its README).
KNOWN_SOURCES: dict[str, KnownSource] = {
    "enwik8.zip": KnownSource(
        "enwik8.zip",
        "http://mattmahoney.net/dc/enwik8.zip",
        "547994d9980ebed1288380d652999f38a14fe291a6247c157c3d33d4932534bc",
        36_445_475,
        "Hutter Prize enwik8: first 10^8 bytes of English Wikipedia XML (2006-03-03)",
    ),
    "text8.zip": KnownSource(
        "text8.zip",
        "http://mattmahoney.net/dc/text8.zip",
        "a6640522afe85d1963ad56c05b0ede0a0c000dddc9671758a6cc09b7a38e5232",
        31_344_016,
        "text8: enwik9's first 10^8 characters cleaned to [a-z ]",
    ),
    "aclImdb_v1.tar.gz": KnownSource(
        "aclImdb_v1.tar.gz",
        "http://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",
        "c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe",
        84_125_825,
        "Large Movie Review Dataset v1.0 (Maas et al. 2011), official tarball",
    ),
    "aclImdb_v1_labeled.tar.gz": KnownSource(
        "aclImdb_v1_labeled.tar.gz",
        "",
        "cf42aa15ecc01fa8642ce0b8a788578e754afd6a4527d9133ee53234f4af340d",
        27_793_474,
        "aclImdb v1.0 without unsup/, .feat files and URL lists (../shared/data/imdb/)",
    ),
    "tinyshakespeare/input.txt": KnownSource(
        "input.txt",
        "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
        "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
        1_115_394,
        "Karpathy's tiny shakespeare",
    ),
    "linux_uapi_headers.txt": KnownSource(
        "linux_uapi_headers.txt",
        "",
        "e70ec253b2badb3b23fc900c58e0909ab0ad0978fdec5958bd63622ef266052d",
        5_492_038,
        "Linux 6.1 UAPI headers concatenated (../shared/data/linux_uapi/)",
    ),
    "software_l10n/en-de.jsonl.gz": KnownSource(
        "en-de.jsonl.gz",
        "",
        "c4ae7781fdb27133e344e4e73d98fbf591246e5bd8c5f0664c58f44a4e2321fd",
        1_285_056,
        "Debian 12 gettext catalogues, English-German pairs (../shared/data/software_l10n/)",
    ),
    "software_l10n/en-fr.jsonl.gz": KnownSource(
        "en-fr.jsonl.gz",
        "",
        "e6d0dcd17d501304e8482ec26121733e2f4d0da5936f367efdba1f129300ac42",
        1_588_211,
        "Debian 12 gettext catalogues, English-French pairs (../shared/data/software_l10n/)",
    ),
}


def known_source_for(path: str | os.PathLike) -> KnownSource | None:
    """Returns the known source whose key matches the end of `path`, if any."""
    posix = Path(path).as_posix()
    for key, known in KNOWN_SOURCES.items():
        if posix == key or posix.endswith("/" + key):
            return known
    return None


def sha256_of_files(paths: Iterable[str | os.PathLike], chunk: int = 1 << 22) -> str:
    """sha256 of the concatenated bytes of `paths` (in order)."""
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            while block := f.read(chunk):
                digest.update(block)
    return digest.hexdigest()


def check_sha256(path: str | os.PathLike, *, accept_mismatch: bool) -> str:
    """Hashes `path` and refuses it if it differs from its known checksum.

    Args:
      path: the source file.
      accept_mismatch: `config.data.accept_checksum_mismatch`; if True a mismatch is allowed (the
        recorded fingerprint then tells the runs apart).

    Returns:
      The sha256 hex digest of the file (the dataset fingerprint).

    Raises:
      ChecksumMismatchError: the file is a known one with different bytes.
    """
    digest = sha256_of_files([path])
    known = known_source_for(path)
    if known is not None and digest != known.sha256 and not accept_mismatch:
        size = os.path.getsize(path)
        where = f" Get the original from {known.url}." if known.url else ""
        raise ChecksumMismatchError(
            f"{path} ({size:,} bytes) has sha256 {digest}, but {known.filename} ({known.about}) "
            f"is known to be {known.num_bytes:,} bytes with sha256 {known.sha256}. The file is "
            f"corrupt, truncated or a different version.{where} To use this file anyway, set "
            "config.data.accept_checksum_mismatch=True."
        )
    return digest


def known_sha256(path: str | os.PathLike) -> str | None:
    """The published sha256 of `path`'s file name, if it is a known source."""
    known = known_source_for(path)
    return known.sha256 if known else None


def check_prepared(metadata: dict, *, dataset: str, accept_mismatch: bool, where: str) -> None:
    """Refuses a data set prepared earlier from a source with an unexpected checksum.

    Builders record `fingerprint` and `known_sha256` in the dataset metadata, so a data set built
    with `accept_checksum_mismatch=True` is not silently reused without it.
    """
    known = metadata.get("known_sha256")
    if known and metadata.get("fingerprint") != known and not accept_mismatch:
        raise ChecksumMismatchError(
            f"seqjax.data '{dataset}': the prepared data in {where} were built from a source with "
            f"sha256 {metadata.get('fingerprint')}, not the known {known}. Set "
            "config.data.accept_checksum_mismatch=True to use them, or delete that folder and "
            "put the original file in config.data.manual_dir."
        )


# While a data set is prepared (``recording``): every source ``find_source`` returned, as
# ``(candidates, dataset, path)`` (``seqjax.data.source_stamp`` keys the prepared data by them).
_FOUND: list | None = None


@contextlib.contextmanager
def recording():
    """Collects the sources ``find_source`` returns inside the block (a list, yielded)."""
    global _FOUND
    outer, _FOUND = _FOUND, []
    try:
        yield _FOUND
    finally:
        _FOUND = outer


def _found(candidates: Sequence[str], dataset: str, path: Path) -> Path:
    if _FOUND is not None:
        _FOUND.append((tuple(candidates), dataset, str(path)))
    return path


def find_source(
    candidates: Sequence[str],
    *,
    dataset: str,
    manual_dir: str | None,
    dl_manager=None,
    download: bool = True,
) -> Path:
    """Finds a source archive in `manual_dir`, else downloads it with TFDS's download manager.

    Args:
      candidates: accepted file names, preferred first (each a key of `KNOWN_SOURCES` or a bare
        name). Each is looked for in `manual_dir`, `manual_dir/<dataset>` and, for keys with a
        folder, `manual_dir/<key>`.
      dataset: the seqjax dataset name (for the message and the sub-folder).
      manual_dir: `config.data.manual_dir` (may be None).
      dl_manager: the `tfds.download.DownloadManager` of the running build, or None.
      download: whether a download may be tried when the file is not in `manual_dir`.

    Returns:
      The path of the first candidate found, or of the downloaded file.

    Raises:
      SourceMissingError: with the places searched and where to get the file.
    """
    searched = []
    if manual_dir:
        root = Path(os.path.expanduser(manual_dir))
        for name in candidates:
            base = Path(name).name
            for path in dict.fromkeys((root / base, root / dataset / base, root / name)):
                searched.append(str(path))
                if path.is_file():
                    return _found(candidates, dataset, path)
    with_url = [n for n in candidates if n in KNOWN_SOURCES and KNOWN_SOURCES[n].url]
    urls = [KNOWN_SOURCES[n].url for n in with_url]
    error = None
    if download and dl_manager is not None and urls:
        try:
            return _found(candidates, dataset, Path(dl_manager.download(urls[0])))
        except Exception as e:  # noqa: BLE001 - any network failure ends in the message below
            error = e
    names = " or ".join(Path(n).name for n in candidates)
    where = "; ".join(f"{Path(n).name}: {KNOWN_SOURCES[n].url}" for n in with_url)
    lines = [
        f"seqjax.data '{dataset}': source file {names} not found.",
        f"Put it in config.data.manual_dir (now {manual_dir!r}; default: env SEQJAX_DATA_DIR), "
        f"directly or in a '{dataset}/' sub-folder.",
    ]
    if searched:
        lines.append("Searched: " + ", ".join(searched) + ".")
    if where:
        lines.append(f"Get it from {where}.")
    if error is not None:
        lines.append(f"Download failed: {type(error).__name__}: {error}")
    elif urls and not download:
        lines.append("Downloads are off (config.data.download=False).")
    raise SourceMissingError(" ".join(lines))


@contextlib.contextmanager
def prepare_lock(data_dir: str, name: str):
    """An exclusive ``flock`` on ``data_dir/.name.lock`` (no-op for non-local paths)."""
    if "://" in str(data_dir):
        yield
        return
    os.makedirs(data_dir, exist_ok=True)
    with open(os.path.join(data_dir, f".{name}.lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
