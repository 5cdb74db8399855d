"""The Long Range Arena as data: its six tasks, the rows of Table 1 and how each row maps to a
seqjax attention mechanism (Tay et al. 2020, "Long Range Arena", Table 1).

The per-task configs (``configs/lra_*.py``) and the study ``experiments/lra_accuracy`` read
these tables, so a mechanism registered later (``seqjax.attention.register``) joins every
task's sweep without editing them, and one that is missing is skipped with its reason
(``available_rows``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import ml_collections

# Tay et al. 2020, Table 1: test accuracy (%). None = "FAIL" (Path-X: no model above chance).
# "Avg" is the paper's mean over the five tasks without Path-X.
TASKS = ("listops", "text", "retrieval", "image", "pathfinder", "pathx")
TASK_TITLES = {
    "listops": "ListOps",
    "text": "Text",
    "retrieval": "Retrieval",
    "image": "Image",
    "pathfinder": "Pathfinder",
    "pathx": "Path-X",
}
# Chance accuracy (%) of each task: ListOps 10 classes, Image 10 classes, the others binary.
CHANCE = {"listops": 10.0, "text": 50.0, "retrieval": 50.0, "image": 10.0,
          "pathfinder": 50.0, "pathx": 50.0}  # fmt: skip
PAPER_TABLE1 = {
    "Transformer": (36.37, 64.27, 57.46, 42.44, 71.40, None, 54.39),
    "Local Attention": (15.82, 52.98, 53.39, 41.46, 66.63, None, 46.06),
    "Sparse Trans.": (17.07, 63.58, 59.59, 44.24, 71.71, None, 51.24),
    "Longformer": (35.63, 62.85, 56.89, 42.22, 69.71, None, 53.46),
    "Linformer": (35.70, 53.94, 52.27, 38.56, 76.34, None, 51.36),
    "Reformer": (37.27, 56.10, 53.40, 38.07, 68.50, None, 50.67),
    "Synthesizer": (36.99, 61.68, 54.67, 41.61, 69.45, None, 52.88),
    "BigBird": (36.05, 64.02, 59.29, 40.83, 74.87, None, 55.01),
    "Linear Trans.": (16.13, 65.90, 53.09, 42.34, 75.30, None, 50.55),
    "Performer": (18.01, 65.40, 53.82, 42.77, 77.05, None, 51.41),
}


def paper(row: str, task: str) -> float | None:
    """Table 1's accuracy of ``row`` on ``task`` (``"avg"``: the paper's Avg column)."""
    values = PAPER_TABLE1[row]
    return values[-1] if task == "avg" else values[TASKS.index(task)]


@dataclasses.dataclass(frozen=True)
class Row:
    """One row of Table 1 as seqjax runs it.

    Attributes:
      paper_name: the row's name in Table 1.
      mechanism: the seqjax attention mechanism (``config.model.attention``).
      options: input length T -> that mechanism's options for this row.
      label: the row's short name in results (defaults to the mechanism; the flex rows
        need their own).
    """

    paper_name: str
    mechanism: str
    options: Callable[[int], dict]
    label: str = ""

    @property
    def name(self) -> str:
        return self.label or self.mechanism


def _pow2_near_sqrt(t: int) -> int:
    return max(16, 1 << round(max(t, 1).bit_length() / 2))


# Table 1's rows in the paper's order. Options: the LRA reference code's where it states
# them (Linformer k 256, Reformer 2 hashes, Performer 256 features, BigBird 3 random blocks of
# 64), else the mechanism's own defaults; Longformer/BigBird are patterns of `flex`.
ROWS = (
    Row("Transformer", "dense", lambda t: {"implementation": "auto"}),
    Row("Local Attention", "local", lambda t: {}),
    Row("Sparse Trans.", "sparse_fixed",
        lambda t: {"stride": _pow2_near_sqrt(t), "c": _pow2_near_sqrt(t) // 4}),
    Row("Longformer", "flex",
        lambda t: {"pattern": "global_tokens", "num_global": 1, "window": min(256, t // 4)},
        label="longformer"),
    Row("Linformer", "linformer", lambda t: {"k": min(256, t), "max_len": t}),
    Row("Reformer", "lsh", lambda t: {"n_hashes": 2, "chunk_len": 64}),
    Row("BigBird", "flex",
        lambda t: {"pattern": "bigbird", "window": 1, "num_global": 1, "num_random": 3,
                   "block_size": 64 if t >= 256 else 16},
        label="bigbird"),
    Row("Linear Trans.", "linear", lambda t: {}),
    Row("Performer", "performer", lambda t: {}),
)  # fmt: skip
ROW_BY_NAME = {r.name: r for r in ROWS}


def available_rows(names=None) -> tuple[list[Row], list[tuple[Row, str]]]:
    """``(rows whose mechanism is registered, [(row, why not)])`` of ``names`` (default all)."""
    from seqjax import attention

    registered = set(attention.names())
    chosen = [ROW_BY_NAME[n] for n in names] if names else list(ROWS)
    ok = [r for r in chosen if r.mechanism in registered]
    missing = [(r, f"mechanism {r.mechanism!r} is not registered in this seqjax")
               for r in chosen if r.mechanism not in registered]  # fmt: skip
    return ok, missing


def attention_options(t: int) -> ml_collections.ConfigDict:
    """``config.model.attention_options`` for the registered rows at input length ``t`` (the
    first row of a mechanism gives its block; ``set_row`` replaces it for a flex row)."""
    out = {}
    for row in available_rows()[0]:
        out.setdefault(row.mechanism, row.options(t))
    return ml_collections.ConfigDict(out)


def set_row(config, row: Row | str) -> None:
    """Points ``config.model`` at ``row`` (name or ``Row``): attention and its options at the
    config's input length ``model.max_len``."""
    row = ROW_BY_NAME[row] if isinstance(row, str) else row
    m = config.model
    m.attention = row.mechanism
    m.attention_options[row.mechanism] = ml_collections.ConfigDict(row.options(int(m.max_len)))


