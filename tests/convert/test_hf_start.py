"""``--config.init_from=hf:<folder>`` through ``python -m seqjax.main``: the model shape and
the vocabulary come from the folder, and the first training loss equals the loss
``transformers`` computes for the same batch on the same weights."""

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
TEXT = (
    "the quick brown fox jumps over the lazy dog\n"
    "a warm start from a checkpoint keeps every weight\n"
    "language models read text one token at a time\n"
) * 40


def _folder(tmp_path, model, special=("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")):
    """``model`` saved with a WordPiece tokenizer of at most ``hf.V`` ids trained on TEXT."""
    tok = tokenizers.Tokenizer(tokenizers.models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    trainer = tokenizers.trainers.WordPieceTrainer(vocab_size=hf.V, special_tokens=list(special))
    tok.train_from_iterator(TEXT.splitlines(), trainer)
    assert tok.get_vocab_size() <= hf.V
    folder = tmp_path / "hf"
    hf.save(model, folder)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"pad_token": "[PAD]"}))
    return folder


def _main(tmp_path, *flags, config="configs/char_lm.py:smoke"):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SEQJAX_TFDS_DIR": str(tmp_path / "tfds")}
    cmd = [sys.executable, "-m", "seqjax.main", f"--config={ROOT / config}",
           f"--workdir={tmp_path / 'work'}", "--config.data.name=text_file",
           f"--config.data.path={corpus}", "--config.data.seq_len=16",
           "--config.data.batch_size=8", "--config.train.num_steps=1",
           "--config.optimizer.warmup_steps=0",
           "--config.train.eval_every=0", "--config.train.checkpoint_every=0",
           "--config.train.sample_length=0", "--config.train.test_max_batches=1",
           "--config.train.log_every=1", *flags]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)


def _first_batch(workdir: Path):
    """The first training batch of the run in ``workdir`` (its saved config)."""
    from seqjax import data as data_lib
    from seqjax.train import setup

    config = setup.load_config(str(workdir))
    return next(iter(data_lib.make(config.data, split="train")))


def _first_loss(workdir: Path) -> float:
    rows = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
    return next(r["train/loss"] for r in rows if "train/loss" in r)


def test_gpt2_folder_trains_from_the_command_line(tmp_path):
    model = hf.gpt2()
    folder = _folder(tmp_path, model)
    out = _main(tmp_path, f"--config.init_from=hf:{folder}")
    assert out.returncode == 0, out.stderr[-3000:]
    saved = json.loads((tmp_path / "work" / "config.json").read_text())
    assert saved["model"]["family"] == "transformer"
    assert saved["model"]["d_model"] == hf.E and saved["model"]["num_layers"] == hf.LAYERS
    assert saved["data"]["vocab"] == f"hf:{folder}"
    record = json.loads((tmp_path / "work" / "init_from.json").read_text())
    assert record["new"] == [] and len(record["loaded"]) > 0
    batch = _first_batch(tmp_path / "work")
    x = torch.from_numpy(np.asarray(batch["inputs"], np.int64))
    y = torch.from_numpy(np.asarray(batch["targets"], np.int64))
    with torch.no_grad():
        logits = model(input_ids=x).logits.float()
    theirs = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    assert abs(_first_loss(tmp_path / "work") - float(theirs)) < 1e-4 * float(theirs)


def test_a_typed_field_that_disagrees_is_one_sentence(tmp_path):
    folder = _folder(tmp_path, hf.gpt2())
    out = _main(tmp_path, f"--config.init_from=hf:{folder}", "--config.model.d_model=64")
    assert out.returncode == 2, out.stderr[-2000:]
    assert "config.model.d_model=64 disagrees with the checkpoint" in out.stderr
    assert f"d_model={hf.E}" in out.stderr
    assert not (tmp_path / "tfds").exists()  # before any data work


def test_a_missing_folder_is_one_sentence_before_data(tmp_path):
    out = _main(tmp_path, f"--config.init_from=hf:{tmp_path / 'nope'}")
    assert out.returncode == 2
    assert "does not exist or is not a folder" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "tfds").exists()
