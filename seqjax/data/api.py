"""`make` and `info`: what the training loop calls.

it = seqjax.data.make(config.data, split="train", process_index=jax.process_index(),
                      process_count=jax.process_count())
batch = next(it)            # {'inputs': int32[b, T], 'targets': ..., 'weights': ...}
state = it.get_state()      # save with the checkpoint; later it.set_state(state)

Both dispatch through `seqjax.data.registry` (the data set's `DataSet`, an objective's
`Objective`, packing); this module names no data set.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from seqjax.data import packing, pipeline, registry, token_chars
from seqjax.data.sources import DataError
from seqjax.data.validation import config_problems

SPLITS = ("train", "validation", "test")


@dataclasses.dataclass(frozen=True)
class DataInfo:
    """What a model and a sampler need to know about the data.

    Attributes:
      name: `config.data.name`.
      task: 'lm', 'classification' or 'seq2seq'.
      vocab_size: number of token ids (inputs are in [0, vocab_size)).
      seq_len: T of the batches' `inputs` [b, T] (seq2seq: S = max_source_len).
      num_classes: classes (classification), else None.
      pad_id: the padding id (0) where inputs are padded, else None.
      fingerprint: sha256 of the source bytes (of the generator spec for duplication).
      split_sizes: tokens (LM) or examples (classification, seq2seq; None: endless) per split.
      encode: str -> int32 ids [n].
      decode: ids [n] -> str (sentencepiece/seq2seq: stops at EOS, drops pad and BOS).
      target_len: seq2seq: T of `targets`/`weights` [b, T] (max_target_len), else None.
      bos_id, eos_id: sentencepiece and seq2seq: 2 and 3 (pad 0, unk 1), else None.
      vocab_file: the SentencePiece model the batches were encoded with, else None.
      vocab_fingerprint: sha256 of `vocab_file`, else None (record it with a run).
      source_lang, target_lang: translation languages, else None.
      mask_id: `config.data.objective='mlm'`: the [MASK] id appended past the data's own
        vocabulary (`seqjax.data.objectives`), else None.
      image_shape: images: `(height, width, channels)` of the raster-order sequence, else None.
    """

    name: str
    task: str
    vocab_size: int
    seq_len: int
    num_classes: int | None
    pad_id: int | None
    fingerprint: str
    split_sizes: dict
    encode: Callable[[str], np.ndarray] = dataclasses.field(repr=False)
    decode: Callable[[np.ndarray], str] = dataclasses.field(repr=False)
    target_len: int | None = None
    bos_id: int | None = None
    eos_id: int | None = None
    vocab_file: str | None = None
    vocab_fingerprint: str | None = None
    source_lang: str | None = None
    target_lang: str | None = None
    mask_id: int | None = None  # objective='mlm': the [MASK] id (= the data's vocab size)
    image_shape: tuple | None = None


def _check(cfg) -> None:
    """Raises one clear ValueError (`DataError`) for the first bad `config.data` field."""
    for field, value, valid in config_problems(cfg)[:1]:
        raise DataError(f"config.data.{field}={value!r} is invalid; valid: {valid}.")


def max_len(cfg) -> int:
    """A classification set's input length: `config.data.max_len`, else its default."""
    return int(cfg.max_len) if cfg.max_len else int(registry.get(cfg.name).default_max_len)


def info(cfg) -> DataInfo:
    """Vocabulary, task and fingerprint of `config.data` (prepares the data set if needed)."""
    _check(cfg)
    objective = cfg.get("objective")
    if objective:  # a pre-training objective over the data set (seqjax.data.objectives)
        return registry.objective(objective).info(cfg, info)
    return DataInfo(**registry.get(cfg.name).info(cfg))


def references(cfg, split: str, side: str = "target") -> list[str]:
    """A translation split's raw strings, in the order of `make(cfg, split, train=False)` rows.

    Row g of the evaluation batches (global row numbering: step * batch_size + row) is
    `references(cfg, split)[g]`; rows past the end are zero-weight padding. Use these
    untokenised, untruncated strings as the BLEU references (`side='source'`: the inputs).
    """
    _check(cfg)
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is invalid; valid: {', '.join(SPLITS)}.")
    if side not in ("source", "target"):
        raise ValueError(f"side={side!r} is invalid; valid: 'source', 'target'.")
    ds = registry.get(cfg.name)
    if ds.references is None:
        valid = [n for n in registry.names() if registry.get(n).references is not None]
        raise ValueError(
            f"references: config.data.name={cfg.name!r} is not a translation set; "
            f"valid: {', '.join(valid)}."
        )
    return ds.references(cfg, split, side)


def make(cfg, *, split: str, process_index: int = 0, process_count: int = 1, train: bool = True):
    """Returns this process's batch iterator for one split of `config.data`.

    Args:
      cfg: `config.data` (see `default_config`).
      split: 'train', 'validation' or 'test'.
      process_index: this JAX process (`jax.process_index()`).
      process_count: number of processes (`jax.process_count()`); must divide `batch_size`.
      train: True: endless, shuffled/random, seeded by `cfg.seed`. False: one deterministic pass
        over the whole split, the last batch padded with zero weights, then StopIteration.

    Returns:
      A `DataIterator` yielding numpy dicts with per-process batch b = batch_size/process_count:
      LM `{'inputs': int32[b, T], 'targets': int32[b, T], 'weights': float32[b, T]}`;
      classification `{'inputs': int32[b, max_len], 'targets': int32[b], 'weights': float32[b]}`;
      seq2seq `{'inputs': int32[b, S], 'targets': int32[b, T], 'weights': float32[b, T]}`
      (see `seq2seq.py`).
      It has `get_state() -> dict` and `set_state(dict)`, and `num_steps` (None when endless).
      With `config.data.token_chars = L` > 0 every batch also has `token_chars` int32
      `[b, T, L]`, the characters of each input token (`seqjax.data.token_chars`).
    """
    it = _make(cfg, split=split, process_index=process_index, process_count=process_count,
               train=train)  # fmt: skip
    return token_chars.wrap(it, cfg, info(cfg)) if cfg.get(token_chars.FIELD) else it


def _make(cfg, *, split: str, process_index: int, process_count: int, train: bool):
    """`make` without the characters of the tokens (objectives and packing build on it)."""
    _check(cfg)
    where = dict(process_index=process_index, process_count=process_count, train=train)
    objective = cfg.get("objective")
    if objective:
        return registry.objective(objective).make(cfg, split, *where.values(), _make, info)
    if cfg.get("packing"):  # seqjax.data.packing
        return packing.make(cfg, split, *where.values(), _make)
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is invalid; valid: {', '.join(SPLITS)}.")
    if not 0 <= process_index < process_count:
        raise ValueError(f"process_index={process_index} not in [0, process_count={process_count})")
    B = int(cfg.batch_size)
    if B % process_count:
        raise ValueError(
            f"config.data.batch_size={B} (the global batch) is not divisible by "
            f"process_count={process_count}; use a multiple of {process_count}."
        )
    spec = {"name": cfg.name, "split": split, "train": train, "seed": int(cfg.seed),
            "batch_size": B, "process_index": process_index,
            "process_count": process_count}  # fmt: skip
    maker, num_steps, extra = registry.get(cfg.name).make(
        cfg, split, train, (B, process_index, process_count)
    )
    spec.update(extra)
    return pipeline.DataIterator(
        maker, num_steps, spec, num_workers=int(cfg.num_workers), prefetch=int(cfg.prefetch)
    )
