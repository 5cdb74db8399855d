"""The Longformer warm-start study end to end at its smoke size: seqjax MLM pre-training,
Hugging Face export and re-import, copied and random positions, three mechanisms; and every
command of its README as printed (slow: minutes of compilation on 2 cores)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_study_smoke(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "longformer_warmstart_run", REPO / "experiments/longformer_warmstart/run.py"
    )
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    config = str(REPO / "configs/_longformer_warmstart.py") + ":smoke"
    results = run.main(["--config", config, "--out", str(tmp_path)])
    assert set(results["runs"]) == {"dense/copy", "longformer/copy", "bigbird/copy",
                                    "longformer/random"}  # fmt: skip
    assert (tmp_path / "pretrained_hf" / "config.json").is_file()
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["long_len"] == 4 * saved["short_len"]
    assert "| extended (4n = 256) | longformer | copy |" in (tmp_path / "results.md").read_text()


def readme_commands() -> list[str]:
    """Every command of the study README's bash block, continuation lines joined."""
    text = (REPO / "experiments/longformer_warmstart/README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    lines = [ln for ln in block.splitlines() if not ln.lstrip().startswith("#")]
    return [c.strip() for c in " ".join(lines).replace("\\ ", " ").split("python ") if c.strip()]


def _roberta_with_tokenizer(folder: Path) -> str:
    """A tiny random RoBERTa (``transformers``) whose ``tokenizer.json`` has one id per
    character of the text (BPE without merges) and RoBERTa's special tokens."""
    from tests.convert import _hf_models as hf

    tokenizers = pytest.importorskip("tokenizers")
    hf.save(hf.bert(roberta=True), folder)
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    chars = sorted(set(_text().read_text()))
    vocab = {w: i for i, w in enumerate(specials + chars)}
    assert len(vocab) <= hf.V
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.add_special_tokens(specials)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"mask_token": "<mask>"}))
    return str(folder)


def _text() -> Path:
    from seqjax.configs import common

    return Path(common.shared_data_file("tinyshakespeare/input.txt"))


@pytest.mark.slow  # the full rows: ~7 minutes each on 2 cores; the smoke ~3
@pytest.mark.parametrize("command", readme_commands())
def test_readme_command_as_printed(tmp_path, command):
    """From a checkout-shaped folder (``configs``/``seqjax`` linked, the script copied so
    its default ``--out`` lands under the folder's own ``workdirs/``); ``hf:/path/to/...``
    is the one placeholder replaced, by a tiny RoBERTa with its tokenizer."""
    if not _text().is_file():
        pytest.skip(f"{_text()} is not here (SEQJAX_SHARED_DATA)")
    root = tmp_path / "checkout"
    (root / "experiments/longformer_warmstart").mkdir(parents=True)
    for name in ("configs", "seqjax"):
        (root / name).symlink_to(REPO / name)
    shutil.copy(REPO / "experiments/longformer_warmstart/run.py",
                root / "experiments/longformer_warmstart/run.py")  # fmt: skip
    if "/path/to/roberta-base" in command:
        command = command.replace(
            "/path/to/roberta-base", _roberta_with_tokenizer(tmp_path / "roberta")
        )  # fmt: skip
    env = dict(os.environ, SEQJAX_SHARED_DATA=str(_text().parents[1]), JAX_PLATFORMS="cpu")
    env.pop("PYTHONPATH", None)  # seqjax comes from the checkout, as for a user
    proc = subprocess.run([sys.executable, *shlex.split(command)], cwd=root, env=env,
                          capture_output=True, text=True, timeout=1800)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    args = shlex.split(command)
    if "--out" in args:
        out = root / args[args.index("--out") + 1]
    else:  # a fresh folder, never the committed results
        (out,) = (root / "workdirs/longformer_warmstart").iterdir()
        assert not (root / "experiments/longformer_warmstart/results").exists()
    results = json.loads((out / "results.json").read_text())
    assert "longformer/copy" in results["runs"] and (out / "results.png").is_file()
