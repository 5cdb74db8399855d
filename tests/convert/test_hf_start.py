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


def _folder(tmp_path, model, special=("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"), text=TEXT):
    """``model`` saved with a WordPiece tokenizer of at most ``hf.V`` ids trained on
    ``text``."""
    tok = tokenizers.Tokenizer(tokenizers.models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    trainer = tokenizers.trainers.WordPieceTrainer(vocab_size=hf.V, special_tokens=list(special))
    tok.train_from_iterator(text.splitlines(), trainer)
    assert tok.get_vocab_size() <= hf.V
    folder = tmp_path / "hf"
    hf.save(model, folder)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"pad_token": "[PAD]"}))
    return folder


def _main(tmp_path, *flags, config="configs/char_lm.py:smoke", warmup=0):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SEQJAX_TFDS_DIR": str(tmp_path / "tfds")}
    cmd = [sys.executable, "-m", "seqjax.main", f"--config={ROOT / config}",
           f"--workdir={tmp_path / 'work'}", "--config.data.name=text_file",
           f"--config.data.path={corpus}", "--config.data.seq_len=16",
           "--config.data.batch_size=8", "--config.train.num_steps=1",
           f"--config.optimizer.warmup_steps={warmup}",
           "--config.train.eval_every=0", "--config.train.checkpoint_every=0",
           "--config.train.sample_length=0", "--config.train.test_max_batches=1",
           "--config.train.log_every=1", "--config.model.dropout_rate=0",
           "--config.model.attention_dropout_rate=0", *flags]  # fmt: skip
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
    assert saved["model"]["dropout_rate"] == 0.0  # typed: a training choice, not a shape
    record = json.loads((tmp_path / "work" / "init_from.json").read_text())
    assert record["new"] == [] and len(record["loaded"]) > 0
    batch = _first_batch(tmp_path / "work")
    x = torch.from_numpy(np.asarray(batch["inputs"], np.int64))
    y = torch.from_numpy(np.asarray(batch["targets"], np.int64))
    with torch.no_grad():
        logits = model(input_ids=x).logits.float()
    theirs = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    assert abs(_first_loss(tmp_path / "work") - float(theirs)) < 1e-4 * float(theirs)
    # ... and back: the trained checkpoint exported in one line loads in transformers
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "seqjax.export", str(tmp_path / "work"),
                          str(tmp_path / "out")], capture_output=True, text=True, env=env,
                         timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "out" / "tokenizer.json").is_file()
    from seqjax.train import setup

    run, state, _ = setup.restore_latest(str(tmp_path / "work"))
    ours = run.model.apply({"params": state["params"]}, np.asarray(batch["inputs"]))
    back = hf.transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "out")).eval()
    hf.assert_close(ours, hf.logits(back, np.asarray(batch["inputs"])))


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


@pytest.mark.parametrize("roberta", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_bert_folder_fine_tunes_on_imdb_from_the_command_line(tmp_path, roberta):
    """BERT's (RoBERTa's) encoder from the folder, a new classifier head: ``transformers``'
    encoder and the run's initial head (rebuilt from its saved config: the same seed) give
    the reference loss of the first batch. RoBERTa pads with id 1: the reviews are padded
    with it, and its positions count the non-pad tokens (``transformers``' own)."""
    from seqjax import data as data_lib
    from seqjax.train import setup
    from tests.data.test_imdb_subword import WORDS, _tarball

    model = hf.bert(roberta=roberta)
    order = (1, 0) if roberta else (0, 1)  # RoBERTa's [PAD] is id 1
    special = tuple(("[PAD]", "[UNK]")[i] for i in order) + ("[CLS]", "[SEP]", "[MASK]")
    folder = _folder(tmp_path, model, special, text=" ".join(WORDS) + "\n")  # short reviews
    manual = tmp_path / "imdb"
    manual.mkdir()
    _tarball(manual / "aclImdb_v1.tar.gz")
    out = _main(
        tmp_path, f"--config.init_from=hf:{folder}", "--config.data.name=imdb_bytes",
        f"--config.data.manual_dir={manual}", "--config.data.max_len=40",
        "--config.model.pooling=mean", "--config.data.accept_checksum_mismatch=True",
        config="configs/lra_text.py:smoke", warmup=1,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    record = json.loads((tmp_path / "work" / "init_from.json").read_text())
    assert all(not p.startswith("encoder/") for p in record["new"]), record["new"]
    assert any(p.startswith("mlm_head/") for p in record["unused"])
    os.environ.setdefault("SEQJAX_TFDS_DIR", str(tmp_path / "tfds"))
    config = setup.load_config(str(tmp_path / "work"))
    config.data.data_dir = str(tmp_path / "tfds")
    batch = next(iter(data_lib.make(config.data, split="train")))
    from seqjax.train import hf_start

    config.mesh.update(data=1, fsdp=1, tensor=1)
    run = setup.build(config, validate=False)
    state = hf_start.params(run, config.init_from)
    p = {k: np.array(v) for k, v in _flat(state["params"]).items()}
    x = torch.from_numpy(np.asarray(batch["inputs"], np.int64))
    pad = model.config.pad_token_id
    assert (x == pad).any() and (x[:, 0] != pad).all()  # right padding with the pad id
    keep = x != pad
    encoder = model.roberta if roberta else model.bert
    with torch.no_grad():
        h = encoder(input_ids=x, attention_mask=keep.long()).last_hidden_state
        w = keep.float()[..., None]
        pooled = (h * w).sum(1) / w.sum(1).clamp(min=1.0)
        z = torch.nn.functional.gelu(
            pooled @ torch.from_numpy(p["pre_head/kernel"]) + torch.from_numpy(p["pre_head/bias"]),
            approximate="tanh",
        )
        logits = z @ torch.from_numpy(p["head/kernel"]) + torch.from_numpy(p["head/bias"])
    y = torch.from_numpy(np.asarray(batch["targets"], np.int64))
    theirs = float(torch.nn.functional.cross_entropy(logits, y))
    assert abs(_first_loss(tmp_path / "work") - theirs) < 1e-4 * max(theirs, 1.0)


def _flat(tree, prefix=""):
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}/"))
        else:
            out[f"{prefix}{k}"] = v
    return out
