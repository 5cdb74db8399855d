"""The Linformer masked-LM / transfer study script runs end to end at a tiny size."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_study_smoke(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "linformer_mlm_run", REPO / "experiments" / "linformer_mlm" / "run.py"
    )
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    run.main(["--out", str(tmp_path), "--smoke", "--n", "32", "--ks", "16",
              "--pretrain_steps", "2", "--finetune_steps", "2", "--eval_every", "2",
              "--eval_batches", "1", "--batch_size", "4",
              "--finetune_eval_batches", "1"])  # fmt: skip
    result = json.loads((tmp_path / "results.json").read_text())
    assert set(result["pretrain"]) == {"dense", "k16"}
    assert all(r["eval"] for r in result["pretrain"].values())
    ft = json.loads((tmp_path / "ft_k16" / "init_from.json").read_text())
    assert ft["loaded"] and "head/kernel" in ft["new"]
    assert (tmp_path / "fig3.md").exists() and (tmp_path / "transfer.md").exists()
