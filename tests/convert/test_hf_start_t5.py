"""T5 fine-tuned from the command line: ``python -m seqjax.main ...
--config.init_from=hf:<T5 folder>`` on translation and on span corruption. The folder's
tokenizer (T5's ids: pad 0, ``</s>`` 1, ``<extra_id_N>`` at the top) becomes the data's
vocabulary; the first training loss equals ``T5ForConditionalGeneration``'s loss
(``labels=``) on the same batch and weights, greedy decoding equals ``generate``, and the
exported checkpoint loads in ``transformers`` with equal logits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.convert import _hf_models as hf

tokenizers = pytest.importorskip("tokenizers")
torch = hf.torch

ROOT = Path(__file__).resolve().parents[2]
EN = "the file was not found open save close a new window cannot read this folder".split()
DE = "die datei wurde nicht gefunden öffnen speichern schließen ein neues fenster kann lesen "
DE = (DE + "diesen ordner").split()
SENTINELS = 8


def _folder(tmp_path, model) -> Path:
    """``model`` saved with a T5-style WordLevel tokenizer: ``<pad>`` 0, ``</s>`` 1,
    ``<unk>`` 2, the words, ``<extra_id_0>`` the top id downwards; ``</s>`` appended."""
    specials = ["<pad>", "</s>", "<unk>"]
    vocab = {t: i for i, t in enumerate(specials + sorted(set(EN + DE)))}
    sentinels = [f"<extra_id_{i}>" for i in range(SENTINELS)]
    vocab.update({s: hf.V - 1 - i for i, s in enumerate(sentinels)})
    assert max(vocab.values()) < hf.V and len(set(vocab.values())) == len(vocab)
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.post_processor = tokenizers.processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", 1)]
    )
    tok.add_special_tokens(specials + sentinels)
    folder = tmp_path / "hf"
    hf.save(model, folder)
    tok.save(str(folder / "tokenizer.json"))
    special = {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>",
               "tokenizer_class": "PreTrainedTokenizerFast"}  # fmt: skip
    (folder / "tokenizer_config.json").write_text(json.dumps(special))
    return folder


def _texts(tmp_path) -> tuple[Path, Path]:
    """A JSONL file of en-de pairs (word for word) and a corpus of its English side."""
    rng = np.random.default_rng(0)
    pairs = []
    for _ in range(120):
        idx = rng.integers(0, len(EN), size=rng.integers(2, 7))
        pairs.append({"en": " ".join(EN[j] for j in idx), "de": " ".join(DE[j] for j in idx)})
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
    (tmp_path / "corpus.txt").write_text("".join(p["en"] + "\n" for p in pairs))
    return tmp_path / "pairs.jsonl", tmp_path / "corpus.txt"


def _main(tmp_path, folder, *flags):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SEQJAX_TFDS_DIR": str(tmp_path / "tfds")}
    cmd = [sys.executable, "-m", "seqjax.main", f"--config={ROOT / 'configs/translation.py'}:smoke",
           f"--workdir={tmp_path / 'work'}", "--config.data.batch_size=8",
           "--config.train.num_steps=1", "--config.optimizer.warmup_steps=1",
           "--config.train.eval_every=0", "--config.train.checkpoint_every=0",
           "--config.train.sample_length=0", "--config.train.final_eval=False",
           "--config.train.log_every=1", "--config.model.dropout_rate=0",
           "--config.model.attention_dropout_rate=0", "--config.train.label_smoothing=0",
           "--config.eval.decode_metrics=False", f"--config.init_from=hf:{folder}",
           *flags]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return tmp_path / "work"


def _translation(tmp_path, folder):
    pairs, _ = _texts(tmp_path)
    flags = ("--config.data.name=translation_jsonl", f"--config.data.path={pairs}",
             "--config.data.heldout_fraction=0.2", "--config.data.max_source_len=16",
             "--config.data.max_target_len=16")  # fmt: skip
    return _main(tmp_path, folder, *flags)


def _first_batch_and_loss(tmp_path, workdir):
    from seqjax import data as data_lib
    from seqjax.train import setup

    config = setup.load_config(str(workdir))
    config.data.data_dir = str(tmp_path / "tfds")
    batch = next(iter(data_lib.make(config.data, split="train")))
    rows = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
    return config, batch, next(r["train/loss"] for r in rows if "train/loss" in r)


def _their_loss(model, batch) -> float:
    """``T5ForConditionalGeneration``'s loss: padding masked, labels -100 on padding (it
    shifts them right from ``decoder_start_token_id`` itself)."""
    x = torch.from_numpy(np.asarray(batch["inputs"], np.int64))
    y = torch.from_numpy(np.asarray(batch["targets"], np.int64))
    pad = model.config.pad_token_id
    with torch.no_grad():
        out = model(
            input_ids=x, attention_mask=(x != pad).long(), labels=y.masked_fill(y == pad, -100)
        )
    return float(out.loss)


def test_t5_folder_fine_tunes_on_translation_from_the_command_line(tmp_path):
    from seqjax import export
    from seqjax.data import seq2seq, store
    from seqjax.train import setup

    model = hf.t5(decoder_start_token_id=0)
    folder = _folder(tmp_path, model)
    workdir = _translation(tmp_path, folder)
    saved = json.loads((workdir / "config.json").read_text())
    assert saved["model"]["family"] == "encoder_decoder" and saved["model"]["d_model"] == hf.E
    assert saved["model"]["positional"] == "t5_bias" and saved["data"]["vocab"] == f"hf:{folder}"
    assert json.loads((workdir / "init_from.json").read_text())["new"] == []
    config, batch, ours = _first_batch_and_loss(tmp_path, workdir)
    assert (batch["inputs"] == 1).sum(1).tolist() == [1] * 8  # one </s> a row (id 1, not 3)
    assert abs(ours - _their_loss(model, batch)) < 1e-4 * max(ours, 1.0)
    # the data's ids are the tokenizer's as transformers applies it (</s> appended)
    theirs = hf.transformers.AutoTokenizer.from_pretrained(str(folder))
    sources, _ = seq2seq.texts(store.dataset_key(config.data), "train")
    src, _ = seq2seq.encoded(store.dataset_key(config.data), "train", f"hf:{folder}")
    for i, text in enumerate(sources[:20]):
        assert [*src.row(i).tolist(), 1] == theirs(text).input_ids
    # the trained checkpoint exported in one line: equal logits and greedy translations
    export.export(str(workdir), str(tmp_path / "out"))
    run, state, _ = setup.restore_latest(str(workdir))
    back = hf.transformers.T5ForConditionalGeneration.from_pretrained(str(tmp_path / "out"))
    dec_in = np.pad(batch["targets"], ((0, 0), (1, 0)))[:, :-1]
    ours_BTV = run.model.apply({"params": state["params"]}, batch["inputs"], dec_in)
    x = torch.from_numpy(np.asarray(batch["inputs"], np.int64))
    y = torch.from_numpy(dec_in.astype(np.int64))
    with torch.no_grad():
        out = back.eval()(input_ids=x, attention_mask=(x != 0).long(), decoder_input_ids=y)
    hf.assert_close(ours_BTV, out.logits.numpy())
    tokens_BT, _ = run.task.translate_fn(run, beam_size=1, alpha=0.0)(
        state["params"], batch["inputs"]
    )
    with torch.no_grad():
        greedy = back.generate(input_ids=x, attention_mask=(x != 0).long(), num_beams=1,
                               do_sample=False, max_new_tokens=16).numpy()  # fmt: skip
    for row, want in zip(np.asarray(tokens_BT), greedy[:, 1:]):  # theirs starts with <pad>
        n = (list(want).index(1) + 1) if 1 in want else len(want)
        assert row[:n].tolist() == want[:n].tolist()


def test_t5_folder_span_corruption_from_the_command_line(tmp_path):
    """T5's pre-training objective on a corpus with the folder's tokenizer: sentinels are
    its ``<extra_id_N>`` tokens (the top ids), and the first loss is T5's."""
    model = hf.t5(decoder_start_token_id=0)
    folder = _folder(tmp_path, model)
    _, corpus = _texts(tmp_path)
    flags = ("--config.data.name=text_file", f"--config.data.path={corpus}",
             "--config.data.objective=span_corruption", "--config.data.max_source_len=16",
             "--config.data.max_target_len=8")  # fmt: skip
    workdir = _main(tmp_path, folder, *flags)
    _, batch, ours = _first_batch_and_loss(tmp_path, workdir)
    assert (batch["targets"][:, 0] == hf.V - 1).all()  # <extra_id_0> starts each target
    assert ((batch["inputs"] == hf.V - 1).sum(1) == 1).all()
    assert abs(ours - _their_loss(model, batch)) < 1e-4 * max(ours, 1.0)


