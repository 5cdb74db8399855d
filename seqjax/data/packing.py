"""Sequence packing (``config.data.packing=True``): several examples in one row.

Rows of ``T = data.max_len`` slots are filled with whole examples (each cut to ``T`` tokens)
in the epoch's order by next-fit: an example that does not fit in the current row starts
the next one (Raffel et al. 2020, T5 §3.1 / Krell et al. 2021 "Efficient sequence packing"
pack the same way; next-fit keeps the data order, so the rows are a function of the seed
and the global row number like every other batch). Each row carries

* ``segment_ids`` int32 ``[B, T]``: 1, 2, ... for its examples, 0 on the padding slots;
  attention lets a query see only keys of its own segment (``seqjax.attention.masks``), so
  an example's outputs equal those of the example alone in a padded row;
* ``positions`` int32 ``[B, T]``: positions restarting at 0 at every example;

and the packing efficiency (real tokens / slots) is logged when the iterator is made.

Mechanisms whose outputs mix positions across a row cannot honour segments and refuse
packing: Linformer (its E K, F V projections mix every position of the row; Wang et al.
2020 §4) and Transformer-XL's memory (it carries one example's states into the next
segment); see ``refusal``.

Legend: B global batch, b per-process batch, T row length (slots), N examples in a split.
"""

from __future__ import annotations

import bisect
import logging

import numpy as np

from seqjax.data import pipeline

# Mechanisms (config.model.attention) that cannot honour segment_ids, and why.
NO_SEGMENTS = {
    "linformer": "its projections E K, F V mix every position of a row, so packed examples "
    "would attend to each other",
    "relative": "Transformer-XL's memory carries the previous segment's states into the next",
}


def refusal(config) -> str | None:
    """What ``config.data.packing`` must be when the model cannot honour segments (the
    ``valid`` clause of config validation's message), else None."""
    from seqjax.models import memory

    kind = memory.kind(config)
    if memory.kinds().get(kind) is not None:
        return (f"False with model.kind={kind!r} (the recurrent memory crosses example "
                "boundaries)")  # fmt: skip
    names = [n.strip() for n in str(config.model.attention).split(",") if n.strip()]
    for name in names:
        if name in NO_SEGMENTS:
            return f"False with model.attention={name!r} ({NO_SEGMENTS[name]})"
    return None


def problems(cfg) -> list[tuple[str, object, str]]:
    """Invalid ``config.data`` packing fields as ``(field, value, valid)``."""
    packing = cfg.get("packing", False)
    if packing in (None, False):
        return []
    if packing is not True:
        return [("packing", packing, "True or False")]
    if cfg.get("objective") != "mlm" or cfg.get("name") not in ("imdb_bytes", "listops"):
        why = "packing of examples; LM corpora are already one dense stream"
        return [("packing", packing, f"False, or True with objective='mlm' on imdb_bytes or "
                 f"listops ({why})")]  # fmt: skip
    return []


def next_fit(lengths: np.ndarray, max_len: int) -> list[np.ndarray]:
    """Indices into ``lengths`` grouped into rows of at most ``max_len`` tokens, in order."""
    rows, current, used = [], [], 0
    for i, n in enumerate(np.minimum(lengths, max_len).tolist()):
        if current and used + n > max_len:
            rows.append(np.asarray(current, np.int64))
            current, used = [], 0
        current.append(i)
        used += n
    if current:
        rows.append(np.asarray(current, np.int64))
    return rows


class PackedExamples(pipeline._Maker):
    """Packed rows of a TFDS text source (``pipeline.Classification``'s examples).

    Training: epoch e packs the examples in the order of the same seeded permutation
    ``pipeline.Classification`` uses; global row g is row ``g - start_e`` of the epoch whose
    rows contain it. Evaluation packs the split once in order and pads the last batch with
    empty rows. Yields ``inputs``, ``segment_ids``, ``positions`` int32 ``[b, T]`` and
    ``weights`` float32 ``[b, T]`` (1 on real tokens).
    """

    def __init__(self, source, size: int, max_len: int, offset: int, seed, *args):
        super().__init__(*args)
        self.source, self.size, self.max_len = source, size, max_len
        self.offset, self.seed = offset, seed  # seed None: evaluation order
        self._lengths = None
        self._plans: dict[int, list[np.ndarray]] = {}
        self._starts = [0]  # first global row of epochs 0, 1, ... (grows as needed)

    def lengths(self) -> np.ndarray:
        """Tokens of every example (read once per process)."""
        if self._lengths is None:
            src = self.source()
            examples = src.__getitems__(list(range(self.size)))
            self._lengths = np.array([len(ex["tokens"]) for ex in examples], np.int64)
        return self._lengths

    def _order(self, epoch: int) -> np.ndarray:
        if self.seed is None:
            return np.arange(self.size)
        return np.random.default_rng([self.seed, 3, epoch]).permutation(self.size)

    def plan(self, epoch: int) -> list[np.ndarray]:
        """Epoch ``epoch``'s rows as arrays of example ids."""
        plan = self._plans.get(epoch)
        if plan is None:
            order = self._order(epoch)
            plan = [order[r] for r in next_fit(self.lengths()[order], self.max_len)]
            self._plans = {**dict(list(self._plans.items())[-2:]), epoch: plan}
        return plan

    def num_rows(self) -> int:
        """Rows of one epoch (evaluation: of the split)."""
        return len(self.plan(0))

    def efficiency(self) -> float:
        """Real tokens / slots of epoch 0's rows."""
        return float(np.minimum(self.lengths(), self.max_len).sum()) / (
            self.num_rows() * self.max_len
        )

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
        T = self.max_len
        rows = []
        for g in g_b.tolist():
            e, r = self._locate(g)
            plan = self.plan(e)
            rows.append(plan[r] if r < len(plan) else np.zeros((0,), np.int64))
        ids = sorted({int(i) for row in rows for i in row})
        examples = dict(zip(ids, self.source().__getitems__(ids))) if ids else {}
        out = {k: np.zeros((len(g_b), T), np.int32) for k in ("inputs", "segment_ids", "positions")}
        for b, row in enumerate(rows):
            at = 0
            for s, i in enumerate(row.tolist()):
                t = np.asarray(examples[i]["tokens"][:T], np.int32) + self.offset
                n = len(t)
                out["inputs"][b, at : at + n] = t
                out["segment_ids"][b, at : at + n] = s + 1
                out["positions"][b, at : at + n] = np.arange(n)
                at += n
        out["weights"] = (out["segment_ids"] > 0).astype(np.float32)
        return out


def log_efficiency(maker: PackedExamples, split: str) -> float:
    eff = maker.efficiency()
    unpacked = float(np.minimum(maker.lengths(), maker.max_len).sum()) / (
        maker.size * maker.max_len
    )
    logging.info("packing %s: %d examples in %d rows of %d slots: efficiency %.3f (real tokens / "
                 "slots; padded one per row: %.3f)", split, maker.size, maker.num_rows(),
                 maker.max_len, eff, unpacked)  # fmt: skip
    return eff
