"""TFDS builders for translation: JSONL parallel files (software_l10n format) and WMT14 En-De.

Both store examples `{'source': str, 'target': str}` in file order (shuffling disabled; the
pipeline shuffles with `config.data.seed`), untokenised: the SentencePiece model is trained
afterwards on the training split (`subword.py`) and the raw strings stay the BLEU references.

`translation_jsonl` reads one JSON object a line, `{"domain", "en", "de"|"fr"|..., "context"?}`
(`../shared/data/software_l10n/*.jsonl.gz`, gzipped or not). The file has no split, so the split
is a function of the source string alone: `u = sha256(source)[:8] / 2**64`; `u < h` validation,
`h <= u < 2h` test, else train (`h = config.data.heldout_fraction`), so one English string never
lands in two splits, whatever its translations or the seed.

`wmt14_ende` (`wmt14.py`) is the benchmark of Vaswani et al. (2017) §5.1.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import tensorflow_datasets as tfds

from seqjax.data import sources
from seqjax.data.corpora import _CorpusBuilder

# Keys of a software_l10n line that are not a language.
META_KEYS = ("domain", "context")


def heldout_split(text: str, heldout_fraction: float) -> str:
    """'validation', 'test' or 'train' from a hash of `text` (the source sentence)."""
    u = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") / 2.0**64
    if u < heldout_fraction:
        return "validation"
    return "test" if u < 2 * heldout_fraction else "train"


def _open_text(path: str):
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rt", encoding="utf-8") if gz else open(path, encoding="utf-8")


@functools.lru_cache(maxsize=4)
def _read_jsonl(path: str, mtime_ns: int, size: int, source_lang: str, target_lang: str | None):
    """Checked pairs of a JSONL file: `(pairs, target_lang)` (see `read_jsonl`)."""
    del mtime_ns, size  # cache keys only
    pairs, langs = [], None

    def fail(lineno, why):
        raise sources.DataError(
            f"config.data.path={path!r} is not a translation JSONL file: line {lineno}: {why}. "
            f"Expected one JSON object a line with string fields '{source_lang}' and the target "
            "language (e.g. 'de'), optional 'domain'/'context'."
        )

    try:
        with _open_text(path) as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    fail(lineno, f"invalid JSON ({e.msg} at column {e.colno})")
                if not isinstance(obj, dict):
                    fail(lineno, f"a JSON {type(obj).__name__}, not an object")
                found = sorted(k for k in obj if k not in META_KEYS)
                if langs is None:
                    langs = found
                    if target_lang is None:
                        others = [k for k in found if k != source_lang]
                        if source_lang not in found or len(others) != 1:
                            raise sources.DataError(
                                f"config.data.target_lang is not set and {path} line {lineno} "
                                f"has language fields {found}: expected "
                                f"config.data.source_lang={source_lang!r} and exactly one other; "
                                "set config.data.source_lang/target_lang to fields of the file."
                            )
                        target_lang = others[0]
                    for field, lang in (("source_lang", source_lang), ("target_lang", target_lang)):
                        if lang not in found:
                            raise sources.DataError(
                                f"config.data.{field}={lang!r} is not a field of {path} (line "
                                f"{lineno} has {found}); valid: "
                                f"{', '.join(repr(k) for k in found)}."
                            )
                    if target_lang == source_lang:
                        others = [k for k in found if k != source_lang]
                        raise sources.DataError(
                            f"config.data.target_lang={target_lang!r} is the source language "
                            f"(config.data.source_lang): a translation needs two; valid for "
                            f"{path}: {', '.join(repr(k) for k in others) or 'none'}."
                        )
                src, tgt = obj.get(source_lang), obj.get(target_lang)
                if not isinstance(src, str) or not isinstance(tgt, str):
                    fail(lineno, f"fields '{source_lang}'/'{target_lang}' missing or not strings")
                pairs.append((src, tgt))
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError, OSError) as e:
        raise sources.DataError(
            f"config.data.path={path!r} cannot be read as UTF-8 JSONL (gzipped or plain): {e}."
        ) from None
    if not pairs:
        raise sources.DataError(f"config.data.path={path!r} has no translation pairs.")
    return tuple(pairs), target_lang


def read_jsonl(path: str, source_lang: str, target_lang: str | None):
    """Reads and checks a translation JSONL file.

    Returns:
      `(pairs, target_lang)`: `(source, target)` strings in file order, and the target language
      (taken from the file when `target_lang` is None: its one language key besides the source).

    Raises:
      DataError: missing file, bad line (its number and why), unknown language field.
    """
    p = Path(os.path.expanduser(path or ""))
    if not path or not p.is_file():
        raise sources.DataError(
            f"config.data.path={path!r}: name='translation_jsonl' needs an existing JSONL file of "
            "translation pairs (gzipped or not), e.g. ../shared/data/software_l10n/en-de.jsonl.gz."
        )
    st = p.resolve().stat()
    return _read_jsonl(str(p.resolve()), st.st_mtime_ns, st.st_size, source_lang, target_lang)


@dataclasses.dataclass(eq=False)
class TranslationJsonlConfig(tfds.core.BuilderConfig):
    """Config of `seqjax_translation_jsonl`: the file, the languages and the held-out share."""

    path: str = ""
    source_lang: str = "en"
    target_lang: str = ""
    heldout_fraction: float = 0.01


def translation_jsonl_config(cfg) -> TranslationJsonlConfig:
    """Checks the file of `config.data.path` and names the config by its content and options."""
    _, target = read_jsonl(cfg.path, str(cfg.source_lang), cfg.target_lang or None)
    path = str(Path(os.path.expanduser(cfg.path)).resolve())
    sources.check_sha256(path, accept_mismatch=bool(cfg.accept_checksum_mismatch))
    digest = sources.sha256_of_files([path])
    stem = "".join(c if c.isalnum() else "_" for c in Path(path).name.lower())[:24]
    h = float(cfg.heldout_fraction)
    return TranslationJsonlConfig(
        name=f"{stem}_{digest[:12]}_{cfg.source_lang}_{target}_h{h:g}",
        path=path,
        source_lang=str(cfg.source_lang),
        target_lang=target,
        heldout_fraction=h,
        description=path,
    )


class _TranslationBuilder(_CorpusBuilder, skip_registration=True):
    """Examples `{'source': str, 'target': str}` in source order."""

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self,
            description=self.ABOUT,
            features=tfds.features.FeaturesDict(
                {"source": tfds.features.Text(), "target": tfds.features.Text()}
            ),
            disable_shuffling=True,
            metadata=tfds.core.MetadataDict(),
        )

    def _generate_examples(self, pairs):
        for i, (src, tgt) in enumerate(pairs):
            yield i, {"source": src, "target": tgt}


class SeqjaxTranslationJsonl(_TranslationBuilder):
    """A JSONL parallel corpus (software_l10n format) split by a hash of the source string."""

    ABOUT = "Translation pairs from a JSONL file; split by sha256 of the source string."

    def _split_generators(self, dl_manager):
        c = self.builder_config
        pairs, _ = read_jsonl(c.path, c.source_lang, c.target_lang)
        splits = {"train": [], "validation": [], "test": []}
        for src, tgt in pairs:
            splits[heldout_split(src, c.heldout_fraction)].append((src, tgt))
        self.info.metadata.update(
            fingerprint=sources.sha256_of_files([c.path]),
            known_sha256=sources.known_sha256(c.path),
            source_lang=c.source_lang,
            target_lang=c.target_lang,
        )
        return {k: self._generate_examples(v) for k, v in splits.items()}


def as_str(x) -> str:
    """A TFDS Text feature read without TensorFlow (bytes or numpy bytes) as str."""
    if isinstance(x, np.ndarray):
        x = x.item()
    return x.decode("utf-8") if isinstance(x, bytes) else str(x)
