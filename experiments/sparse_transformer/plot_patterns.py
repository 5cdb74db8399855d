"""Pictures of the Sparse Transformer patterns, in the style of Child et al. 2019, Figure 3.

Top: the connectivity matrix (rows = queries i, columns = keys j), coloured by which half
of the pattern (A1, A2 or both) lets query i see key j. Bottom: for one query (dark), the
keys it sees laid out on the ``[T / l, l]`` grid, the paper's 2-D view.

    python experiments/sparse_transformer/plot_patterns.py  # writes docs/sparse_pattern_*.png

Legend: T sequence length, l stride.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from seqjax.attention import sparse_patterns as patterns


def pattern_image(kind: str, seq_len: int, stride: int, *, c=None, causal=True) -> np.ndarray:
    """Integer ``[T, T]`` image: 0 none, 1 A1 only, 2 A2 only, 3 both."""
    a1, a2 = patterns.HALVES[kind]
    c2 = c if kind == "fixed" else None
    m1 = patterns.pattern(a1, seq_len, stride, causal=causal)
    m2 = patterns.pattern(a2, seq_len, stride, c=c2, causal=causal)
    return m1.astype(np.int8) + 2 * m2.astype(np.int8)


def plot_pattern(
    path, kind: str, seq_len: int, stride: int, *, c=None, causal=True, query=None
) -> Path:
    """Draws ``kind`` (``"strided"`` | ``"fixed"``) to a PNG at ``path``.

    Args:
      path: output file (parent folders are created).
      kind, seq_len, stride, c, causal: as in ``sparse_patterns.pattern``.
      query: the query position shown on the grid (default: late in the sequence).

    Returns:
      the written path.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    if kind not in patterns.UNIONS:
        raise ValueError(f"plot_pattern kind {kind!r} is not one of {patterns.UNIONS}")
    img = pattern_image(kind, seq_len, stride, c=c, causal=causal)
    query = seq_len - stride // 2 - 1 if query is None else query
    if not 0 <= query < seq_len:
        raise ValueError(f"plot_pattern query={query} must be in [0, seq_len={seq_len})")
    colours = ["#ffffff", "#4c72b0", "#dd8452", "#55a868"]
    cmap = ListedColormap(colours)
    rows = -(-seq_len // stride)
    fig, (ax_m, ax_g) = plt.subplots(
        2, 1, figsize=(4.2, 4.2 + 4.2 * rows / stride), height_ratios=[stride, rows]
    )
    ax_m.imshow(img, cmap=cmap, vmin=0, vmax=3, interpolation="nearest")
    ax_m.set_xlabel("key j")
    ax_m.set_ylabel("query i")
    a1, a2 = patterns.HALVES[kind]
    mode = "causal" if causal else "bidirectional"
    extra = f", c={c if c is not None else patterns.default_c(stride)}" if kind == "fixed" else ""
    ax_m.set_title(f"{kind} ({mode}), T={seq_len}, l={stride}{extra}", fontsize=9)
    grid = np.full(rows * stride, -1, np.int8)
    grid[:seq_len] = img[query]
    grid_img = np.ma.masked_less(grid.reshape(rows, stride), 0)
    ax_g.imshow(grid_img, cmap=cmap, vmin=0, vmax=3, interpolation="nearest")
    ax_g.scatter([query % stride], [query // stride], marker="s", s=30, c="black")
    ax_g.set_title(f"keys of query {query} on the [T/l, l] grid", fontsize=9)
    ax_g.set_xticks([])
    ax_g.set_yticks([])
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[i]) for i in (1, 2, 3)]  # A1, A2, both
    fig.legend(handles, [a1, a2, "both"], loc="lower center", ncol=3, fontsize=8)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv=None) -> list[Path]:
    """Draws the figures the README shows: strided and fixed (causal), fixed bidirectional."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[2] / "docs"))
    parser.add_argument("--seq_len", type=int, default=256)
    parser.add_argument("--stride", type=int, default=16)
    args = parser.parse_args(argv)
    out = Path(args.out)
    return [
        plot_pattern(
            out / f"sparse_pattern_{name}.png", kind, args.seq_len, args.stride, causal=causal
        )  # fmt: skip
        for name, kind, causal in (
            ("strided", "strided", True),
            ("fixed", "fixed", True),
            ("fixed_bidirectional", "fixed", False),
        )
    ]


if __name__ == "__main__":
    for written in main():
        print(written)
