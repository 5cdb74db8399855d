"""``docs/extending.md``, "A new Hugging Face architecture", run as printed: the module
registers XLM-RoBERTa, a random-init ``XLMRobertaForMaskedLM`` folder imports with the logits
``transformers`` computes, and the export loads back in ``transformers`` with the same logits."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from seqjax import convert
from seqjax.convert import registry

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parents[1]
HEADING = "## A new Hugging Face architecture"
V, E, T = 64, 16, 10


def _doc_block(language: str) -> str:
    text = (REPO / "docs" / "extending.md").read_text()
    section = text[text.index(HEADING) :]
    start = section.index(f"```{language}\n") + len(f"```{language}\n")
    return section[start : section.index("```", start)]


@pytest.fixture
def xlmr(monkeypatch):
    """The doc's module executed as ``my_xlmr`` (it registers "xlm-roberta")."""
    module = types.ModuleType("my_xlmr")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    registry.unregister("xlm-roberta")
    exec(compile(_doc_block("python"), "docs/extending.md", "exec"), module.__dict__)  # noqa: S102
    yield module
    registry.unregister("xlm-roberta")


def _logits(model, ids_BT):
    with torch.no_grad():
        return model(input_ids=torch.from_numpy(ids_BT.astype(np.int64))).logits.numpy()


def test_recipe_imports_and_exports_with_transformers_logits(xlmr, tmp_path):
    cfg = transformers.XLMRobertaConfig(
        vocab_size=V, hidden_size=E, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=T + 2, type_vocab_size=1, pad_token_id=1,
    )  # fmt: skip
    torch.manual_seed(0)
    theirs = transformers.XLMRobertaForMaskedLM(cfg).eval()
    with torch.no_grad():  # non-zero biases: every tensor matters
        for name, p in theirs.named_parameters():
            if name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    theirs.save_pretrained(str(tmp_path / "in"), safe_serialization=True)

    imp = convert.load(tmp_path / "in")
    assert imp.arch == "xlm-roberta" and imp.unused == []
    ids_BT = np.random.default_rng(0).integers(2, V, size=(2, T)).astype(np.int32)
    want = _logits(theirs, ids_BT)
    ours = np.asarray(imp.model.apply({"params": imp.params}, jnp.asarray(ids_BT)))
    np.testing.assert_allclose(ours, want, atol=1e-4 * np.abs(want).max())

    convert.save(tmp_path / "out", "xlm-roberta", imp.config, imp.params)
    again = transformers.AutoModelForMaskedLM.from_pretrained(str(tmp_path / "out")).eval()
    assert type(again).__name__ == "XLMRobertaForMaskedLM"
    np.testing.assert_allclose(_logits(again, ids_BT), want, atol=1e-5 * np.abs(want).max())
