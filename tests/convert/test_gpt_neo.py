"""GPT-Neo (alternating global/local attention) against ``transformers``: a random-init
``GPTNeoForCausalLM`` whose window is shorter than the sequence imports with equal logits, its
local layers on seqjax's block-sparse engine; export loads back in ``transformers`` with the
same logits; layouts GPT-Neo cannot express are refused."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from seqjax import convert
from seqjax.convert.archs import gpt_neo
from tests.convert import _hf_models as hf

T = 16  # longer than the window: the band matters


def _neo(window: int, types=(("global", "local"), 2), **overrides):
    cfg = hf.transformers.GPTNeoConfig(
        vocab_size=hf.V, hidden_size=hf.E, num_layers=len(types[0]) * types[1],
        num_heads=hf.HEADS, intermediate_size=hf.FF, max_position_embeddings=hf.POSITIONS,
        attention_types=[[list(types[0]), types[1]]], window_size=window,
        bos_token_id=hf.V - 1, eos_token_id=hf.V - 1, **overrides,
    )  # fmt: skip
    return hf._seeded(lambda: hf.transformers.GPTNeoForCausalLM(cfg))


@pytest.mark.parametrize("window", [4, 1])
def test_import_logits_and_export_round_trip(tmp_path, window):
    model = _neo(window)
    imp = convert.load(hf.save(model, tmp_path / "hf"))
    assert imp.arch == "gpt_neo" and imp.unused == [] and imp.initialized == []
    cfg = imp.config
    assert cfg.attention_scale == 1.0 and not cfg.attention_qkv_bias
    assert [n for n, _ in cfg.attention] == ["dense", "flex" if window > 1 else "local"] * 2
    local = dict(cfg.attention[1][1])
    assert local.get("implementation", "auto") != "masked"  # the block-sparse engines
    ids = hf.ids((2, T))
    theirs = hf.logits(model, ids)
    ours = imp.model.apply({"params": imp.params}, ids)
    hf.assert_close(ours, theirs)

    out = convert.save(tmp_path / "out", "gpt_neo", cfg, imp.params)
    written = json.loads((out / "config.json").read_text())
    assert written["attention_types"] == [[["global", "local"], 2]]
    assert written["window_size"] == window
    back = hf.transformers.AutoModelForCausalLM.from_pretrained(str(out)).eval()
    assert back.config.attention_layers == ["global", "local"] * 2
    hf.assert_close(hf.logits(back, ids), theirs)


def test_window_is_gpt_neo_window_minus_one(tmp_path):
    """``window_size`` counts the query: a seqjax window one wider sees one more key."""
    ids = hf.ids((1, T))
    model = _neo(3, types=(("local",), 2))
    imp = convert.load(hf.save(model, tmp_path))
    assert dict(imp.config.attention[0][1])["window"] == 2
    wider = dataclasses.replace(imp.config, attention=(gpt_neo.local_attention(4),))
    off = convert.make_model("gpt_neo", wider).apply({"params": imp.params}, ids)
    theirs = hf.logits(model, ids)
    err = np.max(np.abs(off - theirs)) / np.max(np.abs(theirs))
    assert err > 1e-3  # the oracle above tells the two windows apart


def test_bad_layouts_refused():
    with pytest.raises(ValueError, match="attention_types"):
        gpt_neo.gpt_neo_config({"vocab_size": 8, "num_layers": 3,
                                "attention_types": [[["global", "local"], 1]]})  # fmt: skip
    cfg = gpt_neo.gpt_neo_config({"vocab_size": 8, "num_layers": 2, "hidden_size": 16,
                                  "num_heads": 2, "attention_types": [[["global", "local"], 1]],
                                  "window_size": 5})  # fmt: skip
    lsh = dataclasses.replace(cfg, attention=(("dense", ()), ("lsh", ())))
    with pytest.raises(ValueError, match="model.attention layer 1 is 'lsh'"):
        gpt_neo.gpt_neo_hf_config(lsh)
    two = dataclasses.replace(
        cfg, attention=(gpt_neo.local_attention(3), gpt_neo.local_attention(5))
    )
    with pytest.raises(ValueError, match="one window_size"):
        gpt_neo.gpt_neo_hf_config(two)
    assert gpt_neo.compress(["global", "local", "global", "local"]) == [[["global", "local"], 2]]
    assert gpt_neo.compress(["local", "global", "global"]) == [[["local", "global", "global"], 1]]


def test_cached_decoding_equals_full_forward(tmp_path):
    """One token at a time through the KV cache (global) and the ring buffer (local), with
    GPT-Neo's unscaled logits, equals the full forward pass."""
    import jax
    import jax.numpy as jnp

    from seqjax.models.transformer import TransformerLM

    imp = convert.load(hf.save(_neo(3), tmp_path))
    cfg = dataclasses.replace(imp.config, max_len=T)
    ids = jnp.asarray(hf.ids((2, T)))
    dec = TransformerLM(cfg, decode=True)
    params = {**imp.params, "encoder": {**imp.params["encoder"]}}
    params["encoder"]["pos_embed"] = params["encoder"]["pos_embed"][:T]
    for i in range(cfg.num_layers):  # sharp attention: the logits' scale matters
        attn = params["encoder"][f"block_{i}"]["attn"]
        attn["query"] = {"kernel": attn["query"]["kernel"] * 30.0}
    params = jax.tree.map(jnp.asarray, params)
    full = TransformerLM(cfg).apply({"params": params}, ids)
    cache = dec.init(jax.random.key(0), jnp.zeros_like(ids))["cache"]
    step = jax.jit(lambda c, x: dec.apply({"params": params, "cache": c}, x, mutable=["cache"]))
    outs = []
    for i in range(T):
        out, mut = step(cache, ids[:, i : i + 1])
        cache = mut["cache"]
        outs.append(out)
    hf.assert_close(jnp.concatenate(outs, 1), full, rtol=1e-5)


def test_job_config_block_rebuilds_the_imported_config():
    """``config.init_from=hf:<GPT-Neo folder>`` writes ``transformer_block`` into
    ``config.model``: the attention cycle with the local layers' options and the layout
    (unscaled logits, out-projection-only biases) rebuild the imported config."""
    from seqjax import data
    from seqjax.models import from_config
    from seqjax.train import defaults

    hf_cfg = {"vocab_size": 50, "num_layers": 4, "hidden_size": 32, "num_heads": 4,
              "attention_types": [[["global", "local"], 2]], "window_size": 5}  # fmt: skip
    cfg = gpt_neo.gpt_neo_config(hf_cfg)
    config = defaults.base(data.default_config())
    for field, value in from_config.transformer_block(cfg).items():
        with config.model.ignore_type(), config.model.unlocked():
            config.model[field] = value
    info = type("Info", (), {"vocab_size": 50, "pad_id": cfg.pad_id, "image_shape": None})
    back = from_config.transformer_config(config, info, causal=True)
    assert dataclasses.replace(back, dtype=cfg.dtype) == cfg
