"""TFDS builders for the language-modelling corpora: pystdlib, text_file, enwik8, text8.

Each builder writes its three splits as `array_record` files of ordered 1 MiB byte chunks
(features `index`, `bytes`; shuffling disabled so the corpus order is kept) and records in the
dataset info's metadata:

- `fingerprint`: sha256 of the source bytes (the zip for enwik8/text8, the concatenated files
  for text_file and pystdlib);
- `num_bytes`: bytes per split;
- `char_vocab` / `char_unk`: the training split's characters (for `vocab='chars'`).

No TensorFlow: TFDS serializes with its own protobufs and writes with `array_record`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import io
import logging
import os
import sys
import sysconfig
import tokenize
import zipfile
from pathlib import Path

import numpy as np
import tensorflow_datasets as tfds
from etils import epath

from seqjax.data import sources, vocab

CHUNK_BYTES = 1 << 20


@dataclasses.dataclass(frozen=True)
class SourceOptions:
    """How a builder finds and checks its source files (from `config.data`).

    Attributes:
      manual_dir: folder with the source archives (`config.data.manual_dir`).
      download: try TFDS's download manager when a file is not in `manual_dir`.
      accept_checksum_mismatch: allow a known file whose sha256 differs.
    """

    manual_dir: str | None = None
    download: bool = True
    accept_checksum_mismatch: bool = False


class _CorpusBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """A byte corpus cut 90/5/5 into train/validation/test (subclasses provide the bytes)."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "First seqjax release."}
    ABOUT = ""

    def __init__(self, *, options: SourceOptions | None = None, **kwargs):
        self._options = options or SourceOptions()
        super().__init__(**kwargs)

    @tfds.core.utils.classproperty
    @classmethod
    def code_path(cls) -> epath.Path:
        # TFDS finds checksums.tsv next to the builder's file through importlib.resources, which
        # fails for namespace/editable installs; the module file itself is always right.
        return epath.Path(inspect.getfile(cls))

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self,
            description=self.ABOUT,
            features=tfds.features.FeaturesDict(
                {
                    "index": tfds.features.Scalar(dtype=np.int64),
                    "bytes": tfds.features.Tensor(shape=(None,), dtype=np.uint8, encoding="bytes"),
                }
            ),
            disable_shuffling=True,  # chunk order is corpus order
            metadata=tfds.core.MetadataDict(),
        )

    known_sha256: str | None = None  # set by `_read_source` when the source has a known checksum

    def _read_source(self, dl_manager) -> tuple[bytes, str, bool]:
        """Returns (corpus bytes, fingerprint, whether cuts move to UTF-8 character starts)."""
        raise NotImplementedError

    def _split_generators(self, dl_manager):
        data, fingerprint, utf8_cuts = self._read_source(dl_manager)
        _warn_invalid_utf8(self.name, data)
        a, b = vocab.split_points(len(data), data=data if utf8_cuts else None)
        splits = {"train": data[:a], "validation": data[a:b], "test": data[b:]}
        chars, unk = vocab.char_vocab(splits["train"], (splits["validation"], splits["test"]))
        self.info.metadata.update(
            fingerprint=fingerprint,
            known_sha256=self.known_sha256,
            num_bytes={k: len(v) for k, v in splits.items()},
            char_vocab=chars,
            char_unk=unk,
        )
        return {k: self._generate_examples(v) for k, v in splits.items()}

    def _generate_examples(self, data: bytes):
        for i, start in enumerate(range(0, max(len(data), 1), CHUNK_BYTES)):
            chunk = np.frombuffer(data[start : start + CHUNK_BYTES], dtype=np.uint8)
            yield i, {"index": i, "bytes": chunk}


