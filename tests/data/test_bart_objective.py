"""BART's noises as a data objective (``config.data.objective='denoising'``,
``seqjax.data.bart_noise``): seq2seq batches whose target is the clean document and whose
source is its noised form; the fairseq pitfalls (permutation a no-op without sentence ends,
padding moved by a permutation, padding as the separator) checked through the objective;
deterministic per seed; bad fields refused in one sentence."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import seqjax.data as sd
from seqjax import tasks
from seqjax.data import bart_noise

WORDS = "the of and to a in that is was he for it with as his on be at by".split()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A text of short lines (2-4 words each): many sentences per document."""
    rng = np.random.default_rng(0)
    lines = [" ".join(rng.choice(WORDS, size=rng.integers(2, 5))) for _ in range(3000)]
    path = tmp_path_factory.mktemp("bart") / "lines.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def _cfg(corpus, tfds_dir, **kw):
    cfg = sd.default_config()
    cfg.update(name="text_file", path=str(corpus), vocab="chars", data_dir=str(tfds_dir),
               manual_dir=None, download=False, batch_size=16, objective="denoising",
               max_source_len=64, max_target_len=64, prefetch=1, **kw)  # fmt: skip
    return cfg


def _batch(cfg, step=0, split="train"):
    it = sd.make(cfg, split=split, train=split == "train")
    try:
        for _ in range(step):
            next(it)
        return next(it)
    finally:
        it.close()


def _real(row):
    n = int((row != 0).sum())
    assert (row[:n] != 0).all() and (row[n:] == 0).all()  # padding only at the end
    return row[:n]


def _sentences(doc, sep):
    body = doc[1:-1].tolist()  # [BOS] ... [EOS]
    out, cur = [], []
    for t in body:
        cur.append(t)
        if t == sep:
            out.append(tuple(cur))
            cur = []
    return out + ([tuple(cur)] if cur else [])


def test_permutation_through_the_objective(corpus, tfds_dir):
    cfg = _cfg(corpus, tfds_dir, noise="permutation")
    info = sd.info(cfg)
    assert tasks.get(info.task).name == "seq2seq"
    ids = bart_noise.special_ids(sd.info(bart_noise.base_data(cfg)))
    assert ids.separator != info.pad_id  # the separator is never the padding
    b = _batch(cfg)
    moved = 0
    for src_row, tgt_row in zip(b["inputs"], b["targets"]):
        src, tgt = _real(src_row), _real(tgt_row)
        assert src[0] == info.bos_id and src[-1] == info.eos_id == tgt[-1]
        assert tgt[-2] == ids.separator  # documents end at a sentence end (whole lines)
        s_src, s_tgt = _sentences(src, ids.separator), _sentences(tgt, ids.separator)
        assert Counter(s_src) == Counter(s_tgt) and len(s_tgt) >= 2
        moved += s_src != s_tgt
    assert moved >= 12  # not a silent no-op (16 rows of several sentences)
    np.testing.assert_array_equal(b["weights"], b["targets"] > 0)


def test_masking_noises_and_rotation(corpus, tfds_dir):
    mask = None
    for noise in ("infilling", "masking", "deletion", "rotation", "infilling+permutation"):
        cfg = _cfg(corpus, tfds_dir, noise=noise)
        info = sd.info(cfg)
        mask = info.mask_id
        b = _batch(cfg)
        ratio = []
        for src_row, tgt_row in zip(b["inputs"], b["targets"]):
            src, tgt = _real(src_row), _real(tgt_row)
            assert src[0] == tgt[0] == info.bos_id and src[-1] == tgt[-1] == info.eos_id
            if noise == "rotation":  # a rotation of the body
                body, rot = tgt[1:-1].tolist(), src[1:-1].tolist()
                assert any(body[k:] + body[:k] == rot for k in range(len(body)))
            elif noise == "deletion":
                assert mask not in src and len(src) < len(tgt)
                it = iter(tgt.tolist())
                assert all(t in it for t in src.tolist())  # a subsequence of the target
            elif noise in ("masking", "infilling"):
                assert (src == mask).any()
                kept = [t for t in src.tolist() if t != mask]
                it = iter(tgt.tolist())
                assert all(t in it for t in kept)
                ratio.append(1 - len(kept) / len(tgt))
            else:  # infilling after permutation: the same multiset of unmasked text or less
                assert (src == mask).any() and len(src) < len(tgt)
        if noise == "infilling":  # 30 % of the words (a word ~ 3.4 chars + its space)
            assert 0.15 < np.mean(ratio) < 0.45


def test_deterministic_per_seed_and_split(corpus, tfds_dir):
    cfg = _cfg(corpus, tfds_dir, noise="infilling+permutation")
    a, b = _batch(cfg, step=2), _batch(cfg, step=2)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    other = _cfg(corpus, tfds_dir, noise="infilling+permutation", seed=1)
    assert not np.array_equal(_batch(other, step=2)["inputs"], a["inputs"])
    v1, v2 = _batch(cfg, split="validation"), _batch(cfg, split="validation")
    np.testing.assert_array_equal(v1["inputs"], v2["inputs"])  # evaluation noise is fixed


@pytest.mark.parametrize(
    "field, value",
    [("noise", "bogus"), ("noise", "masking+infilling"), ("noise", ""), ("vocab", "bytes2"),
     ("noise_ratio", 1.5), ("max_source_len", 32)],
)  # fmt: skip
def test_bad_fields_one_sentence(corpus, tfds_dir, field, value):
    cfg = _cfg(corpus, tfds_dir, noise="infilling")
    cfg[field] = value
    with pytest.raises(ValueError, match=rf"config\.data\.{field}=.*valid"):
        sd.info(cfg)


def test_parse_noise_names_the_valid_values():
    assert bart_noise.parse_noise("infilling+permutation") == ("infilling", "permutation")
    with pytest.raises(ValueError, match=r"config\.data\.noise='rot'.*valid: one of masking"):
        bart_noise.parse_noise("rot")
