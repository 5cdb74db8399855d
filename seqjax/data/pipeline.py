"""grain pipelines: deterministic batch makers and a checkpointable iterator.

Every pipeline is `grain.MapDataset.range(num_steps).map(maker)`: element `s` is this process's
batch of global step `s`. A maker computes the rows of the global batch it owns, global rows
`[s*B + p*b, s*B + (p+1)*b)` (B global batch, b = B / process_count, p process index), from
counter-based hashes of `(seed, global row)` only. Hence:

- the same seed gives the same batches, whatever `num_workers` or thread count;
- processes hold disjoint rows that together form exactly the single-process global batch;
- the grain iterator state (`next_index`) restores the exact next batch.

Legend: B global batch, b per-process batch, T sequence length, n tokens in the split.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

import grain
import numpy as np
from absl import flags

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def hash_u64(*keys) -> np.ndarray:
    """SplitMix64 hash of broadcast integer keys: a counter-based RNG (uint64 array)."""
    h = np.zeros((), dtype=np.uint64)
    with np.errstate(over="ignore"):  # arithmetic mod 2**64 is the point
        for key in keys:
            x = h ^ np.asarray(key, dtype=np.uint64)
            x = x + _GOLDEN
            x = (x ^ (x >> np.uint64(30))) * _M1
            x = (x ^ (x >> np.uint64(27))) * _M2
            h = x ^ (x >> np.uint64(31))
    return h


class _Maker:
    """Base of the batch makers: which global rows this process owns at step `s`."""

    def __init__(self, global_batch: int, process_index: int, process_count: int):
        self.global_batch = global_batch
        self.batch = global_batch // process_count
        self.process_index = process_index

    def rows(self, step: int) -> np.ndarray:
        """Global row ids `[b]` of this process at `step`."""
        start = step * self.global_batch + self.process_index * self.batch
        return start + np.arange(self.batch, dtype=np.int64)

    def __call__(self, step: int) -> dict[str, np.ndarray]:
        raise NotImplementedError


# -------------------------------------------------------------------------------- LM batches


def _lm_batch(tokens: np.ndarray, idx: np.ndarray, valid: np.ndarray | None = None) -> dict:
    """Gathers windows `idx [b, T+1]` -> inputs/targets `[b, T]` (targets shifted by one)."""
    w = tokens[idx].astype(np.int32)
    weights = np.ones(w[:, 1:].shape, np.float32) if valid is None else valid.astype(np.float32)
    return {"inputs": w[:, :-1], "targets": w[:, 1:], "weights": weights}


class LMRandomWindows(_Maker):
    """Training: each row a window at a uniformly random offset, drawn from hash(seed, row)."""

    def __init__(self, tokens: Callable[[], np.ndarray], seq_len: int, seed: int, *args):
        super().__init__(*args)
        self.tokens, self.seq_len, self.seed = tokens, seq_len, seed

    def __call__(self, step):
        tokens = self.tokens()
        starts = len(tokens) - self.seq_len  # offsets 0..n-T-1 leave room for the last target
        off = hash_u64(self.seed, 1, self.rows(step)) % np.uint64(starts)
        idx = off.astype(np.int64)[:, None] + np.arange(self.seq_len + 1)
        return _lm_batch(tokens, idx)


class LMEvalWindows(_Maker):
    """Evaluation: non-overlapping windows `[k*T, (k+1)*T)` covering every target once.

    Window k predicts tokens `k*T+1 .. (k+1)*T`; the last window and the rows after the last window
    are padded with zero weights.
    """

    def __init__(self, tokens: Callable[[], np.ndarray], seq_len: int, *args):
        super().__init__(*args)
        self.tokens, self.seq_len = tokens, seq_len

    @staticmethod
    def num_windows(n: int, seq_len: int) -> int:
        return math.ceil((n - 1) / seq_len)

    def __call__(self, step):
        tokens = self.tokens()
        n, T = len(tokens), self.seq_len
        g = self.rows(step)
        idx = g[:, None] * T + np.arange(T + 1)
        valid = (idx[:, 1:] < n) & (g < self.num_windows(n, T))[:, None]
        return _lm_batch(tokens, np.minimum(idx, n - 1), valid)


class LMStreams(_Maker):
    """Transformer-XL batching (Dai et al. 2019, §3.2): row r of every step continues stream r.

    The split is cut into B contiguous streams of L tokens; global stream g starts at `g*L`, and
    step s holds its inputs `[s*T, (s+1)*T)` (targets one further). Training drops the remainder
    (`L = (n-1) // B`) and starts over after `L // T` steps; evaluation makes `L = ceil((n-1)/B)`,
    runs `ceil(L/T)` steps and gives zero weight to positions past a stream's end, so every target
    is counted once.
    """

    def __init__(self, tokens: Callable[[], np.ndarray], seq_len: int, train: bool, *args,
                 stride: int | None = None):  # fmt: skip
        super().__init__(*args)
        self.tokens, self.seq_len, self.train = tokens, seq_len, train
        self.stride = int(stride or seq_len)  # XLNet's memory: reuse_len (seqjax.data.plm)

    @staticmethod
    def stream_len(n: int, global_batch: int, train: bool) -> int:
        return (n - 1) // global_batch if train else math.ceil((n - 1) / global_batch)

    @staticmethod
    def num_windows(L: int, T: int, stride: int, train: bool) -> int:
        """Windows of ``T`` every ``stride`` tokens in a stream of ``L``: training those that
        fit (``L // T`` when ``stride = T``), evaluation enough to reach its end."""
        if train:
            return (L - T) // stride + 1 if L >= T else 0
        return max(math.ceil((L - T) / stride), 0) + 1

    def __call__(self, step):
        tokens = self.tokens()
        n, T, S = len(tokens), self.seq_len, self.stride
        L = self.stream_len(n, self.global_batch, self.train)
        if self.train:
            step = step % self.num_windows(L, T, S, True)
        g = self.process_index * self.batch + np.arange(self.batch)  # this process's streams
        pos = step * S + np.arange(T + 1)  # positions within a stream
        idx = g[:, None] * L + pos
        valid = (pos[1:] <= L)[None, :] & (idx[:, 1:] < n)  # input pos < L and target < n
        return _lm_batch(tokens, np.minimum(idx, n - 1), None if self.train else valid)


# ------------------------------------------------------------------------ duplication (Reformer)


class Duplication(_Maker):
    """Reformer Table 2 (Kitaev et al. 2020): sequences `0 w 0 w`, w of random symbols 1..V-1.

    With T = 2(|w| + 1) (1024 -> |w| = 511): inputs = the sequence, targets = the sequence shifted
    left (last target 0), weights 1 only where the target is in the second copy of w.
    """

    def __init__(self, seq_len: int, vocab_size: int, seed: int, split_id: int, size, *args):
        super().__init__(*args)
        self.seq_len, self.vocab_size, self.seed = seq_len, vocab_size, seed
        self.split_id, self.size = split_id, size  # size None: endless

    def __call__(self, step):
        n = self.seq_len // 2 - 1
        g = self.rows(step)
        h = hash_u64(self.seed, 2, self.split_id, g[:, None], np.arange(n)[None, :])
        w = (h % np.uint64(self.vocab_size - 1)).astype(np.int32) + 1
        zero = np.zeros((len(g), 1), np.int32)
        seq = np.concatenate([zero, w, zero, w], axis=1)
        weights = np.zeros(seq.shape, np.float32)
        weights[:, n + 1 : 2 * n + 1] = 1.0  # targets seq[n+2 .. 2n+1]: the second copy
        if self.size is not None:
            live = g < self.size
            seq, weights = seq * live[:, None], weights * live[:, None]
        targets = np.concatenate([seq[:, 1:], zero], axis=1)
        return {"inputs": seq, "targets": targets, "weights": weights}


# ---------------------------------------------------------------------------- classification


class Classification(_Maker):
    """LRA classification batches from a TFDS data source.

    Training reads example `perm_e[g mod N]` for global row g in epoch `e = g // N`, with
    `perm_e` a seeded permutation per epoch; evaluation reads example g once (g < N) and pads
    the rest of the last batch with zero weight.
    """

    def __init__(self, source, size: int, max_len: int, offset: int, seed, *args, pad_id=0):
        super().__init__(*args)
        self.source, self.size, self.max_len = source, size, max_len
        self.offset, self.seed = offset, seed  # seed None: evaluation order
        self.pad_id = int(pad_id)  # a warm start's tokenizer's (RoBERTa: 1), else 0
        self._perm: dict[int, np.ndarray] = {}

    def _permutation(self, epoch: int) -> np.ndarray:
        perm = self._perm.get(epoch)
        if perm is None:  # keep the last few epochs; replace the dict whole (thread-safe)
            perm = np.random.default_rng([self.seed, 3, epoch]).permutation(self.size)
            self._perm = {**dict(list(self._perm.items())[-2:]), epoch: perm}
        return perm

    def __call__(self, step):
        g = self.rows(step)
        if self.seed is None:
            live = g < self.size
            index = np.where(live, g, 0)
        else:
            live = np.ones(len(g), bool)
            index = np.array([self._permutation(e)[i] for e, i in zip(*np.divmod(g, self.size))])
        examples = self.source().__getitems__([int(i) for i in index])
        inputs = np.full((len(g), self.max_len), self.pad_id, np.int32)
        for r, ex in enumerate(examples):
            t = np.asarray(ex["tokens"][: self.max_len], dtype=np.int32)
            inputs[r, : len(t)] = t + self.offset  # IMDB: byte + 1, 0 = padding (LRA)
        labels = np.array([int(ex["label"]) for ex in examples], np.int32)
        return {
            "inputs": np.where(live[:, None], inputs, self.pad_id).astype(np.int32),
            "targets": labels * live,
            "weights": live.astype(np.float32),
        }


# ---------------------------------------------------------------------------------- iterator


class DataIterator:
    """Iterator over this process's batches, with a small JSON-serializable state.

    Attributes:
      spec: what the iterator reads (checked again when a state is restored).
      num_steps: number of batches (evaluation) or None (endless training).
    """

    def __init__(
        self, maker: _Maker, num_steps: int | None, spec: dict, *, num_workers=0, prefetch=4
    ):
        self.spec = spec
        self.num_steps = num_steps
        self._maker = maker
        self._num_workers = num_workers
        self._prefetch = prefetch
        self._step = 0
        self._start, self._it = 0, self._make_iterator(0)

    def _make_iterator(self, start: int) -> grain.DatasetIterator:
        stop = self.num_steps if self.num_steps is not None else sys.maxsize
        ds = grain.MapDataset.range(start, max(start, stop)).map(self._maker)
        ds = ds.to_iter_dataset(
            grain.ReadOptions(
                num_threads=min(2, self._prefetch), prefetch_buffer_size=self._prefetch
            )
        )
        if self._num_workers > 0:
            # grain's worker processes read absl flags; outside an absl app none were parsed.
            if not flags.FLAGS.is_parsed():
                flags.FLAGS.mark_as_parsed()
            ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=self._num_workers))
        return iter(ds)

    @property
    def maker(self) -> _Maker:
        """The batch maker (element s = this process's batch of step s)."""
        return self._maker

    def __iter__(self):
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        batch = next(self._it)
        self._step += 1
        return batch

    def get_state(self) -> dict:
        """`{'step', 'start', 'num_workers', 'spec', 'grain'}`; JSON-serializable.

        `step` counts the batches delivered; `grain` is grain's own iterator state for the
        pipeline that starts at step `start`.
        """
        return {
            "step": self._step,
            "start": self._start,
            "num_workers": self._num_workers,
            "spec": dict(self.spec),
            "grain": self._it.get_state(),
        }

    def set_state(self, state: dict) -> None:
        """Restores a `get_state` state: the next batch is the one after those delivered.

        With the same `num_workers` and process layout grain's own state is restored; with
        another worker count or process layout the pipeline restarts at the saved step.

        Raises:
          ValueError: the state belongs to another data configuration or process layout.
        """
        spec = dict(state.get("spec", {}))
        diff = {k: (spec.get(k), self.spec.get(k)) for k in set(spec) | set(self.spec)}
        diff = {k: v for k, v in diff.items() if v[0] != v[1]}
        # Rows are a function of the global row number, so another process layout (a run
        # resumed on more or fewer hosts) continues the same global batches from the step.
        relayout = bool(diff) and set(diff) <= {"process_index", "process_count"}
        if diff and not relayout:
            raise ValueError(
                f"data iterator state does not match config.data: (saved, now) = {diff}. "
                "Restore with the same data config and batch size."
            )
        self.close()
        if state.get("num_workers") == self._num_workers and not relayout:
            self._start, self._it = state["start"], self._make_iterator(state["start"])
            self._it.set_state(state["grain"])
        else:
            self._start, self._it = state["step"], self._make_iterator(state["step"])
        self._step = int(state["step"])

    def close(self) -> None:
        """Stops grain's threads and worker processes (also done when garbage-collected)."""
        close = getattr(self._it, "close", None)
        if close is not None:
            close()
