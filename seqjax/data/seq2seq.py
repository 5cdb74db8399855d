"""Sequence-to-sequence data: translation batches and the copy/reverse smoke tasks.

Batches of the sequence-to-sequence task (`DataInfo.task` 'seq2seq'), with
S = `config.data.max_source_len` and T = `max_target_len`:

    {'inputs':  int32[b, S]   source ids + EOS, 0-padded,
     'targets': int32[b, T]   target ids + EOS, 0-padded (a decoder reads them shifted right),
     'weights': float32[b, T] 1 on real target tokens (EOS included), 0 on padding}

Ids: 0 pad, 1 unk, 2 BOS, 3 EOS (`subword.py`); with `config.data.vocab='hf:<folder>'` (a
warm start's tokenizer, `hf_vocab.py`) the tokenizer's own pad and EOS ids (T5: 0 and 1),
the texts encoded without its special tokens and its EOS appended, as `T5Tokenizer` does.
Lengths (the choice of Flax's WMT example): training drops pairs whose source or target
(+ EOS) exceed S or T (the count is logged); evaluation keeps every pair, cutting a long one
to its first S-1 (T-1) ids + EOS, so losses cover the whole split, and BLEU is computed
against the untruncated `references(cfg, split)`.

Row order is the grain layout of `pipeline.py`: training reads example `perm_e[g mod N]` of the
kept examples for global row g (epoch `e = g // N`, seeded permutation per epoch); evaluation
reads example g once and pads the last batch with zero-weight rows.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math

import numpy as np

from seqjax.data import hf_vocab, registry, store, subword, translation, wmt14
from seqjax.data.pipeline import _Maker, hash_u64
from seqjax.data.subword import EOS_ID, SpmOptions

TRANSLATION_DATASETS = ("translation_jsonl", "wmt14_ende")
SYNTHETIC_DATASETS = ("copy", "reverse")
NUM_SPECIAL = 4  # pad, unk, bos, eos: copy/reverse symbols are 4 .. copy_vocab_size-1


@functools.lru_cache(maxsize=6)
def texts(key: store.DatasetKey, split: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """`(sources, targets)`: every pair of a split as raw strings, in the split's order."""
    src = store.source(key, split)
    try:
        records = src.__getitems__(list(range(len(src))))
    except Exception as e:  # array_record/Riegeli errors of damaged files
        raise store.corrupt_cache_error(key, e) from e
    return (
        tuple(translation.as_str(r["source"]) for r in records),
        tuple(translation.as_str(r["target"]) for r in records),
    )


def vocab(key: store.DatasetKey, opts: SpmOptions | str):
    """The joint source+target SentencePiece model of the training split (trained once), or
    the Hugging Face tokenizer of ``opts = "hf:<folder>"``."""
    if hf_vocab.is_hf(opts):
        return hf_vocab.HFVocab(opts[len(hf_vocab.PREFIX) :])
    fingerprint = store.metadata(key)["fingerprint"]
    path = subword.model_path(key.data_dir, key.tfds_name, key.config_name, fingerprint, opts)

    def sentences():
        s, t = texts(key, "train")
        return list(s) + list(t)

    return subword.SentencePieceVocab(subword.ensure_model(path, sentences, opts))


class Ragged:
    """Token id lists as one flat array and offsets: row i is `ids[off[i]:off[i+1]]`."""

    def __init__(self, rows: list[list[int]]):
        self.lengths = np.fromiter((len(r) for r in rows), np.int64, len(rows))
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)])
        self.ids = np.fromiter((i for r in rows for i in r), np.int32, int(self.offsets[-1]))

    def __len__(self) -> int:
        return len(self.lengths)

    def row(self, i: int) -> np.ndarray:
        return self.ids[self.offsets[i] : self.offsets[i + 1]]


@functools.lru_cache(maxsize=6)
def encoded(key: store.DatasetKey, split: str, opts: SpmOptions) -> tuple[Ragged, Ragged]:
    """`(sources, targets)` of a split as token ids (no EOS), cached per process."""
    v = vocab(key, opts)
    s, t = texts(key, split)
    return Ragged(_plain_ids(v, s)), Ragged(_plain_ids(v, t))


def _plain_ids(v, texts) -> list[list[int]]:
    """Token ids of each text without a tokenizer's special tokens (EOS is appended later)."""
    if isinstance(v, hf_vocab.HFVocab):
        return v.encode_many(texts, special=False)
    return v.encode_many(texts)


