"""IMDB reviews as SentencePiece subwords (``imdb_bytes`` with ``data.vocab='sentencepiece'``):
the model and the encoded reviews, classification / masked-LM / whole-word / packed batches,
pre-train -> fine-tune with one vocabulary, the unchanged byte default and the refusals.

Everything runs on a tiny aclImdb tarball the test writes (40 reviews of generated text), with
a 320-piece vocabulary.
"""

from __future__ import annotations

import io
import os
import tarfile

import numpy as np
import pytest
import sentencepiece as spm

import seqjax.data as sd
from seqjax.data import classification, objectives, store
from seqjax.data.sources import DataError

V = 320
WORDS = (
    "the movie film plot actor actress scene story director great terrible boring wonderful "
    "acting music ending character script camera funny sad horror comedy drama watch watched "
    "watching love loved hate hated best worst really very quite never always again time "
    "minutes hours performance performances screenplay dialogue cinema audience sequel remake"
).split()
# Only in the test split: characters the model never saw (spelled as byte pieces).
ODD_REVIEW = "caf\u00e9\tnoir was a  fine film.<br /><br />The end"


def _review(rng: np.random.Generator) -> str:
    sentences = []
    for _ in range(int(rng.integers(1, 4))):
        words = [str(w) for w in rng.choice(WORDS, int(rng.integers(3, 10)))]
        words[0] = words[0].capitalize()
        sentences.append(" ".join(words) + str(rng.choice([".", "!", "...", "?"])))
    return " ".join(sentences) + ("<br /><br />Rating: 7/10" if rng.random() < 0.3 else "")


def _tarball(path) -> dict[str, list[str]]:
    """Writes a tiny aclImdb tarball; returns each split's texts by member name order."""
    rng = np.random.default_rng(0)
    texts = {"train": [], "test": []}
    with tarfile.open(path, "w:gz", format=tarfile.USTAR_FORMAT) as tar:
        for split, n in (("train", 15), ("test", 5)):
            for label in ("pos", "neg"):
                for i in range(n):
                    text = _review(rng)
                    if split == "test" and label == "pos" and i == 0:
                        text = ODD_REVIEW
                    data = text.encode("utf-8")
                    info = tarfile.TarInfo(f"aclImdb/{split}/{label}/{i}_7.txt")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                    texts[split].append(text)
    return texts


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("imdb_subword")
    _tarball(tmp / "aclImdb_v1.tar.gz")

    def cfg(**overrides):
        c = sd.default_config()
        c.name, c.manual_dir, c.data_dir = "imdb_bytes", str(tmp), str(tmp / "tfds")
        c.download, c.accept_checksum_mismatch = False, True
        c.vocab, c.vocab_size, c.max_len, c.batch_size, c.prefetch = "sentencepiece", V, 48, 4, 0
        for k, v in overrides.items():
            setattr(c, k, v)
        return c

    return cfg


def _test_texts(cfg) -> tuple[list[str], list[int]]:
    """The test split's reviews and labels in the prepared (evaluation) order."""
    src = store.source(store.dataset_key(cfg), "test")
    examples = src.__getitems__(list(range(len(src))))
    return [bytes(ex["tokens"]).decode() for ex in examples], [int(ex["label"]) for ex in examples]


def _eval_pass(cfg) -> dict[str, np.ndarray]:
    batches = list(sd.make(cfg, split="validation", train=False))
    return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


def test_vocabulary_round_trip_and_classification_batches(fake):
    cfg = fake()
    info = sd.info(cfg)
    assert (info.task, info.vocab_size, info.pad_id, info.num_classes) == (
        "classification",
        V,
        0,
        2,
    )
    assert (info.bos_id, info.eos_id, info.seq_len) == (2, 3, 48)
    assert os.path.isfile(info.vocab_file) and info.vocab_fingerprint
    assert info.vocab_file.startswith(os.path.join(cfg.data_dir, "seqjax_sentencepiece"))
    assert info.fingerprint == store.metadata(store.dataset_key(cfg))["fingerprint"]
    assert info.decode(info.encode(ODD_REVIEW)) == ODD_REVIEW  # byte fallback: é, tab
    texts, labels = _test_texts(cfg)
    got = _eval_pass(cfg)  # row g = review g (validation reads aclImdb's test split)
    live = got["weights"] > 0
    assert live.sum() == len(texts) == 10 and not live[len(texts) :].any()
    np.testing.assert_array_equal(got["targets"][live], labels)
    for g, text in enumerate(texts):
        ids = info.encode(text)[:48]
        assert len(ids) > 8 and ids.max() < V and ids.min() >= 4
        np.testing.assert_array_equal(got["inputs"][g, : len(ids)], ids)
        assert not got["inputs"][g, len(ids) :].any()  # 0 = padding, only at the end
        assert info.decode(got["inputs"][g]) == info.decode(ids)
    assert sum(len(info.encode(t)) > 48 for t in texts) > 0  # truncation is exercised
    train = next(sd.make(cfg, split="train"))
    assert train["inputs"].max() < V and set(train["targets"].tolist()) <= {0, 1}


