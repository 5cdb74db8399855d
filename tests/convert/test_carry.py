"""What a Hugging Face folder says beyond the weights survives import and export: dropout
rates (both ways), the source's special token ids, its tokenizer files and a
``generation_config.json``; a missing ``tokenizers`` package is one sentence naming the
install line."""

from __future__ import annotations

import json
import sys

import pytest

from seqjax import convert
from tests.convert import _hf_models as hf

# family -> (builder, {config.json field: value}, {seqjax field: value})
DROPOUT = {
    "bert": (hf.bert, {"hidden_dropout_prob": 0.2, "attention_probs_dropout_prob": 0.3},
             {"dropout_rate": 0.2, "attention_dropout_rate": 0.3}),
    "gpt2": (hf.gpt2, {"resid_pdrop": 0.2, "embd_pdrop": 0.2, "attn_pdrop": 0.3},
             {"dropout_rate": 0.2, "attention_dropout_rate": 0.3}),
    "t5": (hf.t5, {"dropout_rate": 0.2}, {"dropout_rate": 0.2, "attention_dropout_rate": 0.2}),
}  # fmt: skip


@pytest.mark.parametrize("arch", sorted(DROPOUT))
def test_dropout_both_ways(tmp_path, arch):
    build, theirs, ours = DROPOUT[arch]
    imp = convert.load(hf.save(build(**theirs), tmp_path / "in"))
    assert {k: getattr(imp.config, k) for k in ours} == ours
    convert.save(tmp_path / "out", imp.arch, imp.config, imp.params)
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert {k: written[k] for k in theirs} == theirs
    again = hf.transformers.AutoConfig.from_pretrained(str(tmp_path / "out"))
    assert {k: getattr(again, k) for k in theirs} == theirs


def test_dropout_default_is_transformers(tmp_path):
    """A config.json without the fields means transformers' defaults (0.1), not 0."""
    cfg = convert.model_config("bert", {"vocab_size": 8, "num_hidden_layers": 1,
                                        "num_attention_heads": 1, "hidden_size": 8})  # fmt: skip
    assert (cfg.dropout_rate, cfg.attention_dropout_rate) == (0.1, 0.1)


def test_t5_attention_dropout_must_equal_dropout(tmp_path):
    imp = convert.load(hf.save(hf.t5(), tmp_path / "in"))
    cfg = __import__("dataclasses").replace(imp.config, attention_dropout_rate=0.0)
    with pytest.raises(ValueError, match=r"model.attention_dropout_rate=0.0 cannot be exported"):
        convert.save(tmp_path / "out", "t5", cfg, imp.params)


def _word_tokenizer(folder, vocab_size: int):
    tokenizers = pytest.importorskip("tokenizers")
    words = ["<|endoftext|>", "[UNK]"] + [f"w{i}" for i in range(vocab_size - 2)]
    tok = tokenizers.Tokenizer(
        tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]")
    )
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>",
         "bos_token": "<|endoftext|>", "unk_token": "[UNK]"}))  # fmt: skip


def test_gpt2_custom_vocabulary_keeps_its_ids_and_tokenizer(tmp_path):
    """A GPT-2 whose <|endoftext|> is id 0: the re-export says 0 (not vocab_size - 1), carries
    the tokenizer and generates with the source's ids."""
    src = tmp_path / "in"
    hf.save(hf.gpt2(bos_token_id=0, eos_token_id=0), src)
    _word_tokenizer(src, hf.V)
    imp = convert.load(src)
    out = convert.save(tmp_path / "out", imp.arch, imp.config, imp.params, source=src)
    written = json.loads((out / "config.json").read_text())
    assert (written["bos_token_id"], written["eos_token_id"]) == (0, 0)
    gen = hf.transformers.GenerationConfig.from_pretrained(str(out))
    assert (gen.bos_token_id, gen.eos_token_id) == (0, 0)
    theirs = hf.transformers.AutoTokenizer.from_pretrained(str(out))
    assert theirs("w3 w7 w1")["input_ids"] == convert.tokenizer(src).encode("w3 w7 w1")
    assert theirs.eos_token_id == 0


def test_generation_config_written_without_source(tmp_path):
    imp = convert.load(hf.save(hf.t5(), tmp_path / "in"))
    out = convert.save(tmp_path / "out", "t5", imp.config, imp.params)
    gen = hf.transformers.GenerationConfig.from_pretrained(str(out))
    assert (gen.decoder_start_token_id, gen.eos_token_id, gen.pad_token_id) == (0, 1, 0)


def test_missing_tokenizers_names_the_install_line(tmp_path, monkeypatch):
    _word_tokenizer(tmp_path, 8)
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # "import tokenizers" fails
    with pytest.raises(ImportError, match=r"needs the tokenizers package.*pip install -e \."):
        convert.tokenizer(tmp_path)


def test_saved_over_its_own_source(tmp_path):
    src = tmp_path / "in"
    hf.save(hf.gpt2(bos_token_id=0, eos_token_id=0), src)
    _word_tokenizer(src, hf.V)
    imp = convert.load(src)
    convert.save(src, imp.arch, imp.config, imp.params, source=src)
    written = json.loads((src / "config.json").read_text())
    assert (written["eos_token_id"], (src / "tokenizer.json").is_file()) == (0, True)
