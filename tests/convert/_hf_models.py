"""Tiny randomly initialised Hugging Face models (no download) saved as folders, and their
reference logits computed by ``transformers`` itself."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

V, E, LAYERS, HEADS, FF, POSITIONS = 96, 32, 2, 4, 64, 40


def _seeded(build):
    torch.manual_seed(0)
    model = build()
    with torch.no_grad():  # random non-zero biases and norms: every tensor matters
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name.lower() or "ln" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model.eval()


def bert(roberta: bool = False, **overrides):
    if roberta:
        cfg = transformers.RobertaConfig(
            vocab_size=V, hidden_size=E, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
            intermediate_size=FF, max_position_embeddings=POSITIONS + 2, type_vocab_size=1,
            layer_norm_eps=1e-5, pad_token_id=1, **overrides,
        )  # fmt: skip
        return _seeded(lambda: transformers.RobertaForMaskedLM(cfg))
    cfg = transformers.BertConfig(
        vocab_size=V, hidden_size=E, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        intermediate_size=FF, max_position_embeddings=POSITIONS, **overrides,
    )  # fmt: skip
    return _seeded(lambda: transformers.BertForMaskedLM(cfg))


def gpt2(**overrides):
    cfg = transformers.GPT2Config(
        vocab_size=V, n_embd=E, n_layer=LAYERS, n_head=HEADS, n_positions=POSITIONS,
        **{"bos_token_id": V - 1, "eos_token_id": V - 1, **overrides},
    )  # fmt: skip
    return _seeded(lambda: transformers.GPT2LMHeadModel(cfg))


def t5(feed_forward_proj: str = "relu", **overrides):
    cfg = transformers.T5Config(
        vocab_size=V, d_model=E, d_kv=8, d_ff=FF, num_layers=LAYERS, num_decoder_layers=LAYERS,
        num_heads=HEADS, feed_forward_proj=feed_forward_proj, relative_attention_num_buckets=8,
        relative_attention_max_distance=20, **overrides,
    )  # fmt: skip
    return _seeded(lambda: transformers.T5ForConditionalGeneration(cfg))


def save(model, folder) -> str:
    model.save_pretrained(str(folder), safe_serialization=True)
    return str(folder)


def ids(shape, low: int = 2, seed: int = 0) -> np.ndarray:
    """Random token ids in ``[low, V)`` (above the pad ids: no padding)."""
    return np.random.default_rng(seed).integers(low, V, size=shape).astype(np.int32)


def logits(model, ids_BT, decoder_ids_BT=None) -> np.ndarray:
    with torch.no_grad():
        x = torch.from_numpy(ids_BT.astype(np.int64))
        if decoder_ids_BT is None:
            return model(input_ids=x).logits.float().numpy()
        y = torch.from_numpy(decoder_ids_BT.astype(np.int64))
        return model(input_ids=x, decoder_input_ids=y).logits.float().numpy()


def assert_close(ours, theirs, rtol: float = 1e-4):
    """``|ours - theirs| <= rtol * max|theirs|`` elementwise (float32 rounding)."""
    ours, theirs = np.asarray(ours, np.float32), np.asarray(theirs, np.float32)
    assert ours.shape == theirs.shape
    err = np.max(np.abs(ours - theirs)) / np.max(np.abs(theirs))
    assert err <= rtol, f"relative error {err:.2e} > {rtol}"