def _warn_invalid_utf8(name: str, data: bytes) -> None:
    """Says once, while the data are prepared, that ``vocab='chars'`` would turn some bytes
    of the corpus into U+FFFD (``vocab='bytes'`` keeps them)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        logging.warning(
            "seqjax.data %r has invalid UTF-8 (first at byte %d): with config.data.vocab="
            "'chars' such bytes become U+FFFD; config.data.vocab=bytes keeps every byte",
            name.removeprefix("seqjax_"),
            e.start,
        )


# ----------------------------------------------------------------------------------- pystdlib


def stdlib_files(root: str | None = None) -> list[Path]:
    """The `.py` files of the running Python's standard library, sorted by relative path.

    `site-packages`/`dist-packages` (installed third-party code) and `__pycache__` are excluded.
    """
    root = Path(root or sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "dist-packages", "__pycache__"}
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in skip]
        files += [Path(dirpath, f) for f in filenames if f.endswith(".py")]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def stdlib_corpus(files) -> tuple[bytes, list[str]]:
    """The files' text as one UTF-8 corpus, and the files left out.

    A file in another encoding is transcoded from its PEP 263 declaration (the stdlib's
    test modules in Latin-1 and KOI8-R), so every character of the corpus is a real one and
    ``vocab='chars'`` has no U+FFFD; a file that is not text in its declared encoding
    (deliberately broken test data) is left out, named once when the data are prepared.
    """
    parts, skipped = [], []
    for path in files:
        raw = Path(path).read_bytes()
        try:
            raw.decode("utf-8")
            parts.append(raw)
            continue
        except UnicodeDecodeError:
            pass
        try:
            encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
            parts.append(raw.decode(encoding).encode("utf-8"))
        except (SyntaxError, UnicodeDecodeError, LookupError):
            skipped.append(str(path))
    return b"".join(parts), skipped


@dataclasses.dataclass(eq=False)
class PystdlibConfig(tfds.core.BuilderConfig):
    """Config of `seqjax_pystdlib`: the stdlib folder it reads."""

    root: str = ""


def pystdlib_config() -> PystdlibConfig:
    """The config for the running interpreter (named by version and stdlib path)."""
    root = sysconfig.get_paths()["stdlib"]
    tag = hashlib.sha256(root.encode()).hexdigest()[:8]
    v = sys.version_info
    return PystdlibConfig(name=f"py{v.major}.{v.minor}.{v.micro}_{tag}", root=root)


class SeqjaxPystdlib(_CorpusBuilder):
    """The running Python's standard library source as one byte corpus (no download needed)."""

    ABOUT = "The .py files of the Python standard library, concatenated in sorted path order."
    VERSION = tfds.core.Version("1.1.0")
    RELEASE_NOTES = {
        "1.0.0": "First seqjax release.",
        "1.1.0": "Valid UTF-8: files in another declared encoding transcoded to UTF-8, "
        "undecodable ones left out.",
    }

    def _read_source(self, dl_manager):
        files = stdlib_files(self.builder_config.root)
        if not files:
            raise sources.SourceMissingError(
                f"seqjax.data 'pystdlib': no .py files under {self.builder_config.root}; this "
                "Python has no standard library sources (choose config.data.name='text_file')."
            )
        data, skipped = stdlib_corpus(files)
        if skipped:  # said once, here, not at every later use of the prepared data
            logging.warning(
                "seqjax.data 'pystdlib': left out %d file(s) that are not text in their "
                "declared encoding: %s",
                len(skipped),
                ", ".join(skipped),
            )
        return data, hashlib.sha256(data).hexdigest(), True


# ---------------------------------------------------------------------------------- text_file


@dataclasses.dataclass(eq=False)
class TextFileConfig(tfds.core.BuilderConfig):
    """Config of `seqjax_text_file`: the files, concatenated in this order."""

    paths: tuple[str, ...] = ()


