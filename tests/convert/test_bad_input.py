"""Bad Hugging Face folders fail with one sentence naming the problem, before any model is
built or trained."""

from __future__ import annotations

import json

import pytest

from seqjax import convert
from tests.convert import _hf_models as hf


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory):
    return hf.save(hf.gpt2(), tmp_path_factory.mktemp("gpt2"))


def _one_sentence(err):
    msg = str(err.value)
    assert "\n" not in msg and msg.count(". ") == 0, msg


def test_missing_folder_and_config(tmp_path):
    with pytest.raises(ValueError, match="does not exist") as err:
        convert.load(tmp_path / "nope")
    _one_sentence(err)
    with pytest.raises(ValueError, match="has no config.json") as err:
        convert.load(tmp_path)
    _one_sentence(err)


def test_unsupported_architecture_names_the_supported(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    with pytest.raises(ValueError, match="'LlamaForCausalLM' is not supported") as err:
        convert.load(tmp_path)
    assert "GPT2LMHeadModel" in str(err.value) and "T5ForConditionalGeneration" in str(err.value)
    _one_sentence(err)


def test_no_weights(tmp_path, gpt2_folder):
    (tmp_path / "config.json").write_text(open(f"{gpt2_folder}/config.json").read())
    with pytest.raises(ValueError, match="has no model.safetensors") as err:
        convert.load(tmp_path)
    _one_sentence(err)


def test_shape_mismatch_names_tensor_and_both_shapes(tmp_path, gpt2_folder):
    import shutil

    shutil.copytree(gpt2_folder, tmp_path / "m")
    cfg = json.loads((tmp_path / "m/config.json").read_text())
    cfg["n_inner"] = 48  # the file has 4 * 32 = 128
    (tmp_path / "m/config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError) as err:
        convert.load(tmp_path / "m")
    assert "'transformer.h.0.mlp.c_fc.weight' has shape (32, 128)" in str(err.value)
    assert "needs (32, 48)" in str(err.value)
    _one_sentence(err)


def test_missing_tensor(tmp_path, gpt2_folder):
    from safetensors.numpy import load_file, save_file

    tensors = load_file(f"{gpt2_folder}/model.safetensors")
    del tensors["transformer.h.1.ln_2.weight"]
    (tmp_path / "config.json").write_text(open(f"{gpt2_folder}/config.json").read())
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="no tensor 'transformer.h.1.ln_2.weight'") as err:
        convert.load(tmp_path)
    _one_sentence(err)


def test_unsupported_option(tmp_path, gpt2_folder):
    import shutil

    shutil.copytree(gpt2_folder, tmp_path / "m")
    cfg = json.loads((tmp_path / "m/config.json").read_text())
    cfg["activation_function"] = "quick_gelu"
    (tmp_path / "m/config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="activation_function='quick_gelu' is not supported"):
        convert.load(tmp_path / "m")


def test_vocabulary_mismatch():
    convert.check_vocabulary(32128, 32100)  # a padded table is fine
    with pytest.raises(ValueError, match="data vocabulary has 260 ids but .* 96 rows") as err:
        convert.check_vocabulary(96, 260)
    _one_sentence(err)
