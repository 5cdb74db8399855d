"""Sequence packing (``config.data.packing=True``): several examples in one row.

Rows of ``T`` slots are filled with whole examples (each cut to fit a row) in the epoch's
order by next-fit: an example that does not fit in the current row starts the next one
(Raffel et al. 2020, T5 §3.1 / Krell et al. 2021 "Efficient sequence packing" pack the same
way; next-fit keeps the data order, so the rows are a function of the seed and the global
row number like every other batch). Each row carries

* ``segment_ids`` int32 ``[B, T]``: 1, 2, ... for its examples, 0 on the padding slots;
  attention lets a query see only keys of its own segment (``seqjax.attention.masks``), so
  an example's outputs equal those of the example alone in a padded row;
* ``positions`` int32 ``[B, T]``: positions restarting at 0 at every example;

and the packing efficiency (real tokens / slots) is logged when the iterator is made and
kept as the iterator's ``packing_efficiency`` (the training loop writes it to result.json).

What a row holds per task (``PackedRows``; the tasks read these fields):

* masked LM (``objective='mlm'`` on imdb_bytes/listops): ``inputs``, ``weights [B, T]``;
* LM on example texts (``objective='lm'`` on imdb_bytes/listops: one document per example):
  ``inputs``, ``targets`` (the document shifted by one within its segment), ``weights [B, T]``
  (1 on real targets) — no prediction crosses a document boundary;
* classification (imdb_bytes, listops): ``inputs`` and one label per example: ``targets``
  int32 ``[B, K]`` and ``weights`` float32 ``[B, K]`` (1 for the row's real examples), with
  ``K = data.max_examples_per_row`` (rows are closed after K examples);
* sequence-to-sequence (translation_jsonl, wmt14_ende, copy, reverse): sources and targets
  packed in parallel (pair k is segment k on both sides; a pair fits when its source fits
  the source row and its target the target row): ``inputs [B, S]``, ``targets``/``weights
  [B, T]``, ``segment_ids``/``positions [B, S]`` and ``target_segment_ids``/
  ``target_positions [B, T]``.

``data.packing_align`` (default 1) starts every example at a multiple of it: mechanisms whose
pattern depends on absolute positions (LRA ``local`` blocks, ``sparse_fixed`` and flex
``fixed`` blocks of ``stride``) equal their unpacked selves when the alignment is a multiple
of that period (``seqjax.tasks.packing_checks.alignment``); translation-invariant ones
(dense in every implementation, causal, sparse_strided, flex sliding_window/dilated/strided)
need none.

Mechanisms whose outputs mix positions across a row cannot honour segments and refuse
packing (``seqjax.tasks.packing_checks``). LM corpora (pystdlib, text_file, enwik8, text8,
wikitext, duplication) are one dense token stream already: packing is refused there.

Legend: B global batch, b per-process batch, T row length (slots), S source row length,
K examples per row at most, N examples in a split.
"""

from __future__ import annotations

import bisect
import logging

import numpy as np

from seqjax.data import pipeline, registry

# Kinds of data set (``seqjax.data.registry``) packing serves, by objective ('' = the data
# set's own task): example texts and translation pairs; generated seq2seq pairs too.
PACKABLE_KINDS = {"": ("texts", "translation"), "mlm": ("texts",), "lm": ("texts",)}


def packable(objective: str) -> tuple[str, ...]:
    """The data sets that packing serves with ``objective``."""
    out = []
    for name in registry.names():
        ds = registry.get(name)
        if ds.kind in PACKABLE_KINDS.get(objective, ()) or (objective == "" and ds.packable):
            out.append(name)
    return tuple(out)


def base_data(cfg):
    """`config.data` without objective and packing: the data set whose examples are packed."""
    base = cfg.copy_and_resolve_references()
    with base.unlocked():
        base.objective, base.packing = "", False
        if "mlm_whole_word" in base:
            base.mlm_whole_word = False
    return base


def problems(cfg) -> list[tuple[str, object, str]]:
    """Invalid ``config.data`` packing fields as ``(field, value, valid)``."""
    packing = cfg.get("packing", False)
    if packing in (None, False):
        return []
    if packing is not True:
        return [("packing", packing, "True or False")]
    objective = cfg.get("objective") or ""
    if cfg.get("name") not in packable(objective):
        why = ("LM corpora are one dense token stream already, with no example boundaries "
               "to keep")  # fmt: skip
        ok = "; ".join(f"objective={o!r} on {', '.join(packable(o))}" for o in PACKABLE_KINDS)
        return [("packing", packing, f"False here ({why}), or True with {ok}")]
    out = []
    align = cfg.get("packing_align", 1)
    if isinstance(align, bool) or not isinstance(align, int) or align < 1:
        out.append(("packing_align", align, "a positive integer (1: no alignment)"))
    k = cfg.get("max_examples_per_row", 8)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        out.append(("max_examples_per_row", k, "a positive integer (the labels per row)"))
    return out


