"""A tiny random GPT-2 folder with a byte-level BPE tokenizer trained here (no download), the
one the in-context evaluation tests score with seqjax and with lm-evaluation-harness."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

CORPUS = [
    "the cat sat on the mat and the dog sat on the log",
    "a bird sang in the tree while the cat sat still",
    "the sun is warm and the sea is blue and calm",
] * 10
EOT = "<|endoftext|>"
MAX_LEN = 16
REPO = Path(__file__).resolve().parents[2]


def save(folder, seed: int = 0, arch: str = "gpt2") -> str:
    """Writes the model (``arch`` "gpt2", or "gpt_neo": one global and one local layer of
    window 4) and tokenizer into ``folder``; returns its path."""
    bl = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    alphabet = sorted({c for s in CORPUS for w, _ in bl.pre_tokenize_str(s) for c in w})
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = bl
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=64, special_tokens=[EOT], initial_alphabet=alphabet, show_progress=False
    )
    tok.train_from_iterator(CORPUS, trainer)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=EOT, eos_token=EOT, unk_token=None
    )
    fast.save_pretrained(str(folder))
    eot = tok.token_to_id(EOT)
    torch.manual_seed(seed)
    if arch == "gpt_neo":
        model = transformers.GPTNeoForCausalLM(transformers.GPTNeoConfig(
            vocab_size=tok.get_vocab_size(), hidden_size=32, num_layers=2, num_heads=4,
            max_position_embeddings=MAX_LEN, attention_types=[[["global", "local"], 1]],
            window_size=4, bos_token_id=eot, eos_token_id=eot,
        ))  # fmt: skip
    else:
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            vocab_size=tok.get_vocab_size(), n_embd=32, n_layer=2, n_head=4,
            n_positions=MAX_LEN, bos_token_id=eot, eos_token_id=eot,
        ))  # fmt: skip
    with torch.no_grad():  # larger weights than the init: confident, varied predictions
        for p in model.parameters():
            p.mul_(4.0 if p.ndim > 1 else 1.0)
    model.eval().save_pretrained(str(folder), safe_serialization=True)
    return str(folder)
