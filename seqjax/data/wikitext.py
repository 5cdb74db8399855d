"""WikiText-103 and WikiText-2 (Merity et al. 2017): word-level LM corpora with their own
splits, the benchmark of Transformer-XL (Dai et al. 2019, §4: WikiText-103, 18.3 ppl).

Source: the official ``wikitext-103-v1.zip`` / ``wikitext-2-v1.zip`` (members
``wikitext-103/wiki.{train,valid,test}.tokens``), looked for in ``config.data.manual_dir``
(directly or in a ``wikitext103``/``wikitext2`` sub-folder), else downloaded with TFDS's
download manager from the URL Transformer-XL's ``getdata.sh`` uses. The splits are stored
as bytes like every corpus (``corpora._CorpusBuilder``); ``config.data.vocab = "words"``
turns them into Transformer-XL's word ids (``seqjax.data.words``: words + ``<eos>`` per
line; WikiText-103's training split has 267,735 distinct tokens, ``<unk>`` included).

The fingerprint is the sha256 of the zip (no published checksum is recorded here: pass the
zip you trust; its digest names the prepared data and the vocabulary).
"""

from __future__ import annotations

import socket
import urllib.parse
import zipfile

from seqjax.data import corpora, sources, vocab

URLS = {
    "wikitext103": "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-103-v1.zip",
    "wikitext2": "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-2-v1.zip",
}
SPLIT_FILES = {
    "train": "wiki.train.tokens",
    "validation": "wiki.valid.tokens",
    "test": "wiki.test.tokens",
}


def read_splits(path, name: str) -> dict[str, bytes]:
    """The three splits' bytes from a WikiText zip (any folder inside it)."""
    try:
        with zipfile.ZipFile(path) as zf:
            members = {m.rsplit("/", 1)[-1]: m for m in zf.namelist() if not m.endswith("/")}
            missing = [f for f in SPLIT_FILES.values() if f not in members]
            if missing:
                raise ValueError(f"members {missing} missing (found {sorted(members)[:6]})")
            return {split: zf.read(members[f]) for split, f in SPLIT_FILES.items()}
    except (zipfile.BadZipFile, ValueError) as e:
        raise sources.DataError(
            f"seqjax.data '{name}': {path} is not a valid WikiText zip: {e}. Get the original "
            f"from {URLS[name]}."
        ) from e


def _download(dl_manager, name: str, zip_name: str, manual_dir) -> str:
    """The zip from ``URLS[name]``; with no route to its host (checked in 5 s, before TFDS's
    minutes of retries) or a failed download, one sentence naming the data set and
    ``manual_dir`` (``sources.SourceMissingError``, exit 2)."""
    url = URLS[name]
    host = urllib.parse.urlparse(url).hostname
    try:
        socket.create_connection((host, 443), timeout=5).close()
        return dl_manager.download(url)
    except Exception as e:  # noqa: BLE001 - any network failure ends in the sentence below
        raise sources.SourceMissingError(
            f"seqjax.data '{name}' needs {zip_name}, which is not in config.data.manual_dir "
            f"(now {manual_dir!r}; default: env SEQJAX_DATA_DIR) and could not be downloaded "
            f"from {url} ({type(e).__name__}: {e}): download it elsewhere and pass its folder "
            "as --config.data.manual_dir"
        ) from e


class _WikiText(corpora._CorpusBuilder, skip_registration=True):
    """A WikiText zip with its own train/valid/test files."""

    ZIP = ""
    MANUAL_DOWNLOAD_INSTRUCTIONS = "Put the WikiText zip in config.data.manual_dir."

    def _split_generators(self, dl_manager):
        name = self.name.removeprefix("seqjax_")
        try:
            path = sources.find_source(
                [self.ZIP], dataset=name, manual_dir=self._options.manual_dir, download=False
            )
        except sources.SourceMissingError:
            if not (self._options.download and dl_manager is not None):
                raise
            path = _download(dl_manager, name, self.ZIP, self._options.manual_dir)
        digest = sources.check_sha256(path, accept_mismatch=self._options.accept_checksum_mismatch)
        splits = read_splits(path, name)
        chars, unk = vocab.char_vocab(splits["train"], (splits["validation"], splits["test"]))
        self.info.metadata.update(
            fingerprint=digest,
            known_sha256=None,
            num_bytes={k: len(v) for k, v in splits.items()},
            char_vocab=chars,
            char_unk=unk,
        )
        return {k: self._generate_examples(v) for k, v in splits.items()}


class SeqjaxWikitext103(_WikiText):
    """WikiText-103: 103M training words from Wikipedia's Good/Featured articles."""

    ABOUT = "WikiText-103 (Merity et al. 2017) from wikitext-103-v1.zip; its own splits."
    ZIP = "wikitext-103-v1.zip"


class SeqjaxWikitext2(_WikiText):
    """WikiText-2: the 2M-word subset of the same articles (same validation/test sets)."""

    ABOUT = "WikiText-2 (Merity et al. 2017) from wikitext-2-v1.zip; its own splits."
    ZIP = "wikitext-2-v1.zip"