def test_encoded_reviews_are_cached_beside_the_model(fake):
    cfg = fake()
    info = sd.info(cfg)
    key = store.dataset_key(cfg)
    vocab = classification.imdb_vocab(cfg, key)
    assert vocab.path == info.vocab_file
    sd.make(cfg, split="test", train=False).close()
    path = classification.encoded_path(vocab, "test")
    assert os.path.dirname(path) == os.path.dirname(info.vocab_file) and os.path.isfile(path)
    classification.load_reviews.cache_clear()
    reviews = classification.load_reviews(key, "test", vocab.path)  # read back from the file
    texts, labels = _test_texts(cfg)
    want = vocab.encode_many(texts)
    assert len(reviews) == len(texts) and reviews.lengths().tolist() == [len(w) for w in want]
    for r in (0, 3, len(texts) - 1):
        assert reviews[r]["tokens"].tolist() == want[r] and reviews[r]["label"] == labels[r]


def _reference_words(sp, ids) -> np.ndarray:
    """Word number of each piece: a word starts at a '▁' piece, at a whitespace piece and
    after one (written from the pieces' text, independently of ``objectives.word_tables``)."""
    out, word, prev_space = [], 0, False
    for j, i in enumerate(ids.tolist()):
        text = sp.decode([i]) if not sp.is_byte(i) else ""
        piece = sp.id_to_piece(i)
        space = text != "" and text.isspace() or piece in ("<0x09>", "<0x20>", "<0x0A>")
        if j and (piece.startswith("\u2581") or space or prev_space):
            word += 1
        out.append(word)
        prev_space = space
    return np.array(out)


@pytest.mark.parametrize("packing", [False, True])
def test_mlm_whole_word_masking_over_subwords(fake, packing):
    cfg = fake(objective="mlm", mlm_whole_word=True, mlm_probability=0.3, packing=packing,
               max_len=256 if packing else 48)  # fmt: skip
    info = sd.info(cfg)
    assert (info.task, info.mask_id, info.vocab_size) == ("mlm", V, V + 1)
    sp = spm.SentencePieceProcessor(model_file=info.vocab_file)
    starts, space = objectives.word_tables(info)
    assert space[sp.piece_to_id("<0x09>")] and not space[sp.piece_to_id("<0xC3>")]
    got = _eval_pass(cfg)
    chosen = got["weights"] > 0
    real = got["segment_ids"] > 0 if packing else got["targets"] > 0
    if not packing:  # targets are the original ids; inputs differ only where chosen
        np.testing.assert_array_equal(got["targets"], _eval_pass(fake())["inputs"])
    else:  # packed rows: the reviews' ids, several to a row
        assert got["targets"][real].min() >= 4 and got["targets"][~real].max() == 0
        assert got["segment_ids"].max() > 1
    assert not chosen[~real].any() and chosen.sum() > 10
    np.testing.assert_array_equal(got["inputs"][~chosen], got["targets"][~chosen])
    swapped = got["inputs"][chosen]
    assert (swapped == V).mean() > 0.5 and swapped.min() >= 4 and swapped.max() <= V
    multi = 0
    for r in range(len(got["inputs"])):  # every piece of a chosen word is chosen, no partial word
        seg = got["segment_ids"][r] if packing else real[r].astype(int)
        for s in set(seg[seg > 0].tolist()):
            at = np.flatnonzero(seg == s)
            words = _reference_words(sp, got["targets"][r, at])
            for w in set(words.tolist()):
                c = chosen[r, at[words == w]]
                assert c.all() or not c.any(), (r, s, w)
                multi += c.all() and len(c) > 1
    assert multi > 0  # some multi-piece word was masked whole


def test_bytes_default_unchanged(fake):
    cfg = fake(vocab="bytes")
    info = sd.info(cfg)
    assert (info.vocab_size, info.vocab_file, info.bos_id) == (257, None, None)
    it = sd.make(cfg, split="validation", train=False)
    assert set(it.spec) == {"name", "split", "train", "seed", "batch_size", "process_index",
                            "process_count", "max_len", "fingerprint"}  # fmt: skip
    assert it.spec["fingerprint"] == info.fingerprint
    batch = next(it)
    it.close()
    texts, _ = _test_texts(cfg)
    raw = np.frombuffer(texts[0].encode(), np.uint8)[:48].astype(np.int32) + 1
    np.testing.assert_array_equal(batch["inputs"][0, : len(raw)], raw)
    sw = sd.make(fake(), split="validation", train=False)
    assert sw.spec["vocab"] == f"sentencepiece_bpe{V}_cov1_n1000000"
    sw.close()


