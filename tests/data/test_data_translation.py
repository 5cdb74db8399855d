"""Seq2seq data: translation_jsonl (software_l10n), WMT14 parsing, copy/reverse."""

from __future__ import annotations

import collections
import gzip
import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest

import seqjax.data as sd
from seqjax.data import api, translation
from seqjax.data.sources import ChecksumMismatchError, DataError, SourceMissingError
from seqjax.data.subword import EOS_ID


def _take(it, k):
    return [next(it) for _ in range(k)]


def _same(a, b) -> bool:
    return all(all(np.array_equal(x[k], y[k]) for k in x) for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def l10n_slice(shared_data, tmp_path_factory) -> tuple[str, list[dict]]:
    """The first 4,000 lines of the real en-de file, gzipped again (and parsed)."""
    path = tmp_path_factory.mktemp("l10n") / "en-de-slice.jsonl.gz"
    with gzip.open(shared_data / "software_l10n" / "en-de.jsonl.gz", "rt", encoding="utf-8") as f:
        lines = [line for _, line in zip(range(4000), f)]
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines(lines)
    return str(path), [json.loads(line) for line in lines]


@pytest.fixture(scope="module")
def tr_cfg(make_cfg, l10n_slice):
    base = dict(
        name="translation_jsonl",
        path=l10n_slice[0],
        vocab="sentencepiece",
        vocab_size=700,
        heldout_fraction=0.05,
        max_source_len=32,
        max_target_len=40,
    )
    return lambda **kw: make_cfg(**{**base, **kw})


def test_english_string_never_in_two_splits_of_the_real_file(shared_data):
    pairs, target = translation.read_jsonl(
        str(shared_data / "software_l10n" / "en-de.jsonl.gz"), "en", None
    )
    assert target == "de" and len(pairs) == 42_637
    split_of: dict[str, set] = {}
    for en, _ in pairs:
        split_of.setdefault(en, set()).add(translation.heldout_split(en, 0.01))
    assert all(len(s) == 1 for s in split_of.values())
    # Not vacuous: many English strings have several translations (several catalogues).
    assert len(pairs) - len(split_of) > 400
    counts = collections.Counter(translation.heldout_split(en, 0.01) for en, _ in pairs)
    assert 300 < counts["validation"] < 600 and 300 < counts["test"] < 600


def test_info_splits_and_references_follow_the_file(tr_cfg, l10n_slice):
    cfg = tr_cfg()
    info = sd.info(cfg)
    assert info.task == "seq2seq" and (info.source_lang, info.target_lang) == ("en", "de")
    assert (info.seq_len, info.target_len) == (32, 40)
    assert (info.pad_id, info.bos_id, info.eos_id) == (0, 2, 3) and info.vocab_size == 700
    rows = l10n_slice[1]
    want = {"train": [], "validation": [], "test": []}
    for r in rows:
        want[translation.heldout_split(r["en"], 0.05)].append((r["en"], r["de"]))
    assert info.split_sizes == {k: len(v) for k, v in want.items()}
    assert 100 < info.split_sizes["validation"] < 300
    sources = {s: set(sd.references(cfg, s, side="source")) for s in want}
    assert not sources["train"] & sources["validation"] and not sources["train"] & sources["test"]
    assert not sources["validation"] & sources["test"]
    for split, pairs in want.items():
        assert sd.references(cfg, split) == [t for _, t in pairs]
        assert sd.references(cfg, split, side="source") == [s for s, _ in pairs]
    # The vocabulary was trained on the training split only, and round-trips real strings.
    for en, de in want["validation"][:50]:
        assert info.decode(info.encode(de)) == de and info.decode(info.encode(en)) == en


def test_eval_pass_covers_the_split_once_in_reference_order(tr_cfg):
    cfg = tr_cfg(max_source_len=512, max_target_len=512)  # nothing truncated
    info = sd.info(cfg)
    refs, srcs = sd.references(cfg, "validation"), sd.references(cfg, "validation", "source")
    it = sd.make(cfg, split="validation", train=False)
    batches = list(it)
    assert len(batches) == it.num_steps == -(-len(refs) // 8)
    targets = np.concatenate([b["targets"] for b in batches])
    inputs = np.concatenate([b["inputs"] for b in batches])
    weights = np.concatenate([b["weights"] for b in batches])
    assert targets.shape[1] == 512 and weights.dtype == np.float32
    live = weights.any(axis=1)
    assert live.sum() == len(refs) and not live[len(refs) :].any()
    assert not targets[len(refs) :].any() and not inputs[len(refs) :].any()  # padding rows
    for g, (ref, src) in enumerate(zip(refs, srcs)):
        assert info.decode(targets[g]) == ref and info.decode(inputs[g]) == src
        n = int(weights[g].sum())
        assert targets[g, n - 1] == EOS_ID and (weights[g, :n] == 1).all()
        assert not targets[g, n:].any()


def test_eval_truncates_long_pairs_and_train_leaves_them_out(tr_cfg):
    cfg = tr_cfg(max_source_len=6, max_target_len=7)
    batches = list(sd.make(cfg, split="validation", train=False))
    refs = sd.references(cfg, "validation")
    weights = np.concatenate([b["weights"] for b in batches])
    targets = np.concatenate([b["targets"] for b in batches])
    assert (weights.any(axis=1)).sum() == len(refs)
    full = weights[: len(refs)].sum(axis=1) == 7
    assert full.any() and (targets[: len(refs)][full, -1] == EOS_ID).all()
    for b in _take(sd.make(cfg, split="train"), 10):
        n_src, n_tgt = (b["inputs"] > 0).sum(1), b["weights"].sum(1)
        assert (n_src >= 2).all() and (n_tgt >= 2).all()  # at least one id + EOS
        rows = np.arange(8)
        assert (b["inputs"][rows, n_src - 1] == EOS_ID).all()
        assert (b["targets"][rows, n_tgt.astype(int) - 1] == EOS_ID).all()


def test_train_is_seeded_and_resumes_exactly(tr_cfg):
    cfg = tr_cfg()
    it = sd.make(cfg, split="train")
    first = _take(it, 3)
    assert _same(first, _take(sd.make(cfg, split="train"), 3))
    assert not np.array_equal(
        first[0]["inputs"], next(sd.make(tr_cfg(seed=1), split="train"))["inputs"]
    )
    state = json.loads(json.dumps(it.get_state()))
    want = _take(it, 3)
    again = sd.make(cfg, split="train")
    again.set_state(state)
    assert _same(want, _take(again, 3))


@pytest.mark.parametrize("name", ["translation_jsonl", "reverse"])
def test_process_shards_form_the_global_batch(tr_cfg, name):
    cfg = tr_cfg(name=name)
    for split, train in (("train", True), ("test", False)):
        whole = _take(sd.make(cfg, split=split, train=train), 2)
        parts = [
            _take(sd.make(cfg, split=split, train=train, process_index=p, process_count=2), 2)
            for p in (0, 1)
        ]
        for s in range(2):
            for k in ("inputs", "targets", "weights"):
                joined = np.concatenate([parts[0][s][k], parts[1][s][k]])
                np.testing.assert_array_equal(joined, whole[s][k])


def test_bad_files_and_languages_are_one_clear_error(make_cfg, tmp_path):
    def info(path, **kw):
        return sd.info(
            make_cfg(name="translation_jsonl", path=str(path), vocab="sentencepiece", **kw)
        )

    with pytest.raises(DataError, match=r"config\.data\.path=.*needs an existing JSONL"):
        info(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"en": "a", "de": "b"}\n{"en": "c", "de": \n', encoding="utf-8")
    with pytest.raises(DataError, match=r"config\.data\.path=.*line 2: invalid JSON"):
        info(bad)
    bad.write_text('{"en": "a", "de": "b"}\n[1, 2]\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"line 2: a JSON list, not an object"):
        info(bad)
    bad.write_text('{"en": "a", "de": "b"}\n{"en": "c"}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"line 2: fields 'en'/'de' missing"):
        info(bad)
    good = tmp_path / "good.jsonl"
    good.write_text('{"domain": "x", "en": "a", "fr": "b", "context": "c"}\n', encoding="utf-8")
    with pytest.raises(
        DataError, match=r"config\.data\.target_lang='de' is not a field.*'en', 'fr'"
    ):
        info(good, target_lang="de")
    with pytest.raises(DataError, match=r"config\.data\.source_lang='xx'.*valid: 'en', 'fr'"):
        info(good, source_lang="xx", target_lang="fr")
    multi = tmp_path / "multi.jsonl"
    multi.write_text('{"en": "a", "de": "b", "fr": "c"}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"target_lang is not set.*\['de', 'en', 'fr'\]"):
        info(multi)
    with pytest.raises(DataError, match=r"config\.data\.vocab='bytes'.*'sentencepiece'"):
        sd.info(make_cfg(name="translation_jsonl", path=str(good)))


def test_config_problems_name_the_field():
    cfg = sd.default_config()
    cfg.name, cfg.max_source_len, cfg.max_target_len, cfg.copy_vocab_size = "copy", 1, 0, 4
    problems = {f: v for f, _, v in api.config_problems(cfg)}
    assert set(problems) >= {"max_source_len", "max_target_len", "copy_vocab_size"}
    cfg.name, cfg.vocab, cfg.heldout_fraction = "translation_jsonl", "sentencepiece", 0.7
    assert "heldout_fraction" in {f for f, _, _ in api.config_problems(cfg)}
    cfg.name, cfg.source_lang, cfg.target_lang = "wmt14_ende", "fr", None
    assert "source_lang" in {f for f, _, _ in api.config_problems(cfg)}


# ---------------------------------------------------------------------------- copy / reverse


@pytest.mark.parametrize("name", ["copy", "reverse"])
def test_copy_and_reverse(make_cfg, name):
    cfg = make_cfg(name=name, max_source_len=12, max_target_len=14, copy_vocab_size=20)
    info = sd.info(cfg)
    assert info.task == "seq2seq" and info.vocab_size == 20 and info.target_len == 14
    it = sd.make(cfg, split="train")
    batches = _take(it, 3)
    for b in batches:
        assert b["inputs"].shape == (8, 12) and b["targets"].shape == (8, 14)
        for src, tgt, w in zip(b["inputs"], b["targets"], b["weights"]):
            n = int((src > 0).sum())
            assert src[n - 1] == EOS_ID and (src[: n - 1] >= 4).all() and (src[: n - 1] < 20).all()
            body = src[: n - 1][::-1] if name == "reverse" else src[: n - 1]
            np.testing.assert_array_equal(tgt[: n - 1], body)
            assert tgt[n - 1] == EOS_ID and not tgt[n:].any()
            np.testing.assert_array_equal(w, (tgt > 0).astype(np.float32))
    lengths = np.concatenate([(b["inputs"] > 0).sum(1) for b in batches])
    assert lengths.min() >= 2 and lengths.max() <= 12 and len(set(lengths.tolist())) > 3
    state = it.get_state()
    want = _take(it, 2)
    again = sd.make(cfg, split="train")
    again.set_state(state)
    assert _same(want, _take(again, 2))
    ev = list(
        sd.make(make_cfg(**{**cfg.to_dict(), "dup_eval_size": 20}), split="test", train=False)
    )
    assert len(ev) == 3
    w = np.concatenate([b["weights"] for b in ev])
    assert w.any(axis=1).sum() == 20 and not w[20:].any()
    assert not np.array_equal(ev[0]["inputs"], batches[0]["inputs"])  # splits differ


# ------------------------------------------------------------------------------------- WMT14


def _tgz(path: Path, members: dict[str, str]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in members.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _sgm(setid: str, lang: str, docs: dict[str, list[str]], kind: str) -> str:
    out = [f'<{kind}set setid="{setid}" srclang="any" trglang="{lang}">']
    for docid, segs in docs.items():
        out.append(f'<doc sysid="ref" docid="{docid}" genre="news" origlang="en">')
        out += [f'<p>\n<seg id="{i}"> {s} </seg>\n</p>' for i, s in enumerate(segs, 1)]
        out.append("</doc>")
    return "\n".join(out + [f"</{kind}set>", ""])


def test_wmt14_builder_parses_the_release_formats(make_cfg, tmp_path):
    manual = tmp_path / "wmt"
    manual.mkdir()
    corpora = {
        "training-parallel-europarl-v7.tgz": "training/europarl-v7.de-en.{}",
        "training-parallel-commoncrawl.tgz": "commoncrawl.de-en.{}",
        "training-parallel-nc-v9.tgz": "training/news-commentary-v9.de-en.{}",
    }
    en = {k: [f"{k[18:24]} sentence {i} ." for i in range(30)] for k in corpora}
    de = {k: [f"{k[18:24]} Satz {i} ." for i in range(30)] for k in corpora}
    en["training-parallel-commoncrawl.tgz"][3] = ""  # an empty side is dropped
    for archive, pattern in corpora.items():
        extra = {pattern.format("fr"): "x\n"}  # other languages in the same archive
        members = {pattern.format("en"): "\n".join(en[archive]) + "\n"}
        members[pattern.format("de")] = "\r\n".join(de[archive]) + "\r\n"
        _tgz(manual / archive, {**extra, **members})
    docs_en = {"d1": ["Hello &amp; welcome .", "Second ."], "d2": ["Third one ."]}
    docs_de = {"d1": ["Hallo &amp; willkommen .", "Zweiter ."], "d2": ["Dritter ."]}
    other = {"d1": ["x", "y"], "d2": ["z"]}
    _tgz(
        manual / "dev.tgz",
        {
            "dev/newstest2013.en": "Dev one .\nDev two .\n",
            "dev/newstest2013.de": "Dev eins .\nDev zwei .\n",
            "dev/newstest2014-deen-src.en.sgm": _sgm("newstest2014", "en", docs_en, "src"),
            "dev/newstest2014-deen-ref.de.sgm": _sgm("newstest2014", "de", docs_de, "ref"),
            # The de->en direction's files: not used for en->de (src.en / ref.de are).
            "dev/newstest2014-deen-src.de.sgm": _sgm("newstest2014", "de", other, "src"),
            "dev/newstest2014-deen-ref.en.sgm": _sgm("newstest2014", "en", other, "ref"),
        },
    )
    cfg = make_cfg(
        name="wmt14_ende",
        manual_dir=str(manual),
        vocab="sentencepiece",
        vocab_size=300,
        accept_checksum_mismatch=True,  # small files under the real archives' names
    )
    info = sd.info(cfg)
    assert info.split_sizes == {"train": 89, "validation": 2, "test": 3}
    assert sd.references(cfg, "validation") == ["Dev eins .", "Dev zwei ."]
    assert sd.references(cfg, "test") == [*docs_de["d1"], *docs_de["d2"]]
    assert sd.references(cfg, "test", side="source") == [*docs_en["d1"], *docs_en["d2"]]
    train_src = sd.references(cfg, "train", side="source")
    assert train_src[:30] == en["training-parallel-europarl-v7.tgz"]
    assert "" not in train_src and len(set(sd.references(cfg, "train"))) == 89
    b = next(sd.make(cfg, split="test", train=False))
    assert info.decode(b["targets"][2]) == "Dritter ." and not b["weights"][3:].any()
    with pytest.raises(ChecksumMismatchError, match=r"accept_checksum_mismatch"):
        sd.info(
            make_cfg(
                **{
                    **cfg.to_dict(),
                    "accept_checksum_mismatch": False,
                    "data_dir": str(tmp_path / "t"),
                }
            )
        )


def test_wmt14_missing_archive_names_it_and_manual_dir(make_cfg, tmp_path):
    cfg = make_cfg(
        name="wmt14_ende", manual_dir=str(tmp_path), vocab="sentencepiece", data_dir=str(tmp_path)
    )
    with pytest.raises(SourceMissingError, match=r"training-parallel-europarl-v7\.tgz.*manual_dir"):
        sd.info(cfg)
    with pytest.raises(DataError, match=r"config\.data\.source_lang='fr'"):
        sd.info(make_cfg(name="wmt14_ende", vocab="sentencepiece", source_lang="fr"))


def test_wmt14_parsers():
    from seqjax.data import wmt14

    assert wmt14.parse_plain(b"a b\r\n\nc\n") == ["a b", "", "c"]
    assert wmt14.parse_plain("x\u2028y\n".encode()) == ["x\u2028y"]
    sgm = _sgm("t", "de", {"A": ["eins", "zwei"], "B": ["drei"]}, "ref").encode()
    assert wmt14.parse_sgm(sgm) == {("A", "1"): "eins", ("A", "2"): "zwei", ("B", "1"): "drei"}