LINFORMER_KS = (128, 256)  # Wang et al. 2020, Table 2: k = 128 / 256 "nearly on par"


def linformer_config(arg: str | None, config_file: str, base: str) -> ml_collections.ConfigDict:
    """The dense LRA config ``base`` (``"lra_listops"``, ``"lra_text"``) with Linformer in
    every layer (Wang et al. 2020, eq. 7): variant ``arg`` = comma-separated ``k=128|256``
    (projected length: E, F are [k, n]), ``sharing=none|headwise|kv|layerwise`` (§4),
    ``smoke`` (the base's smoke variant, k at most 128)."""
    from seqjax.attention import linformer
    from seqjax.configs import common

    a = common.parse_args(
        arg,
        config_file,
        flags=("smoke",),
        options={"k": LINFORMER_KS, "sharing": linformer.SHARING},
        defaults={"k": 256, "sharing": "headwise"},
    )
    c = common.load(base, __file__).get_config("smoke" if a["smoke"] else None)
    c.model.attention = "linformer"
    lin = c.model.attention_options.linformer
    lin.k = min(a["k"], c.data.max_len) if not a["smoke"] else min(a["k"], 128)
    lin.max_len = c.model.max_len  # columns of E/F = the longest input (with CLS)
    lin.sharing = a["sharing"]
    return c


def linformer_sweep() -> list[dict]:
    """Both k times the paper's four sharing modes (one job per dict)."""
    from seqjax.attention import linformer

    return [
        {"config.model.attention_options.linformer.k": k,
         "config.model.attention_options.linformer.sharing": s}
        for k in LINFORMER_KS for s in linformer.SHARING
    ]  # fmt: skip


def sweep() -> list[dict]:
    """One point per registered row that differs by mechanism name only (the flex rows need
    ``set_row``; ``experiments/lra_accuracy`` runs them)."""
    seen, points = set(), []
    for row in available_rows()[0]:
        if row.mechanism not in seen:
            seen.add(row.mechanism)
            points.append({"config.model.attention": row.mechanism})
    return points
