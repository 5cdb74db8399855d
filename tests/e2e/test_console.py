"""The console a user sees: ``--help`` of every console script lists its flags, library
INFO lines are filtered out, and logs that are not a terminal get plain progress lines."""

import io
import logging
import os
import re
import struct
import subprocess
import sys

import pytest
import tomllib

from seqjax import console
from seqjax.configs import common
from seqjax.train import metrics
from tests.conftest import REPO

SCRIPTS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
FLAGS = {
    "seqjax-train": ["--config", "--workdir", "--import"],
    "seqjax-eval": ["--workdir", "--split", "--max_batches", "--tgt_len", "--mem_len", "--import"],
    "seqjax-sample": [
        "--workdir",
        "--prompt",
        "--length",
        "--temperature",
        "--top_k",
        "--top_p",
        "--seed",
        "--import",
    ],  # fmt: skip
    "seqjax-translate": ["--workdir", "--source", "--input_file", "--beam_size", "--import"],
    "seqjax-icl": ["--model", "--task", "--kind", "--num_fewshot", "--train", "--template"],
}


@pytest.mark.parametrize("name", sorted(FLAGS))
def test_console_script_help_lists_its_flags(name, tmp_path):
    # The wrapper pip writes for a [project.scripts] entry point.
    module, func = SCRIPTS[name].split(":")
    script = tmp_path / name
    script.write_text(f"import sys\nfrom {module} import {func}\nsys.exit({func}())\n")
    proc = subprocess.run(
        [sys.executable, str(script), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"},
    )
    # absl's --help exits with status 1 after printing the usage (HelpFlag.parse).
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    for flag in FLAGS[name]:
        assert f"  {flag}:" in proc.stdout, (flag, proc.stdout)
    assert (
        proc.stdout.lstrip().splitlines()[0]
        == sys.modules.get(module, __import__(module, fromlist=["_"])).__doc__.splitlines()[0]
    )


def _record(path: str, level: int, msg: str = "m") -> logging.LogRecord:
    return logging.LogRecord("absl", level, path, 1, msg, None, None)


def test_quiet_libraries_keeps_seqjax_info_and_library_warnings():
    f = console.QuietLibraries()
    own = str(REPO / "seqjax" / "train" / "loop.py")
    lib = "/venv/lib/python3.11/site-packages/orbax/checkpoint/checkpoint_manager.py"
    under_seqjax_checkout = "/home/u/seqjax/.venv/lib/site-packages/jax/_src/xla_bridge.py"
    assert f.filter(_record(own, logging.INFO))
    assert not f.filter(_record(lib, logging.INFO))
    assert not f.filter(_record(under_seqjax_checkout, logging.INFO))
    assert f.filter(_record(lib, logging.WARNING))
    assert not f.filter(_record(lib, logging.WARNING, "Using custom data configuration: x"))


@pytest.mark.parametrize("unit", ["tok", "ex"])
def test_plain_progress_lines_when_not_a_terminal(unit):
    out = io.StringIO()  # not a TTY
    p = metrics.Progress(4, 0, enabled=True, tokens_per_step=8, unit=unit, stream=out)
    assert p.plain
    for s in range(1, 5):
        p.update(s, 2.0 / s)
    p.write("step 4: validation loss=1.0")
    p.close()
    text = out.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert lines[0].startswith("step 1/4: loss=2.0000 ") and f" {unit}/s eta " in lines[0]
    assert lines[-2].startswith("step 4/4: loss=0.5000 ") and lines[-2].endswith("eta 0:00:00")
    assert lines[-1] == "step 4: validation loss=1.0"
    assert len(lines) == 3  # periodic (30 s): the first and the last step only


def test_progress_disabled_prints_nothing():
    out = io.StringIO()
    p = metrics.Progress(2, 0, enabled=False, tokens_per_step=1, stream=out)
    p.update(1, 1.0)
    p.write("x")
    p.close()
    assert out.getvalue() == ""


def test_shipped_configs_reachable_as_package_modules(tmp_path, monkeypatch):
    """``--config seqjax.configs.<name>[:variant]`` names the same files as ``configs/``
    (the wheel ships them as the ``seqjax.configs`` package), from any directory."""
    import importlib

    from seqjax.train import paths

    monkeypatch.chdir(tmp_path)  # no checkout here
    names = sorted(p.stem for p in (REPO / "configs").glob("*.py") if p.stem[0].isalpha())
    names.remove("common")  # shared helpers of the configs, not a job config
    assert names
    for name in names:
        spec = paths.config_file(f"seqjax.configs.{name}:smoke")
        file, _, variant = spec.partition(":")
        assert variant == "smoke"
        assert open(file).read() == (REPO / "configs" / f"{name}.py").read_text()
        assert callable(importlib.import_module(f"seqjax.configs.{name}").get_config)
    argv = paths.resolve_config_flag(["seqjax-train", "--config", "seqjax.configs.char_lm"])
    assert argv[2].endswith("char_lm.py") and argv[2].startswith("/")
    assert paths.config_file("configs/char_lm.py:smoke") == "configs/char_lm.py:smoke"


# --- what a user sees of a whole run: the redirected files and a terminal --------------------

_train = common.load_file(REPO / "tests" / "train" / "conftest.py", "seqjax_tests_train_conftest")
corpus = _train.corpus  # the tiny training corpus (session fixture)
RUN = {"train.num_steps": 20, "train.eval_every": 10, "train.eval_max_batches": 2,
       "train.final_eval": True, "train.sample_length": 12, "train.log_every": 5}  # fmt: skip


def _events(workdir) -> list:
    """Every TensorBoard event of a workdir (TFRecord framing: length, crc, data, crc)."""
    from tensorboardX.proto import event_pb2

    out = []
    for path in sorted((workdir / "tensorboard").glob("events.out.tfevents*")):
        data, i = path.read_bytes(), 0
        while i < len(data):
            (n,) = struct.unpack("<Q", data[i : i + 8])
            out.append(event_pb2.Event.FromString(data[i + 12 : i + 12 + n]))
            i += 12 + n + 4
    return out


def _values(workdir) -> list[tuple[int, str, str, object]]:
    """``(step, tag, plugin, value)`` of every summary value."""
    rows = []
    for e in _events(workdir):
        for v in e.summary.value:
            plugin = v.metadata.plugin_data.plugin_name
            value = v.simple_value if v.HasField("simple_value") else v.tensor.string_val
            rows.append((e.step, v.tag, plugin or "scalars", value))
    return rows


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, corpus):
    """A tiny run with validation, a sample and the test split, its stdout and stderr
    redirected to files (as in a batch job), then the same command again."""
    work = tmp_path_factory.mktemp("console") / "run"
    cmd = _train.main_command(work, corpus, **RUN)
    env = _train.subprocess_env(corpus)
    runs = []
    for _ in range(2):
        out, err = work.parent / f"out{len(runs)}.txt", work.parent / f"err{len(runs)}.txt"
        with open(out, "w") as fo, open(err, "w") as fe:
            rc = subprocess.run(cmd, env=env, cwd=REPO, stdout=fo, stderr=fe, timeout=300)
        runs.append((rc.returncode, out.read_text(), err.read_text()))
    return work, runs


