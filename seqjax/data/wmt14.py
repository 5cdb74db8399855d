"""WMT14 English-German (Bojar et al. 2014), the benchmark of Vaswani et al. (2017) §5.1.

train = Europarl v7 + Common Crawl + News Commentary v9 (the de-en plain-text parallel files of
the WMT13/14 training archives, line i of `.de` translating line i of `.en`); validation =
newstest2013 (plain text); test = newstest2014 (the SGML `newstest2014-deen-{src,ref}.*.sgm`,
segments paired by document and segment id). The archives come from `config.data.manual_dir`
(directly or in `wmt14_ende/`) or, with `config.data.download`, through TFDS's download manager;
each is sha256-checked like every other source.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import tarfile
from collections.abc import Iterable
from pathlib import PurePosixPath

import tensorflow_datasets as tfds

from seqjax.data import sources
from seqjax.data.translation import _TranslationBuilder

LANGS = ("en", "de")
# archive -> the de-en parallel files it holds (base names of tar members), per split.
TRAIN_FILES = {
    "training-parallel-europarl-v7.tgz": "europarl-v7.de-en.{lang}",
    "training-parallel-commoncrawl.tgz": "commoncrawl.de-en.{lang}",
    "training-parallel-nc-v9.tgz": "news-commentary-v9.de-en.{lang}",
}
DEV_ARCHIVE = "dev.tgz"
VALIDATION_FILE = "newstest2013.{lang}"
TEST_FILES = ("newstest2014-deen-src.{lang}.sgm", "newstest2014-deen-ref.{lang}.sgm")

# Published archives (checksums as recorded by TFDS's wmt14_translate).
for _name, _url, _sha, _size in (
    (
        "training-parallel-europarl-v7.tgz",
        "http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz",
        "0224c7c710c8a063dfd893b0cc0830202d61f4c75c17eb8e31836103d27d96e7",
        657_632_379,
    ),
    (
        "training-parallel-commoncrawl.tgz",
        "http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz",
        "c7a74e2ea01ac6c920123108627e35278d4ccb5701e15428ffa34de86fa3a9e5",
        918_311_367,
    ),
    (
        "training-parallel-nc-v9.tgz",
        "http://www.statmt.org/wmt14/training-parallel-nc-v9.tgz",
        "cb8953f292298e6877ae433c98912b927cb0766b303f4540512ddd286c748485",
        80_418_416,
    ),
    (
        "dev.tgz",
        "http://data.statmt.org/wmt19/translation-task/dev.tgz",
        "7a7deccf82ebb05ba508dba5eb21356492224e8f630ec4f992132b029b4b25e7",
        38_654_961,
    ),
):
    sources.KNOWN_SOURCES.setdefault(
        _name, sources.KnownSource(_name, _url, _sha, _size, f"WMT archive {_name}")
    )


@dataclasses.dataclass(eq=False)
class Wmt14Config(tfds.core.BuilderConfig):
    """Config of `seqjax_wmt14_ende`: the translation direction."""

    source_lang: str = "en"
    target_lang: str = "de"


def wmt14_config(cfg) -> Wmt14Config:
    src = str(cfg.source_lang)
    tgt = cfg.target_lang or next((x for x in LANGS if x != src), "de")
    if src not in LANGS or tgt not in LANGS or src == tgt:
        raise sources.DataError(
            f"config.data.source_lang={src!r}, target_lang={tgt!r}: wmt14_ende translates "
            "between 'en' and 'de'; valid: source_lang='en' target_lang='de' or the reverse."
        )
    return Wmt14Config(name=f"{src}_{tgt}", source_lang=src, target_lang=tgt)


def _members(path, wanted: Iterable[str], required: Iterable[str]) -> dict[str, bytes]:
    """The tar members whose base names are in `wanted` (base name -> bytes).

    Raises:
      SourceMissingError: a name in `required` is not there (or, for a name that starts with
        '.', no member of `wanted` found ends with it).
    """
    wanted, found = set(wanted), {}
    try:
        with tarfile.open(path, "r:*") as tar:
            for m in tar:
                base = PurePosixPath(m.name).name
                if m.isfile() and base in wanted and base not in found:
                    found[base] = tar.extractfile(m).read()
    except (tarfile.TarError, OSError, EOFError) as e:
        raise sources.ChecksumMismatchError(
            f"seqjax.data 'wmt14_ende': cannot read {path}: {e}; the archive is corrupt."
        ) from None
    missing = [n for n in required if not any(f == n or f.endswith(n) for f in found)]
    if missing:
        raise sources.SourceMissingError(
            f"seqjax.data 'wmt14_ende': {path} has no member named (or ending with) "
            f"{', '.join(missing)}; it is not the WMT archive of that name."
        )
    return found


def parse_plain(data: bytes) -> list[str]:
    """One sentence a line (UTF-8), line ends and surrounding whitespace removed."""
    lines = data.decode("utf-8").split("\n")  # only \n: U+2028 etc. stay inside a sentence
    if lines and not lines[-1]:
        lines.pop()
    return [line.strip() for line in lines]


_DOC = re.compile(r'<doc\b[^>]*\bdocid="([^"]*)"', re.I)
_SEG = re.compile(r'<seg\b[^>]*\bid="?([^">\s]+)"?[^>]*>(.*?)</seg>', re.I | re.S)


def parse_sgm(data: bytes) -> dict[tuple[str, str], str]:
    """`(docid, segid) -> text` of a WMT SGML file (`<doc docid=..>`, `<seg id=..>text</seg>`)."""
    text, out = data.decode("utf-8"), {}
    docs = [(m.start(), m.group(1)) for m in _DOC.finditer(text)]
    for m in _SEG.finditer(text):
        doc = next((d for start, d in reversed(docs) if start < m.start()), "")
        out[(doc, m.group(1))] = m.group(2).strip()
    return out


def _pair_plain(src: bytes, tgt: bytes, what: str) -> list[tuple[str, str]]:
    s, t = parse_plain(src), parse_plain(tgt)
    if len(s) != len(t):
        raise sources.DataError(
            f"seqjax.data 'wmt14_ende': {what} has {len(s):,} source and {len(t):,} target lines; "
            "parallel files must have one line per sentence on both sides."
        )
    return list(zip(s, t))


class SeqjaxWmt14Ende(_TranslationBuilder):
    """WMT14 En-De from the official archives (see the module docstring)."""

    ABOUT = "WMT14 en-de: Europarl v7 + CommonCrawl + NC v9; newstest2013; newstest2014."
    MANUAL_DOWNLOAD_INSTRUCTIONS = "Put the WMT14 .tgz archives in config.data.manual_dir."

    def _archive(self, name, dl_manager):
        path = sources.find_source(
            [name],
            dataset="wmt14_ende",
            manual_dir=self._options.manual_dir,
            dl_manager=dl_manager,
            download=self._options.download,
        )
        digest = sources.check_sha256(path, accept_mismatch=self._options.accept_checksum_mismatch)
        return path, digest

    def _split_generators(self, dl_manager):
        c = self.builder_config
        langs = (c.source_lang, c.target_lang)
        digests, train = [], []
        for archive, pattern in TRAIN_FILES.items():
            path, digest = self._archive(archive, dl_manager)
            digests.append(digest)
            names = [pattern.format(lang=x) for x in langs]
            files = _members(path, names, names)
            pairs = _pair_plain(files[names[0]], files[names[1]], f"{path} ({pattern})")
            train += [(s, t) for s, t in pairs if s and t]  # CommonCrawl has empty lines
        path, digest = self._archive(DEV_ARCHIVE, dl_manager)
        digests.append(digest)
        valid_names = [VALIDATION_FILE.format(lang=x) for x in langs]
        # newstest2014 deen: the English and the German side, whichever is 'src' or 'ref'.
        test_names = [n.format(lang=x) for n in TEST_FILES for x in langs]
        files = _members(path, valid_names + test_names, valid_names + [f".{x}.sgm" for x in langs])
        validation = _pair_plain(
            files[valid_names[0]], files[valid_names[1]], f"{path} newstest2013"
        )
        test = []
        # The source side from the 'src' file and the target from 'ref' where both exist (the
        # pair sacrebleu's wmt14/full uses); segments are matched by (docid, segment id).
        src_file, ref_file = TEST_FILES
        prefer = {
            c.source_lang: [src_file, ref_file],
            c.target_lang: [ref_file, src_file],
        }
        side = {
            x: parse_sgm(next(files[n.format(lang=x)] for n in names if n.format(lang=x) in files))
            for x, names in prefer.items()
        }
        for k, s in side[c.source_lang].items():
            if k in side[c.target_lang]:
                test.append((s, side[c.target_lang][k]))
        if not test:
            raise sources.DataError(
                f"seqjax.data 'wmt14_ende': {path} newstest2014 has no segments."
            )
        fingerprint = hashlib.sha256(" ".join(digests).encode()).hexdigest()
        self.info.metadata.update(
            fingerprint=fingerprint, source_lang=c.source_lang, target_lang=c.target_lang
        )
        return {
            "train": self._generate_examples(train),
            "validation": self._generate_examples(validation),
            "test": self._generate_examples(test),
        }
