"""Imported Hugging Face checkpoints give the logits ``transformers`` computes, to float32
rounding: BERT / RoBERTa masked-LM logits, GPT-2 LM logits and T5 teacher-forced decoder
logits (plain ReLU and gated-GELU feed-forward, tied and untied output)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from seqjax import convert
from tests.convert import _hf_models as hf

B, T = 2, 12


def _apply(imp, ids_BT, decoder_ids_BT=None):
    args = (jnp.asarray(ids_BT),)
    if decoder_ids_BT is not None:
        args += (jnp.asarray(decoder_ids_BT),)
    return np.asarray(imp.model.apply({"params": imp.params}, *args))


@pytest.mark.parametrize("roberta", [False, True], ids=["bert", "roberta"])
def test_bert_mlm_logits(tmp_path, roberta):
    model = hf.bert(roberta)
    imp = convert.load(hf.save(model, tmp_path))
    assert imp.arch == ("roberta" if roberta else "bert")
    assert imp.config.norm_position == "post" and not imp.config.embed_scale
    ids = hf.ids((B, T))
    hf.assert_close(_apply(imp, ids), hf.logits(model, ids))


def test_bert_untied_head_and_token_types(tmp_path):
    model = hf.bert(tie_word_embeddings=False, hidden_act="gelu")
    imp = convert.load(hf.save(model, tmp_path))
    assert not imp.config.tie_embeddings and "decoder" in imp.params["mlm_head"]
    ids, types = hf.ids((B, T)), (hf.ids((B, T), low=0, seed=1) % 2)
    ours = imp.model.apply(
        {"params": imp.params}, jnp.asarray(ids), token_types_BT=jnp.asarray(types)
    )
    import torch

    with torch.no_grad():
        theirs = model(
            input_ids=torch.from_numpy(ids.astype(np.int64)),
            token_type_ids=torch.from_numpy(types.astype(np.int64)),
        ).logits.numpy()
    hf.assert_close(ours, theirs)


@pytest.mark.parametrize("act", ["gelu_new", "relu"])
def test_gpt2_lm_logits(tmp_path, act):
    model = hf.gpt2(activation_function=act)
    imp = convert.load(hf.save(model, tmp_path))
    assert imp.arch == "gpt2" and imp.config.causal
    ids = hf.ids((B, hf.POSITIONS), low=0)  # every learned position
    hf.assert_close(_apply(imp, ids), hf.logits(model, ids))


@pytest.mark.parametrize("proj", ["relu", "gated-gelu"])
def test_t5_teacher_forced_logits(tmp_path, proj):
    model = hf.t5(proj)
    imp = convert.load(hf.save(model, tmp_path))
    assert imp.arch == "t5" and imp.config.mlp_gated == proj.startswith("gated")
    src, tgt = hf.ids((B, 30), seed=1), hf.ids((B, 25), low=0, seed=2)  # > max_distance
    tgt[:, 0] = 0  # the decoder start token
    hf.assert_close(_apply(imp, src, tgt), hf.logits(model, src, tgt))


def test_t5_untied_head(tmp_path):
    model = hf.t5("gated-gelu")
    with __import__("torch").no_grad():  # a separate output layer (T5 1.1 / Flan-T5)
        model.lm_head.weight = __import__("torch").nn.Parameter(
            model.lm_head.weight.detach().clone() * 0.5 + 0.01
        )
        model.config.tie_word_embeddings = False
        model.config.scale_decoder_outputs = False
    imp = convert.load(hf.save(model, tmp_path))
    assert not imp.config.tie_embeddings and not imp.config.rescale_tied_output
    src, tgt = hf.ids((B, 10), seed=1), hf.ids((B, 9), low=0, seed=2)
    hf.assert_close(_apply(imp, src, tgt), hf.logits(model, src, tgt))


def test_sharded_folder(tmp_path):
    model = hf.gpt2()
    model.save_pretrained(str(tmp_path), safe_serialization=True, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    imp = convert.load(tmp_path)
    ids = hf.ids((B, T), low=0)
    hf.assert_close(_apply(imp, ids), hf.logits(model, ids))
