"""The README's Hugging Face warm-start snippet, as printed, on a folder laid out where it
looks (``path/to/roberta-base``: a tiny random RoBERTa saved by ``transformers`` with a
``tokenizer.json``), and its claim: the logits equal ``transformers``' own. The snippet
needs only what ``pip install -e .`` installs (``tokenizers`` and ``safetensors`` are
run-time dependencies: checked in ``pyproject.toml``)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from tests.conftest import REPO


def readme_warm_start() -> str:
    text = (REPO / "README.md").read_text()
    section = text.split("## Warm start from a Hugging Face folder", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_warm_start_needs_only_the_install_line():
    """README: ``pip install -e .`` (no extra) installs what the snippet imports."""
    import tomllib

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0].lower() for d in deps}
    assert {"tokenizers", "safetensors"} <= names


def test_readme_warm_start_snippet(tmp_path, monkeypatch):
    from tests.convert import _hf_models as hf

    tokenizers = pytest.importorskip("tokenizers")
    code = readme_warm_start()
    folder = re.search(r'convert\.load\("([^"]+)"\)', code).group(1)
    path = tmp_path / folder
    hf.save(hf.bert(roberta=True), path)
    words = ["<s>", "<pad>", "</s>", "<unk>", "A", "long", "document"]
    tok = tokenizers.Tokenizer(
        tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>")
    )
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"pad_token": "<pad>"}))
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(code, "README.md (warm start)", "exec"), scope)
    ids = np.asarray(scope["ids_BT"])
    assert ids.tolist() == [[4, 5, 6]]
    theirs = hf.logits(hf.transformers.AutoModelForMaskedLM.from_pretrained(str(path)), ids)
    hf.assert_close(np.asarray(scope["logits_BTV"]), theirs)