def special_ids(v) -> tuple[int, int | None, int]:
    """`(pad, bos, eos)` of a vocabulary: seqjax's SentencePiece 0, 2, 3, or a Hugging Face
    tokenizer's own (one sentence when it has no pad or EOS token)."""
    if not isinstance(v, hf_vocab.HFVocab):
        return subword.PAD_ID, subword.BOS_ID, EOS_ID
    for name, value in (("pad", v.pad_id), ("eos", v.eos_id)):
        if value is None:
            raise store.sources.DataError(
                f"config.data.vocab='hf:{v.path}': its tokenizer has no {name} token, which "
                f"sequence-to-sequence data need (set {name}_token in tokenizer_config.json)"
            )
    return int(v.pad_id), v.bos_id, int(v.eos_id)


@functools.lru_cache(maxsize=6)
def kept(key: store.DatasetKey, opts: SpmOptions, S: int, T: int) -> np.ndarray:
    """Training examples whose source + EOS fits S and target + EOS fits T (indices)."""
    src, tgt = encoded(key, "train", opts)
    index = np.flatnonzero((src.lengths < S) & (tgt.lengths < T))
    index.setflags(write=False)  # shared through the cache
    return index


class _Encoded:
    """Picklable lazy handle on a split's encoded pairs (and, for training, the kept indices)."""

    def __init__(self, key, split: str, opts, S: int, T: int, train: bool, eos_id=EOS_ID):
        self.key, self.split, self.opts, self.S, self.T, self.train = key, split, opts, S, T, train
        self.eos_id = int(eos_id)

    def __call__(self):
        src, tgt = encoded(self.key, self.split, self.opts)
        index = kept(self.key, self.opts, self.S, self.T) if self.train else None
        return src, tgt, index


def _row(ids: np.ndarray, length: int, eos_id: int = EOS_ID) -> np.ndarray:
    """ids cut to `length - 1`, then EOS."""
    return np.append(ids[: length - 1], eos_id)


class Translation(_Maker):
    """Translation batches (see the module docstring)."""

    def __init__(self, data: _Encoded, size: int, S: int, T: int, seed, *args, pad_id=0):
        super().__init__(*args)
        self.data, self.size, self.S, self.T, self.pad_id = data, size, S, T, int(pad_id)
        self.seed = seed  # None: evaluation order
        self._perm: dict[int, np.ndarray] = {}

    def _permutation(self, epoch: int) -> np.ndarray:
        perm = self._perm.get(epoch)
        if perm is None:  # keep the last few epochs; replace the dict whole (thread-safe)
            perm = np.random.default_rng([self.seed, 8, epoch]).permutation(self.size)
            self._perm = {**dict(list(self._perm.items())[-2:]), epoch: perm}
        return perm

    def __call__(self, step):
        src, tgt, index = self.data()
        g = self.rows(step)
        if self.seed is None:
            live = g < self.size
            rows = np.where(live, g, 0)
        else:
            live = np.ones(len(g), bool)
            rows = np.array(
                [index[self._permutation(e)[i]] for e, i in zip(*np.divmod(g, self.size))]
            )
        inputs = np.full((len(g), self.S), self.pad_id, np.int32)
        targets = np.full((len(g), self.T), self.pad_id, np.int32)
        eos = self.data.eos_id
        for r, (i, ok) in enumerate(zip(rows, live)):
            if ok:
                s, t = _row(src.row(i), self.S, eos), _row(tgt.row(i), self.T, eos)
                inputs[r, : len(s)], targets[r, : len(t)] = s, t
        return {
            "inputs": inputs,
            "targets": targets,
            "weights": (targets != self.pad_id).astype(np.float32),
        }


class Synthetic(_Maker):
    """Copy / reverse (smoke tests): the source is L random symbols (L uniform in 1..S-1), the
    target is the same symbols (copy) or reversed (reverse); both end with EOS.

    Symbols are `NUM_SPECIAL .. vocab_size-1`, drawn from hash(seed, split, global row, position);
    `size` None: endless (training), else rows `g >= size` are zero-weight padding.
    """

    def __init__(self, S, T, vocab_size, seed, split_id, size, reverse, *args):
        super().__init__(*args)
        self.S, self.T, self.vocab_size, self.seed = S, T, vocab_size, seed
        self.split_id, self.size, self.reverse = split_id, size, reverse

    def __call__(self, step):
        g = self.rows(step)
        n = self.S - 1
        length = (hash_u64(self.seed, 6, self.split_id, g) % np.uint64(n)).astype(np.int64) + 1
        h = hash_u64(self.seed, 7, self.split_id, g[:, None], np.arange(n)[None, :])
        sym = (h % np.uint64(self.vocab_size - NUM_SPECIAL)).astype(np.int32) + NUM_SPECIAL
        if self.size is not None:
            length = np.where(g < self.size, length, 0)
        sym = np.concatenate([sym, np.zeros((len(g), 1), np.int32)], axis=1)  # [b, S]
        pos = np.arange(self.S)[None, :]
        inside = pos < length[:, None]
        if self.reverse:
            sym_back = np.take_along_axis(sym, np.clip(length[:, None] - 1 - pos, 0, n), axis=1)
        eos = np.where(pos == length[:, None], EOS_ID, 0)  # no EOS in padding rows (length 0)
        eos = eos * (length > 0)[:, None]
        inputs = np.where(inside, sym, eos).astype(np.int32)
        targets = np.where(inside, sym_back, eos).astype(np.int32) if self.reverse else inputs
        targets = np.pad(targets, ((0, 0), (0, self.T - self.S)))
        return {
            "inputs": inputs,
            "targets": targets,
            "weights": (targets != 0).astype(np.float32),
        }