def next_fit(lengths, max_len, *, align: int = 1, max_segments: int = 0) -> list[np.ndarray]:
    """Indices into ``lengths`` (``[N]`` or ``[N, sides]``; ``max_len`` an int or one per
    side) grouped into rows, in order: every example starts at a multiple of ``align`` on
    every side, and a row holds at most ``max_segments`` examples (0: no limit)."""
    lengths = np.asarray(lengths, np.int64).reshape(len(lengths), -1)
    cap = np.broadcast_to(np.asarray(max_len, np.int64), lengths.shape[1:])
    rows, current, used = [], [], np.zeros_like(cap)
    for i, n in enumerate(np.minimum(lengths, cap)):
        start = -(-used // align) * align
        if current and ((start + n > cap).any() or len(current) == max_segments):
            rows.append(np.asarray(current, np.int64))
            current, start = [], np.zeros_like(cap)
        current.append(i)
        used = start + n
    if current:
        rows.append(np.asarray(current, np.int64))
    return rows


# --------------------------------------------------------------------------- the examples


class TextExamples:
    """Examples of a TFDS text source (``pipeline.Classification``'s): ``tokens`` + offset
    and ``label``. ``mode``: 'tokens' (inputs), 'lm' (a document of up to T + 1 tokens:
    inputs = all but the last, targets = all but the first) or 'classification'."""

    def __init__(self, source, size: int, max_len: int, offset: int, mode: str = "tokens"):
        self.source, self.size, self.max_len, self.offset = source, size, max_len, offset
        self.mode = mode
        self._lengths = None

    def lengths(self, ids) -> np.ndarray:
        """Slots ``[n, 1]`` of examples ``ids`` (the split's lengths are read once)."""
        if self._lengths is None:
            src = self.source()
            examples = src.__getitems__(list(range(self.size)))
            n = np.array([len(ex["tokens"]) for ex in examples], np.int64)
            self._lengths = np.maximum(n - (self.mode == "lm"), 0)
        return np.minimum(self._lengths[np.asarray(ids, np.int64)], self.max_len)[:, None]

    def get(self, ids) -> list[tuple[tuple[dict, ...], int]]:
        out = []
        for ex in self.source().__getitems__([int(i) for i in ids]):
            extra = self.mode == "lm"
            t = np.asarray(ex["tokens"][: self.max_len + extra], np.int32) + self.offset
            fields = {"inputs": t[:-1], "targets": t[1:]} if extra else {"inputs": t}
            out.append(((fields,), int(ex["label"])))
        return out


class PairExamples:
    """Source/target pairs of a translation split (``seq2seq._Encoded``; training reads the
    kept pairs): ids cut to S-1 (T-1) + EOS, as ``seq2seq.Translation``."""

    def __init__(self, data, size: int, S: int, T: int):
        self.data, self.size, self.S, self.T = data, size, S, T

    def _index(self, ids):
        index = self.data()[2]
        ids = np.asarray(ids, np.int64)
        return ids if index is None else index[ids]

    def lengths(self, ids) -> np.ndarray:
        src, tgt, _ = self.data()
        j = self._index(ids)
        return np.stack([np.minimum(src.lengths[j] + 1, self.S),
                         np.minimum(tgt.lengths[j] + 1, self.T)], axis=1)  # fmt: skip

    def get(self, ids):
        from seqjax.data import seq2seq

        src, tgt, _ = self.data()
        eos = self.data.eos_id
        return [(({"inputs": seq2seq._row(src.row(j), self.S, eos)},
                  {"targets": seq2seq._row(tgt.row(j), self.T, eos)}), None)
                for j in self._index(ids).tolist()]  # fmt: skip


class SyntheticExamples:
    """copy/reverse pairs (``seq2seq.Synthetic``): example i is the pair that maker makes
    for row i, source and target without their padding."""

    def __init__(self, maker, size: int):
        self.maker, self.size = maker, size

    def _pairs(self, ids):
        import copy

        m = copy.copy(self.maker)
        m.size = None
        m.rows = lambda step: np.asarray(ids, np.int64)
        return m(0)

    def lengths(self, ids) -> np.ndarray:
        b = self._pairs(ids)
        return np.stack([(b["inputs"] > 0).sum(1), (b["targets"] > 0).sum(1)], axis=1)

    def get(self, ids):
        b = self._pairs(ids)
        n_s, n_t = (b["inputs"] > 0).sum(1), (b["targets"] > 0).sum(1)
        return [(({"inputs": b["inputs"][r, : n_s[r]]}, {"targets": b["targets"][r, : n_t[r]]}),
                 None) for r in range(len(n_s))]  # fmt: skip


# ------------------------------------------------------------------------------- the rows


class PackedRows(pipeline._Maker):
    """Packed rows of ``examples`` (``TextExamples``, ``PairExamples``, ...).

    Training: epoch e packs the examples in the order of a seeded permutation (a synthetic
    set with ``fresh``: examples ``e N .. e N + N - 1``, new ones every epoch); global row g is
    row ``g - start_e`` of the epoch whose rows contain it, so a row is a function of the
    seed and g (an exact resume restores the grain step). Evaluation packs the split once in
    order and pads the last batch with empty rows.

    Args:
      examples: the example source; row_lens: slots per side (``(T,)`` or ``(S, T)``);
      seed: training seed, None for evaluation; align, max_segments: as ``next_fit``;
      labels: emit ``targets``/``weights`` ``[b, max_segments]`` per example (classification);
      fresh: training reads new example ids every epoch (endless synthetic data).
    """

    def __init__(self, examples, row_lens, seed, *layout, align=1, max_segments=0,
                 labels=False, fresh=False):  # fmt: skip
        super().__init__(*layout)
        self.examples, self.row_lens, self.seed = examples, tuple(row_lens), seed
        self.size = examples.size
        self.align, self.max_segments, self.labels, self.fresh = align, max_segments, labels, fresh
        self._plans: dict[int, list[np.ndarray]] = {}
        self._starts = [0]  # first global row of epochs 0, 1, ... (grows as needed)

    def _order(self, epoch: int) -> np.ndarray:
        if self.seed is None:
            return np.arange(self.size)
        if self.fresh:
            return epoch * self.size + np.arange(self.size)
        return np.random.default_rng([self.seed, 3, epoch]).permutation(self.size)

    def plan(self, epoch: int) -> list[np.ndarray]:
        """Epoch ``epoch``'s rows as arrays of example ids."""
        plan = self._plans.get(epoch)
        if plan is None:
            order = self._order(epoch)
            rows = next_fit(self.examples.lengths(order), self.row_lens, align=self.align,
                            max_segments=self.max_segments)  # fmt: skip
            plan = [order[r] for r in rows]
            self._plans = {**dict(list(self._plans.items())[-2:]), epoch: plan}
        return plan

    def num_rows(self) -> int:
        """Rows of one epoch (evaluation: of the split)."""
        return len(self.plan(0))

    def efficiency(self) -> float:
        """Real tokens / slots of epoch 0's rows (every side)."""
        real = self.examples.lengths(self._order(0)).sum()
        return float(real) / (self.num_rows() * sum(self.row_lens))

    def _locate(self, g: int):
        """``(epoch, row)`` of global row ``g`` (training), or ``(0, g)``."""
        if self.seed is None:
            return 0, g
        while self._starts[-1] <= g:
            self._starts.append(self._starts[-1] + len(self.plan(len(self._starts) - 1)))
        e = bisect.bisect_right(self._starts, g) - 1
        return e, g - self._starts[e]

    def __call__(self, step):
        g_b = self.rows(step)
        rows = []
        for g in g_b.tolist():
            e, r = self._locate(g)
            plan = self.plan(e)
            rows.append(plan[r] if r < len(plan) else np.zeros((0,), np.int64))
        ids = sorted({int(i) for row in rows for i in row})
        examples = dict(zip(ids, self.examples.get(ids))) if ids else {}
        b = len(g_b)
        out, prefixes = {}, ("", "target_")
        for side, n_slots in enumerate(self.row_lens):
            p = prefixes[side]
            for k in ("segment_ids", "positions"):
                out[p + k] = np.zeros((b, n_slots), np.int32)
        if self.labels:
            out["targets"] = np.zeros((b, self.max_segments), np.int32)
            out["label_weights"] = np.zeros((b, self.max_segments), np.float32)
        for r, row in enumerate(rows):
            at = [0] * len(self.row_lens)
            for s, i in enumerate(row.tolist()):
                sides, label = examples[i]
                for side, fields in enumerate(sides):
                    p, start = prefixes[side], -(-at[side] // self.align) * self.align
                    for name, x in fields.items():
                        x = x[: self.row_lens[side] - start]
                        out.setdefault(name, np.zeros((b, self.row_lens[side]), np.int32))
                        out[name][r, start : start + len(x)] = x
                    n = len(x)
                    out[p + "segment_ids"][r, start : start + n] = s + 1
                    out[p + "positions"][r, start : start + n] = np.arange(n)
                    at[side] = start + n
                if self.labels:
                    out["targets"][r, s] = label
                    out["label_weights"][r, s] = 1.0
        if self.labels:
            out["weights"] = out.pop("label_weights")
        else:  # 1 on real tokens of the last side (the targets' side of seq2seq)
            out["weights"] = out[prefixes[len(self.row_lens) - 1] + "segment_ids"] > 0
            out["weights"] = out["weights"].astype(np.float32)
        return out


def PackedExamples(source, size: int, max_len: int, offset: int, seed, *layout):  # noqa: N802
    """Packed rows of a TFDS text source's tokens (the masked LM's base rows): ``inputs``,
    ``segment_ids``, ``positions`` int32 and ``weights`` float32 ``[b, T]``."""
    return PackedRows(TextExamples(source, size, max_len, offset), (max_len,), seed, *layout)


def log_efficiency(maker: PackedRows, split: str) -> float:
    """Logs (and returns) the packing efficiency: real tokens / slots."""
    eff = maker.efficiency()
    real = float(maker.examples.lengths(maker._order(0)).sum())
    unpacked = real / (maker.size * sum(maker.row_lens))
    logging.info("packing %s: %d examples in %d rows of %s slots: efficiency %.3f (real tokens "
                 "/ slots; one example per padded row: %.3f)", split, maker.size,
                 maker.num_rows(), "+".join(map(str, maker.row_lens)), eff, unpacked)  # fmt: skip
    return eff


def iterator(maker: PackedRows, cfg, split: str, train: bool, spec: dict):
    """The ``DataIterator`` of packed rows (its ``packing_efficiency`` attribute set)."""
    import math

    eff = log_efficiency(maker, split)
    num_steps = None if train else math.ceil(maker.num_rows() / maker.global_batch)
    spec = {**spec, "packing": True, "packing_align": maker.align,
            "max_examples_per_row": maker.max_segments}  # fmt: skip
    it = pipeline.DataIterator(maker, num_steps, spec, num_workers=int(cfg.num_workers),
                               prefetch=int(cfg.prefetch))  # fmt: skip
    it.packing_efficiency = eff
    return it


def base_iterator(base_cfg, split, process_index, process_count, train, base_make):
    """The unwrapped data set's iterator (``base_make`` is ``api.make``), closed at once: the
    objectives and packing use only its ``maker``, ``num_steps`` and ``spec``."""
    with base_cfg.unlocked():
        base_cfg.num_workers, base_cfg.prefetch = 0, 0  # only its maker is used
    base = base_make(base_cfg, split=split, process_index=process_index,
                     process_count=process_count, train=train)  # fmt: skip
    base.close()
    return base


def make(cfg, split: str, process_index: int, process_count: int, train: bool, base_make):
    """The packed iterator of ``config.data`` (``api.make`` with ``data.packing``), and the
    one-document-per-row LM of example texts (``objective='lm'`` without packing);
    ``base_make`` is ``api.make`` (for the unpacked data set's maker)."""
    from seqjax.data import seq2seq

    base = base_iterator(base_data(cfg), split, process_index, process_count, train, base_make)
    m, objective = base.maker, cfg.get("objective") or ""
    layout = (m.global_batch, process_index, process_count)
    align, k = int(cfg.get("packing_align", 1)), int(cfg.get("max_examples_per_row", 8))
    spec = {**base.spec, "objective": objective}
    if isinstance(m, seq2seq.Synthetic):
        size = int(cfg.dup_eval_size) if not train else 4096  # training: fresh every epoch
        maker = PackedRows(SyntheticExamples(m, size), (m.S, m.T), m.seed if train else None,
                           *layout, align=align, fresh=train)  # fmt: skip
    elif isinstance(m, seq2seq.Translation):
        maker = PackedRows(PairExamples(m.data, m.size, m.S, m.T), (m.S, m.T), m.seed,
                           *layout, align=align)  # fmt: skip
    else:  # pipeline.Classification: imdb_bytes, listops texts
        mode = "lm" if objective == "lm" else "classification"
        ex = TextExamples(m.source, m.size, m.max_len, m.offset, mode)
        if not cfg.get("packing"):  # objective='lm', one document per row
            maker = _Unpacked(PackedRows(ex, (m.max_len,), m.seed, *layout, max_segments=1))
            return pipeline.DataIterator(maker, base.num_steps, spec,
                                         num_workers=int(cfg.num_workers),
                                         prefetch=int(cfg.prefetch))  # fmt: skip
        maker = PackedRows(ex, (m.max_len,), m.seed, *layout, align=align,
                           max_segments=k if mode == "classification" else 0,
                           labels=mode == "classification")  # fmt: skip
    return iterator(maker, cfg, split, train, spec)


class _Unpacked:
    """One example per row without the segment fields (the LM of example texts)."""

    def __init__(self, packed: PackedRows):
        self.packed = packed

    def rows(self, step):
        return self.packed.rows(step)

    def __call__(self, step):
        out = self.packed(step)
        return {k: out[k] for k in ("inputs", "targets", "weights")}
