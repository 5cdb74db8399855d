"""The README's Hugging Face warm-start snippet, as printed, on a folder laid out where it
looks (``path/to/roberta-base``: a tiny random RoBERTa saved by ``transformers`` with a
``tokenizer.json``), and its claim: the logits equal ``transformers``' own. The snippet
needs only what ``pip install -e .`` installs (``tokenizers`` and ``safetensors`` are
run-time dependencies: checked in ``pyproject.toml``)."""

from __future__ import annotations

import json
import os
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
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0].lower() for d in deps}
    assert {"tokenizers", "safetensors"} <= names


def test_readme_warm_start_snippet(tmp_path, monkeypatch):
    code = readme_warm_start()
    folder = re.search(r'convert\.load\("([^"]+)"\)', code).group(1)
    hf = _make_folder(tmp_path / folder)
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(code, "README.md (warm start)", "exec"), scope)
    ids = np.asarray(scope["ids_BT"])
    assert ids.tolist() == [[4, 5, 6]]
    path = tmp_path / folder
    theirs = hf.logits(hf.transformers.AutoModelForMaskedLM.from_pretrained(str(path)), ids)
    hf.assert_close(np.asarray(scope["logits_BTV"]), theirs)


def _make_folder(path):
    """A tiny random RoBERTa and a word-level ``tokenizer.json`` at ``path``."""
    from tests.convert import _hf_models as hf

    tokenizers = pytest.importorskip("tokenizers")
    hf.save(hf.bert(roberta=True), path)
    words = ["<s>", "<pad>", "</s>", "<unk>", "A", "long", "document"]
    tok = tokenizers.Tokenizer(
        tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>")
    )
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"pad_token": "<pad>"}))
    return hf


@pytest.mark.slow  # a fresh venv and pip install -e . (minutes, the package index)
def test_readme_warm_start_in_a_fresh_venv_made_by_the_readme_install(tmp_path):
    """README command 1's install (``python3 -m venv .venv && . .venv/bin/activate && pip
    install -e .``), then the snippet as printed, in that venv (no test extra, no torch)."""
    import subprocess
    import sys

    block = re.search(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), re.S).group(1)
    line = next(ln for ln in block.splitlines() if "pip install -e ." in ln)
    install = line.split("&& python -m seqjax.main")[0].strip()
    assert install == "python3 -m venv .venv && . .venv/bin/activate && pip install -e ."
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run([str(venv / "bin/pip"), "install", "-q", "-e", str(REPO)],
                         capture_output=True, text=True, timeout=1800)  # fmt: skip
    assert pip.returncode == 0, pip.stderr[-3000:]
    code = readme_warm_start()
    folder = re.search(r'convert\.load\("([^"]+)"\)', code).group(1)
    hf = _make_folder(tmp_path / folder)
    script = code + "\nimport numpy as np\nnp.save('logits.npy', np.asarray(logits_BTV))\n"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([str(venv / "bin/python"), "-c", script], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    theirs = hf.logits(
        hf.transformers.AutoModelForMaskedLM.from_pretrained(str(tmp_path / folder)),
        np.asarray([[4, 5, 6]]),
    )  # fmt: skip
    hf.assert_close(np.load(tmp_path / "logits.npy"), theirs)