def test_a_redirected_run_reads_header_progress_results(finished_run):
    work, [(rc, out, err), _] = finished_run
    assert rc == 0, err[-3000:]
    # stdout: the results only, the test line once, counts as integers.
    tests = [line for line in out.splitlines() if line.startswith("test (")]
    assert len(tests) == 1 and re.search(r"count=\d+(,|$)", tests[0]), out
    assert "Downloading and preparing" not in out and "I1" not in out
    assert out.splitlines()[1] == "sample:"
    # stderr: the header once, naming what a reader needs; no per-parameter table.
    assert err.count("seqjax run\n") == 1
    for field, pattern in [("config", r"\S*configs/char_lm\.py:smoke( \+ [\w.]+=\S*)+$"),
                           ("task", r"lm \(seqjax\.tasks\.lm\)"),
                           ("attention", r"dense\(implementation=auto -> reference\) x 2 layers"),
                           ("model", r"[\d,]+ parameters"),
                           ("data", r"text_file, .*train [\d,]+, validation [\d,]+, test [\d,]+"),
                           ("steps", r"20 \(from scratch\)"), ("mesh", r"data=1 x fsdp=1"),
                           ("workdir", re.escape(str(work)))]:  # fmt: skip
        assert re.search(rf"^  {field} +.*{pattern}", err, re.M), (field, err)
    assert "encoder/block_0/attn/query/kernel" not in err
    assert "encoder/block_0/attn/query/kernel" in (work / "sharding.txt").read_text()
    assert "per-parameter shardings in" in err and "test split at step" not in err
    assert re.search(r"^step 10: validation .*count=\d+,", err, re.M)
    assert "count=" not in err.replace(", count=", "").replace("validation loss", "")