def log_filtered(name: str, total: int, n_kept: int, S: int, T: int) -> None:
    if n_kept < total:
        logging.info(
            "%s train: %d of %d pairs are longer than max_source_len=%d / max_target_len=%d "
            "(with EOS) and are left out of training",
            name,
            total - n_kept,
            total,
            S,
            T,
        )


# ------------------------------------------------------------------- what api.info/make call


def options(cfg) -> SpmOptions | str:
    """The vocabulary's identity: SentencePiece options, or ``"hf:<folder>"``."""
    if hf_vocab.is_hf(cfg.vocab):
        return str(cfg.vocab)
    return subword.options_of(cfg)


def info_fields(cfg) -> dict:
    """The `DataInfo` fields of a seq2seq `config.data` (prepares data and vocabulary)."""
    S, T = int(cfg.max_source_len), int(cfg.max_target_len)
    common = dict(
        name=cfg.name,
        task="seq2seq",
        seq_len=S,
        target_len=T,
        num_classes=None,
        pad_id=subword.PAD_ID,
        bos_id=subword.BOS_ID,
        eos_id=EOS_ID,
    )
    if cfg.name in SYNTHETIC_DATASETS:
        V = int(cfg.copy_vocab_size)
        spec = f'["{cfg.name}", {int(cfg.seed)}, {V}, {S}]'
        return dict(
            common,
            vocab_size=V,
            fingerprint=hashlib.sha256(spec.encode()).hexdigest(),
            split_sizes={"train": None, "validation": cfg.dup_eval_size, "test": cfg.dup_eval_size},
            encode=lambda s: np.array(s.split(), dtype=np.int32),
            decode=_decode_symbols,
        )
    key = store.dataset_key(cfg)
    meta = store.metadata(key)
    v = vocab(key, options(cfg))
    pad, bos, eos = special_ids(v)
    sizes = {s: len(texts(key, s)[0]) for s in ("train", "validation", "test")}
    for split in ("train", "validation", "test"):
        if not sizes[split]:
            raise store.sources.DataError(
                f"{cfg.name}: the {split} split is empty; raise config.data.heldout_fraction or "
                "use a larger file."
            )
    hf = isinstance(v, hf_vocab.HFVocab)
    return dict(
        common,
        pad_id=pad,
        bos_id=bos,
        eos_id=eos,
        vocab_size=v.size,
        fingerprint=meta["fingerprint"],
        split_sizes=sizes,
        encode=functools.partial(v.encode, special=False) if hf else v.encode,
        decode=functools.partial(decode_until_eos, v, pad, eos) if hf else v.decode,
        vocab_file=None if hf else v.path,
        vocab_fingerprint=v.fingerprint,
        source_lang=meta.get("source_lang"),
        target_lang=meta.get("target_lang"),
    )


def decode_until_eos(v, pad: int, eos: int, ids) -> str:
    """A Hugging Face tokenizer's text of ``ids`` up to the first EOS, padding dropped."""
    ids = [int(i) for i in np.asarray(ids).reshape(-1)]
    if eos in ids:
        ids = ids[: ids.index(eos)]
    return v.decode(np.array([i for i in ids if i != pad], np.int32))


def _decode_symbols(ids) -> str:
    ids = [int(i) for i in np.asarray(ids).reshape(-1)]
    if EOS_ID in ids:
        ids = ids[: ids.index(EOS_ID)]
    return " ".join(str(i) for i in ids if i not in (subword.PAD_ID, subword.BOS_ID))