@pytest.mark.slow
def test_t5_workdir_through_the_command_lines(tmp_path):
    """``seqjax.translate``, ``seqjax.evaluate`` and ``seqjax.export`` accept the workdir."""
    folder = _folder(tmp_path, hf.t5(decoder_start_token_id=0))
    workdir = _translation(tmp_path, folder)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SEQJAX_TFDS_DIR": str(tmp_path / "tfds")}
    for cmd in (["seqjax.translate", f"--workdir={workdir}", "--source=the file was not found"],
                ["seqjax.evaluate", f"--workdir={workdir}", "--max_batches=1"],
                ["seqjax.export", str(workdir), str(tmp_path / "out")]):  # fmt: skip
        out = subprocess.run([sys.executable, "-m", *cmd], capture_output=True, text=True,
                             env=env, cwd=tmp_path, timeout=600)  # fmt: skip
        assert out.returncode == 0, (cmd, out.stderr[-3000:])
    assert (tmp_path / "out" / "tokenizer.json").is_file()


def test_hf_vocab_batch_encoding_and_special_ids(tmp_path):
    """``HFVocab.encode_many`` (the tokenizer's batch encoding) equals encoding one text at a
    time; the seq2seq ids and the sentinels are the tokenizer's; a tokenizer without
    sentinels is one sentence for span corruption."""
    import ml_collections

    from seqjax.data import hf_vocab, seq2seq, sources, span_corruption

    folder = _folder(tmp_path, hf.t5(decoder_start_token_id=0))
    v = hf_vocab.HFVocab(folder)
    texts = ["the file was not found", "", "a new window\n", "unknown words here"] * 3
    for special in (True, False):
        assert v.encode_many(texts, special=special) == [
            v.tokenizer.encode(t, special) for t in texts
        ]
    assert v.encode_many(["the file"]) == [[*v.encode_many(["the file"], special=False)[0], 1]]
    assert seq2seq.special_ids(v) == (0, None, 1) and v.sentinel_ids(2) == [hf.V - 1, hf.V - 2]
    assert v.sentinel_ids(SENTINELS + 1) is None
    cfg = ml_collections.ConfigDict({"vocab": f"hf:{folder}", "max_source_len": 512})
    with pytest.raises(sources.DataError, match=r"needs the sentinel tokens <extra_id_0> \.\."):
        span_corruption.hf_specials(cfg, span_corruption.num_sentinels(512))
