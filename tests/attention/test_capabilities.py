"""Mechanisms declare their capabilities where they are registered, and the rest of seqjax asks
the registry: a toy mechanism's declarations reach config validation, packing, decoding and the
encoder-decoder's stacks; no module outside ``seqjax/attention`` keeps a table of mechanism
names; the one parse of a mechanism list is ``registry.parse``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from seqjax import attention
from seqjax.attention import registry

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def toy():
    """A mechanism with every capability off: no causal form, kernelized, packs nothing."""
    registry.unregister("toy")
    mech = registry.register(
        registry.Mechanism(
            name="toy",
            fn=attention.get("dense"),
            causal_form="it is a toy",
            attention_dropout=False,
            packing="its toy sums mix the examples",
            packing_period=lambda options, row_len: options.get("period", 3),
            context_parallel_refusal="it is a toy",
        )
    )
    yield mech
    registry.unregister("toy")


def test_parse_is_the_one_split():
    assert registry.parse(" lsh, dense,,dense ") == ["lsh", "dense", "dense"]
    assert registry.parse("") == []


def test_builtin_declarations():
    assert registry.having("always_causal") == ["causal"]
    assert registry.having("attention_dropout", False) == ["linear", "performer"]
    assert registry.having("context_parallel", "ring") == ["causal", "dense"]
    assert {registry.decode_cache(n) for n in ("dense", "linear", "local", "lsh")} == {
        "kv", "recurrent", "pattern", "lsh"
    }  # fmt: skip
    assert registry.decode_cache("flex", {"pattern": "bigbird"}) is None
    assert registry.decode_cache("linformer") is None
    assert registry.packing_refusal("dense") is None
    assert "bigbird" in registry.packing_refusal("flex", {"pattern": "bigbird"})
    assert registry.packing_period("local", {"block_len": 8}, lambda: 64) == 8
    assert registry.packing_period("sparse_fixed", {"stride": 4}, lambda: 64) == 4
    assert registry.kernels("dense", "tpu") == ("splash",) and registry.kernels("lsh") == {}
    assert len({registry.spec(n) for n in registry.names()}) == len(registry.names())  # hashable


def test_a_toy_mechanisms_declarations_are_asked(toy):
    from seqjax.models.encoder_decoder_config import EncoderDecoderConfig

    assert (
        registry.packing_refusal("toy") == "model.attention='toy' (its toy sums mix the examples)"
    )
    assert registry.packing_period("toy", {"period": 5}, lambda: 64) == 5
    assert "cannot run with config.mesh.sequence > 1: it is a toy." in (
        registry.context_parallel_refusal("toy")
    )
    assert registry.decode_cache("toy") is None
    EncoderDecoderConfig(vocab_size=8, encoder_attention="toy")  # bidirectional: fine
    with pytest.raises(ValueError, match="'toy' cannot be used here: it is a toy"):
        EncoderDecoderConfig(vocab_size=8, decoder_attention="toy")


def test_the_command_line_asks_the_toy(toy):
    import ml_collections

    from seqjax import main

    config = ml_collections.ConfigDict(
        {"model": {"attention": "dense, toy", "attention_dropout_rate": 0.1}}
    )
    assert main.fit_attention_dropout(config, []) and config.model.attention_dropout_rate == 0.0
    config.model.attention = "dense"
    config.model.attention_dropout_rate = 0.1
    assert not main.fit_attention_dropout(config, [])


def _literal_names(node) -> list[str]:
    if isinstance(node, ast.Dict):
        items = node.keys
    elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        items = node.elts
    else:
        return []
    return [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]


def test_no_table_of_mechanism_names_outside_attention():
    known = set(registry.names())
    tables = []
    for path in sorted((REPO / "seqjax").rglob("*.py")):
        if "attention" in path.relative_to(REPO / "seqjax").parts[:1]:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            found = [n for n in _literal_names(node) if n in known]
            if len(found) >= 2:
                tables.append(f"{path.relative_to(REPO)}:{node.lineno} {found}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                args = node.args
                if node.func.attr == "split" and args and getattr(args[0], "value", "") == ",":
                    text = ast.unparse(node.func.value)
                    if "attention" in text or "spec" in text or "names" in text:
                        tables.append(f"{path.relative_to(REPO)}:{node.lineno} {text}.split")
    assert not tables, "ask seqjax.attention.registry instead:\n" + "\n".join(tables)
