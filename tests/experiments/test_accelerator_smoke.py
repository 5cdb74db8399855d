"""The accelerator benchmark script runs every section at toy sizes on a CPU (kernels in
interpret mode), every contender including the PyTorch peers where torch is installed,
and writes its JSON and markdown: a dry run of what ``--scale gpu`` and ``--scale tpu``
execute on a device."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_accelerator_script_smoke(tmp_path):
    cmd = [
        sys.executable,
        "experiments/accelerator/run.py",
        "--scale",
        "smoke",
        "--out",
        str(tmp_path),
        "--xent-chunks",
        "16",
    ]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    payload = json.loads((tmp_path / "smoke.json").read_text())
    sections = {r["section"] for r in payload["rows"]}
    assert sections == {"dense", "sparse", "efficient", "train", "tiles"}
    for row in payload["rows"]:
        for name, value in row.get("seconds", {}).items():
            assert isinstance(value, float) and value > 0, (row["section"], name, value)
    by_section = {r["section"]: r for r in payload["rows"]}
    want = {
        "efficient": {"performer", "linear", "performer_prefix", "linear_prefix"},
        "train": {"seqjax", "seqjax_plain_xent", "seqjax_xent16"},
    }
    if importlib.util.find_spec("torch") is not None:  # the peers, in the same process
        want |= {"dense": {"torch_sdpa"}, "sparse": {"flex_strided", "flex_fixed"}}
        want["train"] |= {"torch_compile", "torch_eager"}
        assert "forward only" in by_section["sparse"]["notes"]["flex_strided"]
        assert payload["env"]["torch"] != "not used"
    for section, names in want.items():
        assert names <= set(by_section[section]["seconds"]), (section, names)
    train = by_section["train"]
    assert set(train["mfu_by_contender"]) == set(train["seconds"])
    # The analytic model-FLOP count and XLA's count of the compiled step agree to 2x on a
    # CPU, so the markdown prints XLA's count (on a GPU it explains why it does not).
    assert 0.5 < train["xla_flops_per_step"] / train["model_flops_per_step"] < 2.0
    assert train["xla_flops_note"] is None
    md = (tmp_path / "smoke.md").read_text()
    assert "XLA cost analysis:" in md and "| seqjax_plain_xent |" in md


def test_gpu_scale_refuses_a_cpu_backend():
    cmd = [sys.executable, "experiments/accelerator/run.py", "--scale", "gpu"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "needs a GPU backend" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_summary_rows_compare_against_the_targets():
    from seqjax.configs import common

    run = common.load_file(REPO / "experiments/accelerator/run.py", "acc_run")
    rows = [
        dict(section="dense", T=1024, B=16, causal=True, seconds={"fused": 1.0, "auto": 1.25}),
        dict(section="dense", T=2048, B=8, causal=False, seconds={"fused": 1.0, "auto": "error"}),
        dict(section="sparse", T=12288, B=1, causal=True,
             seconds={"fused_dense": 10.0, "strided_pallas": 2.0, "strided_blocksparse": 1.0,
                      "fixed_pallas": 4.0, "fixed_blocksparse": 1.0}),
        dict(section="train", mfu=0.4, tokens_per_s=1e5, B=16, T=1024),
    ]  # fmt: skip
    got = {r["study"]: r["ours"] for r in run.summary_rows(rows, "GPU")}
    assert got == {
        "dense fwd+bwd, GPU": "0.80x",  # the failed contender gives no row
        "Sparse Transformer strided vs dense, GPU": "5.00x",  # the kernel, not the JAX engine
        "Sparse Transformer fixed vs dense, GPU": "2.50x",
        "GPT-2-small-class training, GPU": "40.0%",
    }
