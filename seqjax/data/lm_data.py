"""Language-modelling corpora as registered data sets: pystdlib, text_file, enwik8, text8,
WikiText-103/-2 (token streams read whole, `seqjax.data.store.tokens`) and Reformer's
generated duplication task (Kitaev et al. 2020 §5, "0 w 0 w").

A corpus is read as bytes, chars, SentencePiece subwords or words (`config.data.vocab`) and
batched as random windows (`lm_batching='random'`) or contiguous streams per row
(`'stream'`, Transformer-XL's recurrence, Dai et al. 2019 §3.2).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np

from seqjax.data import corpora, pipeline, registry, store, subword
from seqjax.data import wikitext as wikitext_lib
from seqjax.data import words as words_lib
from seqjax.data.sources import DataError

SPLITS = ("train", "validation", "test")


class _Tokens:
    """Picklable lazy handle on an LM split's token ids (loaded once per process)."""

    def __init__(self, key: store.DatasetKey, split: str, kind):
        self.key, self.split, self.kind = key, split, kind

    def __call__(self) -> np.ndarray:
        return store.tokens(self.key, self.split, self.kind)


def vocab_kind(cfg):
    """`store.vocab`'s kind: 'bytes', 'chars' or the SentencePiece/word options."""
    if cfg.vocab == "words":
        return words_lib.options_of(cfg)
    return subword.options_of(cfg) if cfg.vocab == "sentencepiece" else cfg.vocab


def what(cfg) -> str:
    return f"config.data.path={cfg.path!r}" if cfg.name == "text_file" else cfg.name


def too_short(cfg, split: str, n: int, need: int) -> str:
    share = {"train": "90%", "validation": "5%", "test": "5%"}[split]
    return (
        f"{what(cfg)}: its {split} split ({share} of the data) has {n:,} tokens, fewer than "
        f"the {need:,} that one sequence of config.data.seq_len={int(cfg.seq_len)} needs; use "
        "more text or a smaller config.data.seq_len."
    )


def _check_decodable(cfg, key, meta: dict) -> None:
    """vocab='chars' needs UTF-8: invalid bytes would silently become U+FFFD characters."""
    paths = getattr(key.config, "paths", None) if key.config is not None else None
    for path in paths or ():
        data = Path(path).read_bytes()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataError(
                f"{path} is not valid UTF-8 (byte {e.start:,}: {data[e.start : e.start + 4]!r}), "
                "so config.data.vocab='chars' would turn such bytes into U+FFFD characters; set "
                "config.data.vocab=bytes (one token per byte), or convert the file to UTF-8."
            ) from None
    # Corpora with invalid UTF-8 are named once, when prepared (corpora._warn_invalid_utf8).


def corpus_info(cfg) -> dict:
    """`DataInfo` fields of a token corpus (prepares it and its vocabulary if needed)."""
    key = store.dataset_key(cfg)
    meta = store.metadata(key)
    if cfg.vocab == "chars":
        _check_decodable(cfg, key, meta)
    kind = vocab_kind(cfg)
    vocab = store.vocab(key, kind)
    if cfg.vocab == "bytes":
        sizes = dict(meta["num_bytes"])
    else:
        sizes = {s: len(store.tokens(key, s, kind)) for s in SPLITS}
    if cfg.lm_batching == "random" and sizes["train"] <= int(cfg.seq_len) + 1:
        raise DataError(too_short(cfg, "train", sizes["train"], int(cfg.seq_len) + 2))
    for split in ("validation", "test"):  # evaluated after training: fail now, not then
        if sizes[split] < 2:
            raise DataError(too_short(cfg, split, sizes[split], 2))
    return dict(
        name=cfg.name,
        fingerprint=meta["fingerprint"],
        task="lm",
        vocab_size=vocab.size,
        seq_len=int(cfg.seq_len),
        num_classes=None,
        pad_id=None,
        split_sizes=sizes,
        encode=vocab.encode,
        decode=vocab.decode,
        **subword.spm_fields(vocab),
    )