def text_file_config(path: str, *, accept_checksum_mismatch: bool) -> TextFileConfig:
    """Checks the files named in `path` (comma-separated) and names the config by their content.

    Raises:
      SourceMissingError: a file does not exist.
      ChecksumMismatchError: a known file (e.g. tiny shakespeare) has other bytes.
    """
    if not path:
        raise sources.DataError(
            "config.data.path is empty: name='text_file' needs the text file(s) to read, e.g. "
            "--config.data.path=../shared/data/tinyshakespeare/input.txt (comma-separated for "
            "several files)."
        )
    paths = tuple(str(Path(os.path.expanduser(p.strip())).resolve()) for p in path.split(","))
    for p in paths:
        if Path(p).is_dir():
            raise sources.DataError(
                f"seqjax.data 'text_file': {p} is a folder, not a file (from config.data.path="
                f"{path!r}); name the text file(s), comma-separated for several."
            )
        if not Path(p).is_file():
            raise sources.SourceMissingError(
                f"seqjax.data 'text_file': {p} does not exist (from config.data.path={path!r})."
            )
        if Path(p).stat().st_size == 0:
            raise sources.DataError(
                f"seqjax.data 'text_file': {p} is empty (0 bytes; from config.data.path="
                f"{path!r}); give a file with the training text."
            )
    for p in paths:
        sources.check_sha256(p, accept_mismatch=accept_checksum_mismatch)
    digest = sources.sha256_of_files(paths)
    stem = "".join(c if c.isalnum() else "_" for c in Path(paths[0]).stem.lower())[:24]
    return TextFileConfig(name=f"{stem}_{digest[:12]}", paths=paths, description=",".join(paths))


class SeqjaxTextFile(_CorpusBuilder):
    """Local text/byte file(s) as one corpus, split 90/5/5 by bytes."""

    ABOUT = "Local file(s) concatenated as bytes; 90/5/5 split at UTF-8 character starts."

    def _read_source(self, dl_manager):
        paths = self.builder_config.paths
        data = b"".join(Path(p).read_bytes() for p in paths)
        return data, hashlib.sha256(data).hexdigest(), True


# ------------------------------------------------------------------------------ enwik8, text8


class _ZipCorpus(_CorpusBuilder, skip_registration=True):
    """A single-member zip; standard split first 90% / next 5% / last 5% (90M/5M/5M)."""

    ZIP = ""
    MEMBER = ""
    MANUAL_DOWNLOAD_INSTRUCTIONS = "Put the zip file in config.data.manual_dir."

    def _read_source(self, dl_manager):
        name = self.name.removeprefix("seqjax_")
        path = sources.find_source(
            [self.ZIP],
            dataset=name,
            manual_dir=self._options.manual_dir,
            dl_manager=dl_manager,
            download=self._options.download,
        )
        digest = sources.check_sha256(path, accept_mismatch=self._options.accept_checksum_mismatch)
        self.known_sha256 = sources.known_sha256(path)
        try:
            with zipfile.ZipFile(path) as zf:
                members = [m for m in zf.namelist() if not m.endswith("/")]
                member = self.MEMBER if self.MEMBER in members else None
                if member is None and len(members) == 1:
                    member = members[0]
                if member is None:
                    raise ValueError(f"expected a member '{self.MEMBER}', found {members[:5]}")
                data = zf.read(member)
        except (zipfile.BadZipFile, ValueError) as e:
            raise sources.ChecksumMismatchError(
                f"seqjax.data '{name}': {path} is not a valid {self.ZIP}: {e}. Replace it with "
                f"the original from {sources.KNOWN_SOURCES[self.ZIP].url}."
            ) from e
        return data, digest, False  # the standard split is by bytes, no UTF-8 adjustment


class SeqjaxEnwik8(_ZipCorpus):
    """enwik8 (Hutter Prize): 10^8 bytes of Wikipedia XML; byte-level LM benchmark."""

    ABOUT = "enwik8 from enwik8.zip; standard split 90M/5M/5M bytes."
    ZIP = "enwik8.zip"
    MEMBER = "enwik8"


class SeqjaxText8(_ZipCorpus):
    """text8: 10^8 characters of cleaned Wikipedia in [a-z ]; character-level LM benchmark."""

    ABOUT = "text8 from text8.zip; standard split 90M/5M/5M characters."
    ZIP = "text8.zip"
    MEMBER = "text8"
