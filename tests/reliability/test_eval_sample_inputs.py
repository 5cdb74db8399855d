"""evaluate and sample command lines (issue 16, item 8): a missing or empty workdir, no
checkpoint, a step that does not exist, --length/--temperature out of range, prompt
characters outside the vocabulary: each ends in one sentence (exit 2), no traceback."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from seqjax.data.vocab import Vocab
from seqjax.tasks import inputs
from seqjax.train import cli_inputs, errors


@pytest.fixture
def fake_workdir(tmp_path):
    """config.json and finalized-looking checkpoints 5 and 10 (enough for the checks)."""
    (tmp_path / "config.json").write_text("{}")
    for s in (5, 10):
        (tmp_path / "checkpoints" / str(s)).mkdir(parents=True)
    return tmp_path


def _input_error(fn, *args) -> str:
    with pytest.raises(inputs.InputError) as e:
        fn(*args)
    msg, code = errors.message(e.value)
    assert code == 2
    return msg


def test_workdir_checks(tmp_path, fake_workdir):
    assert "does not exist" in _input_error(cli_inputs.checkpoint_step, str(tmp_path / "no"), None)
    (tmp_path / "f").write_text("x")
    assert "is a file" in _input_error(cli_inputs.checkpoint_step, str(tmp_path / "f"), None)
    (tmp_path / "empty").mkdir()
    msg = _input_error(cli_inputs.checkpoint_step, str(tmp_path / "empty"), None)
    assert "not a seqjax training workdir" in msg and "config.json" in msg
    (tmp_path / "nockpt").mkdir()
    (tmp_path / "nockpt" / "config.json").write_text("{}")
    msg = _input_error(cli_inputs.checkpoint_step, str(tmp_path / "nockpt"), None)
    assert "no complete checkpoint" in msg
    assert cli_inputs.checkpoint_step(str(fake_workdir), None) == 10
    assert cli_inputs.checkpoint_step(str(fake_workdir), 5) == 5
    msg = _input_error(cli_inputs.checkpoint_step, str(fake_workdir), 7)
    assert "--step=7" in msg and "available steps: 5, 10" in msg


@pytest.mark.parametrize(
    "length,temperature,expected",
    [
        (-1, 0.8, "--length=-1"),
        (10, -0.5, "--temperature=-0.5"),
        (10, float("nan"), "--temperature=nan"),
        (10, float("inf"), "--temperature=inf"),
    ],
)
def test_sampling_flags(length, temperature, expected):
    msg = _input_error(inputs.check_sampling_flags, length, temperature)
    assert expected in msg and "valid" in msg


def test_sampling_flags_valid():
    inputs.check_sampling_flags(0, 0.0)
    inputs.check_sampling_flags(200, 1.3)


def test_length_over_the_window():
    msg = _input_error(inputs.check_window, 4, 80, 64, False)
    assert "model.max_len=64" in msg and "--length <= 60" in msg
    inputs.check_window(4, 60, 64, False)
    inputs.check_window(4, 500, 64, True)  # Transformer-XL: memory, no window


def test_a_prompt_longer_than_the_model_names_its_length():
    msg = _input_error(inputs.check_window, 70, 10, 64, False)
    assert "--prompt is 70 tokens long" in msg and "model.max_len=64" in msg
    assert "--length <= 0" not in msg
    msg = _input_error(inputs.check_window, 64, 0, 64, False)  # no room for one token
    assert "--prompt is 64 tokens long" in msg


@pytest.mark.parametrize(
    "top_k,top_p,expected", [(-1, 1.0, "top_k (--top_k) = -1"), (0, 1.5, "top_p (--top_p) = 1.5")]
)
def test_top_k_top_p_flags(top_k, top_p, expected):
    msg = _input_error(inputs.check_sampling_flags, 10, 0.8, top_k, top_p)
    assert expected in msg
    inputs.check_sampling_flags(10, 0.8, 20, 0.9)


def test_top_k_top_p_reach_the_sampler(monkeypatch):
    """``python -m seqjax.sample --top_k/--top_p`` -> ``Task.sample`` -> ``sample_text``."""
    from seqjax import tasks
    from seqjax.tasks import sampling

    seen = {}
    monkeypatch.setattr(sampling, "sample_text", lambda *a, **kw: seen.update(kw) or "x")
    assert tasks.get("lm").sample(None, None, "p", 3, temperature=0.5, top_k=7, top_p=0.9) == "x"
    assert seen == {"temperature": 0.5, "top_k": 7, "top_p": 0.9, "seed": 0}


@pytest.mark.parametrize("unk", [True, False])
def test_prompt_characters_outside_the_vocabulary(unk, capsys):
    v = Vocab("chars", tuple(sorted(map(ord, "abcdef "))), unk)
    assert inputs.usable_prompt("bad cafe", v.encode, v.decode) == "bad cafe"
    assert inputs.usable_prompt("bad café!", v.encode, v.decode) == "bad caf"
    err = capsys.readouterr().err
    assert "outside the model's vocabulary" in err and "'é'" in err and "'!'" in err
    assert np.array_equal(
        v.encode("bad caf"), v.encode(inputs.usable_prompt("bad caf", v.encode, v.decode))
    )


def _tool(module: str, args: list[str], helpers, corpus) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        env=helpers.subprocess_env(corpus),
        cwd=helpers.repo,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "module,args,expected",
    [
        ("seqjax.sample", ["--temperature=nan"], ["--temperature=nan", "finite"]),
        ("seqjax.sample", ["--step=7"], ["--step=7", "available steps: 5, 10"]),
        ("seqjax.evaluate", ["--max_batches=-1"], ["--max_batches=-1"]),
    ],
)
def test_cli(module, args, expected, fake_workdir, helpers, corpus):
    proc = _tool(module, [f"--workdir={fake_workdir}", *args], helpers, corpus)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert "Traceback" not in out
    for text in expected:
        assert text in out, out[-3000:]


def test_cli_no_checkpoint(tmp_path, helpers, corpus):
    proc = _tool("seqjax.evaluate", [f"--workdir={tmp_path}"], helpers, corpus)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in out
    assert "not a seqjax training workdir" in out


def test_restore_falls_back_past_a_damaged_newest(fake_workdir, capsys):
    def restore_fn(step):
        if step == 10:
            raise ValueError("OUT_OF_RANGE: truncated file\nmore detail")
        return ("run", "state", step)

    assert cli_inputs.restore(restore_fn, str(fake_workdir), None) == ("run", "state", 5)
    err = capsys.readouterr().err
    assert "skipped checkpoint step 10: ValueError: OUT_OF_RANGE: truncated file" in err
    assert (fake_workdir / "checkpoints" / "10").exists()  # nothing moved by a reader
    msg = _input_error(cli_inputs.restore, restore_fn, str(fake_workdir), 10)  # no fallback
    assert "step 10: ValueError: OUT_OF_RANGE" in msg and "step 5" not in msg


def test_restore_with_every_checkpoint_damaged(fake_workdir):
    def restore_fn(step):
        raise KeyError(f"state {step}")

    msg = _input_error(cli_inputs.restore, restore_fn, str(fake_workdir), None)
    assert "no checkpoint" in msg and "step 10: KeyError" in msg and "step 5: KeyError" in msg