def corpus_make(cfg, split: str, train: bool, layout: tuple):
    """Random windows, evaluation windows or streams of a token corpus (`pipeline`)."""
    B, T = layout[0], int(cfg.seq_len)
    key = store.dataset_key(cfg)
    kind = vocab_kind(cfg)
    tokens = _Tokens(key, split, kind)
    n = len(tokens())
    spec = dict(
        seq_len=T,
        vocab=cfg.vocab if isinstance(kind, str) else f"sentencepiece_{kind.tag}",
        lm_batching=cfg.lm_batching,
        fingerprint=store.metadata(key)["fingerprint"],
    )
    if cfg.lm_batching == "stream":
        L = pipeline.LMStreams.stream_len(n, B, train)
        stride = int(cfg.get("stream_stride") or T)  # XLNet's memory: plm_reuse_len
        if stride != T:
            spec["stream_stride"] = stride
        if (L // T if train else L) < 1:
            raise DataError(
                f"{what(cfg)}/{split} has {n:,} tokens: too few for {B} streams of at "
                f"least seq_len={T} tokens; lower config.data.batch_size or seq_len."
            )
        return (
            pipeline.LMStreams(tokens, T, train, *layout, stride=stride),
            None if train else pipeline.LMStreams.num_windows(L, T, stride, False),
            spec,
        )
    if train:
        if n <= T + 1:
            raise DataError(too_short(cfg, split, n, T + 2))
        return pipeline.LMRandomWindows(tokens, T, int(cfg.seed), *layout), None, spec
    windows = pipeline.LMEvalWindows.num_windows(n, T)
    if n < 2:
        raise DataError(too_short(cfg, split, n, 2))
    return pipeline.LMEvalWindows(tokens, T, *layout), math.ceil(windows / B), spec


def _text_file_config(cfg):
    return corpora.text_file_config(
        cfg.path or "", accept_checksum_mismatch=bool(cfg.accept_checksum_mismatch)
    )


_CORPUS = dict(
    kind="corpus",
    task="lm",
    info=corpus_info,
    make=corpus_make,
    vocabs=registry.VOCABS,
    streams=True,
    subword_options=True,
)
registry.register(
    registry.DataSet(
        "pystdlib",
        builder=corpora.SeqjaxPystdlib,
        builder_config=lambda cfg: corpora.pystdlib_config(),
        **_CORPUS,
    )
)
registry.register(
    registry.DataSet(
        "text_file", builder=corpora.SeqjaxTextFile, builder_config=_text_file_config, **_CORPUS
    )
)
registry.register(registry.DataSet("enwik8", builder=corpora.SeqjaxEnwik8, **_CORPUS))
registry.register(registry.DataSet("text8", builder=corpora.SeqjaxText8, **_CORPUS))
registry.register(
    registry.DataSet("wikitext103", builder=wikitext_lib.SeqjaxWikitext103, **_CORPUS)
)
registry.register(registry.DataSet("wikitext2", builder=wikitext_lib.SeqjaxWikitext2, **_CORPUS))


# ------------------------------------------------ duplication (Reformer §5), generated


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _duplication_info(cfg) -> dict:
    spec = json.dumps(["duplication", int(cfg.seed), int(cfg.dup_vocab_size)])
    return dict(
        name="duplication",
        task="lm",
        vocab_size=int(cfg.dup_vocab_size),
        seq_len=int(cfg.seq_len),
        num_classes=None,
        pad_id=None,
        fingerprint=hashlib.sha256(spec.encode()).hexdigest(),
        split_sizes={"train": None, "validation": cfg.dup_eval_size, "test": cfg.dup_eval_size},
        encode=lambda s: np.array(s.split(), dtype=np.int32),
        decode=lambda ids: " ".join(str(int(i)) for i in np.asarray(ids).reshape(-1)),
    )


def _duplication_make(cfg, split: str, train: bool, layout: tuple):
    T, B = int(cfg.seq_len), layout[0]
    size = None if train else int(cfg.dup_eval_size)
    maker = pipeline.Duplication(
        T, int(cfg.dup_vocab_size), int(cfg.seed), SPLITS.index(split), size, *layout
    )
    num_steps = None if train else math.ceil(size / B)
    return maker, num_steps, dict(seq_len=T, dup_vocab_size=int(cfg.dup_vocab_size))


def _duplication_problems(cfg, bad) -> None:
    if not _is_int(cfg.get("dup_eval_size")) or cfg.dup_eval_size < 1:
        bad("dup_eval_size", cfg.get("dup_eval_size"), "a positive integer")
    seq_len = cfg.get("seq_len")
    if _is_int(seq_len) and (seq_len % 2 or seq_len < 4):
        bad("seq_len", seq_len, "an even length >= 4 for duplication (0 w 0 w)")
    if not _is_int(cfg.get("dup_vocab_size")) or cfg.dup_vocab_size < 2:
        bad("dup_vocab_size", cfg.get("dup_vocab_size"), "an integer >= 2")


registry.register(
    registry.DataSet(
        "duplication",
        kind="generated",
        task="lm",
        info=_duplication_info,
        make=_duplication_make,
        vocabs=("bytes", "chars", "sentencepiece"),
        validate=_duplication_problems,
    )
)