@pytest.mark.parametrize(
    ("name", "vocab", "valid"),
    [("imdb_bytes", "chars", "'bytes' or 'sentencepiece' or 'hf:<folder>' for imdb_bytes"),
     ("listops", "sentencepiece", "'bytes' for listops")],
)  # fmt: skip
def test_bad_vocab_is_one_sentence(fake, name, vocab, valid):
    cfg = fake(name=name, vocab=vocab)
    with pytest.raises(DataError) as e:
        sd.info(cfg)
    msg = str(e.value)
    assert msg == f"config.data.vocab={vocab!r} is invalid; valid: {valid}."
    bad = fake(vocab_size=100)  # the subword options are checked for imdb_bytes
    with pytest.raises(DataError, match="config.data.vocab_size=100"):
        sd.info(bad)


def _mlm_config(fake, variant: str):
    """``configs/mlm.py:<variant>`` at a tiny size on the fake reviews."""
    from seqjax.configs import common
    from tests.conftest import REPO

    config = common.load_file(REPO / "configs" / "mlm.py").get_config(variant)
    data = fake(objective=config.data.objective, packing=False,
                mlm_whole_word=config.data.mlm_whole_word)  # fmt: skip
    assert (config.data.vocab, config.data.mlm_whole_word) == (
        "sentencepiece",
        "finetune" not in variant,
    )  # the subword variant: whole words in pre-training only
    for k in ("vocab", "spm_model_type", "objective", "mlm_whole_word"):
        assert data[k] == config.data[k], k
    config.data = data
    m, t = config.model, config.train
    m.num_layers, m.num_heads, m.d_model, m.max_len = 1, 2, 16, 48
    t.num_steps, t.eval_every, t.checkpoint_every, t.final_eval = 1, 0, 0, False
    config.mesh.data = 1
    config.optimizer.warmup_steps = 1
    return config


def test_pretrain_then_finetune_share_the_vocabulary(fake, tmp_path):
    import jax
    from flax import traverse_util

    from seqjax.train import init_from, loop, setup

    pre = _mlm_config(fake, "subword,smoke")
    loop.train_and_evaluate(pre, str(tmp_path / "mlm"))
    ft = _mlm_config(fake, "subword,finetune,smoke")
    ft.init_from = str(tmp_path / "mlm")
    info_pre, info_ft = sd.info(pre.data), sd.info(ft.data)
    assert info_pre.vocab_file == info_ft.vocab_file  # one model file, the same ids
    assert (info_pre.vocab_size, info_ft.vocab_size) == (V + 1, V)
    run = setup.build(ft)
    state = init_from.apply(run, ft.init_from)
    _, saved, _ = setup.restore_latest(str(tmp_path / "mlm"))
    want = jax.device_get(saved["params"]["encoder"]["embed"]["embedding"])
    got = traverse_util.flatten_dict(jax.device_get(state["params"]))[init_from.EMBEDDING]
    assert want.shape == (V + 1, 16) and got.shape == (V, 16)
    np.testing.assert_array_equal(got, want[:V])  # every subword row, [MASK] dropped


def test_linformer_study_passes_the_vocabulary_to_every_job(tmp_path, monkeypatch):
    """``experiments/linformer_mlm/run.py --vocab sentencepiece``: every job runs the subword
    variant with one vocab_size; ``--finetune_lr`` reaches the fine-tuning jobs only."""
    import importlib.util
    import json
    import subprocess

    from tests.conftest import REPO

    spec = importlib.util.spec_from_file_location(
        "linformer_mlm_run_sw", REPO / "experiments" / "linformer_mlm" / "run.py"
    )
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    commands = []

    def fake_run(cmd, **kwargs):  # no training: a metrics file and an evaluation line
        commands.append(cmd)
        if "seqjax.main" in cmd:
            workdir = next(a.split("=", 1)[1] for a in cmd if a.startswith("--workdir="))
            os.makedirs(workdir, exist_ok=True)
            rec = {"step": 1, "validation/perplexity": 9.0, "validation/accuracy": 0.5}
            with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
                f.write(json.dumps(rec) + "\n")
        out = json.dumps({"step": 2, "perplexity": 8.0, "accuracy": 0.6})
        return subprocess.CompletedProcess(cmd, 0, stdout=out, stderr="")

    import matplotlib.font_manager  # noqa: F401  (its first import runs fc-list: not faked)

    monkeypatch.setattr(run.subprocess, "run", fake_run)
    run.main(["--out", str(tmp_path), "--smoke", "--ks", "16", "--vocab", "sentencepiece",
              "--vocab_size", "300", "--finetune_lr", "0.01"])  # fmt: skip
    jobs = [c for c in commands if "seqjax.main" in c]
    assert len(jobs) == 6  # 2 pre-training, 2 fine-tuned, 2 from scratch
    for cmd in jobs:
        variant = next(a for a in cmd if a.startswith("--config=")).rsplit(":", 1)[1]
        assert variant.endswith(",subword") and "--config.data.vocab_size=300" in cmd
        lr = "--config.optimizer.learning_rate=0.01" in cmd
        assert lr == ("finetune" in variant)
    commands.clear()
    run.main(["--out", str(tmp_path / "b"), "--smoke", "--ks", "16"])
    assert not any("subword" in " ".join(c) or "learning_rate" in " ".join(c) for c in commands)