def test_rerunning_a_finished_run_writes_no_duplicate_points(finished_run):
    work, [_, (rc, out, err)] = finished_run
    assert rc == 0, err[-3000:]
    first = finished_run[1][0][1].splitlines()[0]
    assert out.splitlines() == [first]  # the recorded result, not a new evaluation
    assert "already finished" in err
    test_lines = [m for m in metrics.read_metrics(work) if "test/loss" in m]
    assert len(test_lines) == 1
    test_points = [r for r in _values(work) if r[1] == "test/loss"]
    assert len(test_points) == 1


def test_tensorboard_has_config_hparams_samples_and_no_bookkeeping_metrics(finished_run):
    work, _ = finished_run
    rows = _values(work)
    tags = {tag for _, tag, plugin, _ in rows if plugin == "scalars"}
    assert {"train/loss", "validation/loss", "test/loss"} <= tags
    assert not {t for t in tags if t.endswith(("/count", "/weight_sum"))} - {
        t for t in tags if t.startswith("bookkeeping/")
    }
    assert "bookkeeping/test/count" in tags and "test/count" not in tags
    texts = {(step, tag) for step, tag, plugin, _ in rows if plugin == "text"}
    assert any(tag.startswith("config") for _, tag in texts)
    assert {step for step, tag in texts if tag.startswith("sample")} == {10, 20}
    config_text = next(v for _, tag, p, v in rows if p == "text" and tag.startswith("config"))
    assert b'"num_steps": 20' in b"".join(config_text)
    assert any(plugin == "hparams" for _, _, plugin, _ in rows)


@pytest.mark.slow
def test_log_lines_do_not_break_the_bar_in_a_terminal(tmp_path, corpus):
    """In a pseudo-terminal the progress is a tqdm bar; a log line printed while it is
    shown (the checkpoint save at step 10) starts on a line of its own."""
    import fcntl
    import pty
    import termios

    cmd = _train.main_command(tmp_path / "run", corpus, **{"train.num_steps": 20,
                              "train.checkpoint_every": 10})  # fmt: skip
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))  # 120 columns
    proc = subprocess.Popen(cmd, env=_train.subprocess_env(corpus), cwd=REPO, stdin=slave,
                            stdout=slave, stderr=slave)  # fmt: skip
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=300) == 0
    text = b"".join(chunks).decode(errors="replace")
    assert "train:" in text and "|" in text  # a bar, not plain lines
    saves = [line for line in text.split("\n") if "checkpoint: saving step 10" in line]
    assert saves, text[-3000:]
    for line in saves:
        shown = line.rstrip("\r").split("\r")[-1]  # what the terminal shows after carriage returns
        assert shown.lstrip().startswith("I"), repr(line)  # the log line, no bar before it