def maker(cfg, split: str, train: bool, layout: tuple) -> tuple[_Maker, int | None, dict]:
    """`(batch maker, num_steps, spec additions)` of one split (see `api.make`)."""
    S, T, B = int(cfg.max_source_len), int(cfg.max_target_len), layout[0]
    spec = {"max_source_len": S, "max_target_len": T}
    if cfg.name in SYNTHETIC_DATASETS:
        size = None if train else int(cfg.dup_eval_size)
        split_id = ("train", "validation", "test").index(split)
        m = Synthetic(
            S,
            T,
            int(cfg.copy_vocab_size),
            int(cfg.seed),
            split_id,
            size,
            cfg.name == "reverse",
            *layout,
        )
        spec.update(copy_vocab_size=int(cfg.copy_vocab_size))
        return m, None if train else math.ceil(size / B), spec
    key = store.dataset_key(cfg)
    opts = options(cfg)
    v = vocab(key, opts)
    pad, _, eos = special_ids(v)
    src, _ = encoded(key, split, opts)
    if train:
        size = len(kept(key, opts, S, T))
        log_filtered(cfg.name, len(src), size, S, T)
        if size == 0:
            raise store.sources.DataError(
                f"{cfg.name}: no training pair fits config.data.max_source_len={S} and "
                f"max_target_len={T} (ids + EOS); raise them."
            )
    else:
        size = len(src)
    m = Translation(
        _Encoded(key, split, opts, S, T, train, eos),
        size,
        S,
        T,
        int(cfg.seed) if train else None,
        *layout,
        pad_id=pad,
    )
    spec.update(
        fingerprint=store.metadata(key)["fingerprint"],
        vocab=v.tag if isinstance(v, hf_vocab.HFVocab) else opts.tag,
        vocab_fingerprint=v.fingerprint,
    )
    return m, None if train else math.ceil(size / B), spec


def references(cfg, split: str, side: str = "target") -> list[str]:
    """The raw strings of a split in the order of `make(cfg, split=split, train=False)` rows."""
    if cfg.name not in TRANSLATION_DATASETS:
        raise ValueError(
            f"references: config.data.name={cfg.name!r} is not a translation set; "
            f"valid: {', '.join(TRANSLATION_DATASETS)}."
        )
    s, t = texts(store.dataset_key(cfg), split)
    return list(t if side == "target" else s)


# ------------------------------------------------------------ the registered data sets


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def config_problems(cfg, bad) -> None:
    """Calls `bad(field, value, valid)` for the seq2seq fields of `config.data`."""
    name = cfg.name
    for field in ("max_source_len", "max_target_len"):
        if not _is_int(cfg.get(field)) or cfg.get(field) < 2:
            bad(field, cfg.get(field), "an integer >= 2 (at least one id + EOS)")
    if name in SYNTHETIC_DATASETS:
        S, T = cfg.get("max_source_len"), cfg.get("max_target_len")
        if _is_int(S) and _is_int(T) and T < S:
            bad("max_target_len", T, f"an integer >= max_source_len={S} for {name}")
        if not _is_int(cfg.get("copy_vocab_size")) or cfg.copy_vocab_size < 5:
            bad("copy_vocab_size", cfg.get("copy_vocab_size"), "an integer >= 5 (4 special ids)")
        if not _is_int(cfg.get("dup_eval_size")) or cfg.dup_eval_size < 1:
            bad("dup_eval_size", cfg.get("dup_eval_size"), "a positive integer")
    if name == "translation_jsonl":
        h = cfg.get("heldout_fraction")
        if not isinstance(h, (int, float)) or isinstance(h, bool) or not 0 < h < 0.5:
            bad("heldout_fraction", h, "a number 0 < heldout_fraction < 0.5")
        if not isinstance(cfg.get("source_lang"), str) or not cfg.source_lang:
            bad("source_lang", cfg.get("source_lang"), "a language field of the file, e.g. 'en'")
    if name == "wmt14_ende":
        pair = (cfg.get("source_lang"), cfg.get("target_lang") or None)
        if pair not in (("en", "de"), ("en", None), ("de", "en"), ("de", None)):
            bad("source_lang", pair[0], "'en' (target_lang 'de' or None) or 'de' (target 'en')")


_TRANSLATION = dict(
    kind="translation",
    task="seq2seq",
    info=info_fields,
    make=maker,
    vocabs=("sentencepiece", "hf"),
    vocab_note="a subword vocabulary",
    validate=config_problems,
    subword_options=True,
    references=references,
)
registry.register(
    registry.DataSet(
        "translation_jsonl",
        builder=translation.SeqjaxTranslationJsonl,
        builder_config=translation.translation_jsonl_config,
        **_TRANSLATION,
    )
)
registry.register(
    registry.DataSet(
        "wmt14_ende",
        builder=wmt14.SeqjaxWmt14Ende,
        builder_config=wmt14.wmt14_config,
        **_TRANSLATION,
    )
)
for _name in SYNTHETIC_DATASETS:
    registry.register(
        registry.DataSet(
            _name,
            kind="generated",
            task="seq2seq",
            info=info_fields,
            make=maker,
            vocabs=registry.VOCABS[:3],
            validate=config_problems,
            packable=True,  # copy/reverse pairs pack like translation pairs
        )
    )
