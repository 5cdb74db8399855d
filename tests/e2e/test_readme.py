"""README command 1, exactly as written, from a repository root (slow: ~4 min on 2 cores).

The command line is read from the README's first code block (the part after the last
``&&``: the install steps are the test environment's), run with a relative ``--workdir``
from a directory laid out like the checkout (``configs/`` and ``seqjax/`` link to this one,
so the user's own ``workdirs/`` is never touched), with one step-count override appended.
Then ``seqjax.evaluate`` and ``seqjax.sample`` run on the same relative workdir.
"""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# warmup_steps=100 in the default variant: the smallest valid num_steps.
STEPS = "--config.train.num_steps=100"


def readme_command_1() -> list[str]:
    text = (REPO / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    line = next(ln for ln in block.splitlines() if "seqjax.main" in ln)
    return shlex.split(line.split("&&")[-1])


@pytest.mark.slow
def test_readme_command_1_then_evaluate_and_sample(tmp_path):
    cmd = readme_command_1()
    assert cmd[:3] == ["python", "-m", "seqjax.main"]
    workdir = cmd[cmd.index("--workdir") + 1]
    assert not os.path.isabs(workdir)  # the point of the test
    root = tmp_path / "checkout"
    root.mkdir()
    for name in ("configs", "seqjax"):
        (root / name).symlink_to(REPO / name)
    env = dict(os.environ, XLA_FLAGS="", JAX_PLATFORMS="cpu")
    env.setdefault("SEQJAX_TFDS_DIR", str(tmp_path / "tfds"))
    env.pop("PYTHONPATH", None)  # seqjax comes from the checkout, as for a user

    def run(args):
        proc = subprocess.run(
            [sys.executable, *args], cwd=root, env=env, capture_output=True, text=True, timeout=900
        )
        assert proc.returncode == 0, (args, proc.stdout[-2000:], proc.stderr[-3000:])
        return proc

    run(cmd[1:] + [STEPS])
    real = root / workdir
    result = json.loads((real / "result.json").read_text())
    assert result["step"] == 100 and result["stopped"] == "done"
    assert result["test"]["bits_per_char"] > 0 and result["sample"]
    assert (real / "checkpoints" / "100").is_dir()
    ev = run(["-m", "seqjax.evaluate", "--workdir", workdir, "--split", "test"])
    line = json.loads(ev.stdout.strip().splitlines()[-1])
    assert line["step"] == 100
    assert line["bits_per_char"] == pytest.approx(result["test"]["bits_per_char"], rel=1e-5)
    sample = run(["-m", "seqjax.sample", "--workdir", workdir, "--prompt=def ", "--length=50"])
    assert sample.stdout.startswith("def ") and len(sample.stdout) >= 50
