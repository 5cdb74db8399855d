"""Sparse Transformer patterns vs. the paper's set definitions (Child et al. 2019, §4.2-4.3).

The reference below is an independent loop over (i, j) written straight from the sets of
Child et al. 2019, §4.2-4.3, with seqjax's c convention (c summary cells: j mod l in
{l - c, ..., l - 1}).
"""

import numpy as np
import pytest

from seqjax import attention
from seqjax.attention import sparse_patterns as patterns
from tests.experiments.test_studies_smoke import load_script


def loop_pattern(kind, t, l, c=None, causal=True, sub=0):
    out = np.zeros((t, t), bool)
    for i in range(t):
        for j in range(t):
            if causal and j > i:
                continue
            a1 = a2 = False
            if kind in ("strided", "local"):
                a1 = (max(0, i - l) <= j <= i) if causal else abs(i - j) <= l
            if kind in ("strided", "strided_only"):
                a2 = (i - j) % l == 0
            if kind in ("fixed", "block"):
                a1 = j // l == i // l
            if kind in ("fixed", "summary"):
                a2 = j % l in range(l - (sub + 1) * c, l - sub * c)
            out[i, j] = a1 or a2
    return out


CASES = [(1, 1, 1), (7, 3, 1), (16, 4, 2), (23, 5, 2), (30, 6, 6), (33, 8, 3), (40, 7, 1)]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("kind", patterns.KINDS)
def test_pattern_matches_set_definitions(kind, causal):
    for t, l, c in CASES:
        uses_c = kind in ("fixed", "summary")
        got = patterns.pattern(kind, t, l, c=c if uses_c else None, causal=causal)
        assert got.dtype == bool and got.shape == (t, t)
        np.testing.assert_array_equal(got, loop_pattern(kind, t, l, c, causal), err_msg=f"{t, l}")


def test_summary_sub_blocks_and_union():
    t, l, c = 37, 8, 2
    for sub in range(l // c):
        got = patterns.pattern("summary", t, l, c=c, summary_block=sub)
        np.testing.assert_array_equal(got, loop_pattern("summary", t, l, c, True, sub))
    for kind, (a1, a2) in patterns.HALVES.items():
        cc = c if kind == "fixed" else None
        union = patterns.pattern(a1, t, l) | patterns.pattern(a2, t, l, c=cc)
        np.testing.assert_array_equal(patterns.pattern(kind, t, l, c=cc), union)


def test_known_rows():
    # strided, l=4: query 9 sees 5..9 (A1) and 1, 5, 9 (A2).
    row = patterns.pattern("strided", 12, 4)[9]
    assert np.flatnonzero(row).tolist() == [1, 5, 6, 7, 8, 9]
    # fixed, l=4, c=1 (c cells): query 9 sees its block 8, 9 and the summaries 3, 7.
    row = patterns.pattern("fixed", 12, 4, c=1)[9]
    assert np.flatnonzero(row).tolist() == [3, 7, 8, 9]
    # bidirectional fixed: the summary cells of later blocks too.
    row = patterns.pattern("fixed", 12, 4, c=1, causal=False)[1]
    assert np.flatnonzero(row).tolist() == [0, 1, 2, 3, 7, 11]
    # c = l makes the fixed pattern dense.
    assert patterns.pattern("fixed", 10, 3, c=3).sum() == 55


def test_head_layout_split_and_distinct():
    t, l, c, h = 24, 8, 2, 6
    pats = patterns.head_patterns("fixed", t, l, h, c=c, head_mode="split", distinct_summaries=True)
    for hd in range(3):
        np.testing.assert_array_equal(pats[hd], patterns.pattern("block", t, l))
    for hd in range(3, 6):
        want = patterns.pattern("summary", t, l, c=c, summary_block=hd % (l // c))
        np.testing.assert_array_equal(pats[hd], want)
    merged = patterns.head_patterns("strided", t, l, h)
    np.testing.assert_array_equal(
        merged, np.broadcast_to(patterns.pattern("strided", t, l), merged.shape)
    )


@pytest.mark.parametrize(
    "args, match",
    [
        (("diagonal", 8, 2), "kind"),
        (("strided", 8, 0), "stride"),
        (("strided", 8, 2.5), "stride"),
        (("fixed", 8, 4, {"c": 5}), "c"),
        (("fixed", 8, 4, {"c": 0}), "c"),
        (("strided", 8, 4, {"c": 2}), "fixed pattern only"),
        (("summary", 8, 4, {"c": 2, "summary_block": 2}), "summary_block"),
    ],
)
def test_pattern_errors(args, match):
    kw = args[3] if len(args) > 3 else {}
    with pytest.raises(ValueError, match=match):
        patterns.pattern(*args[:3], **kw)


@pytest.mark.parametrize(
    "name, options, seq_len, match",
    [
        ("sparse_fixed", {"stride": 16, "c": 32}, 256, "c"),
        ("sparse_fixed", {"stride": 16, "block_size": 5}, 256, "block_size"),
        ("sparse_strided", {"stride": 512}, 256, "exceeds"),
        ("sparse_strided", {"head_mode": "mixed"}, 256, "head_mode"),
        ("sparse_strided", {"implementation": "magic"}, 256, "implementation"),
        ("sparse_strided", {"distinct_summaries": True}, 256, "sparse_fixed only"),
    ],
)
def test_validate_hook(name, options, seq_len, match):
    with pytest.raises(ValueError, match=match):
        attention.spec(name).validate(options, seq_len)


def test_validate_accepts_paper_settings():
    attention.spec("sparse_fixed").validate({"stride": 128, "c": 32}, 12288)
    attention.spec("sparse_strided").validate({"stride": 128, "block_size": 64}, 12288)


@pytest.mark.parametrize("kind", patterns.UNIONS)
def test_plot_pattern_writes_png(kind, tmp_path):
    sparse_plot = load_script("sparse_transformer/plot_patterns.py")
    path = sparse_plot.plot_pattern(tmp_path / f"{kind}.png", kind, 32, 4, causal=False)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    img = sparse_plot.pattern_image(kind, 32, 4)
    assert set(np.unique(img)) <= {0, 1, 2, 3} and (img[np.triu_indices(32, 1)] == 0).all()
