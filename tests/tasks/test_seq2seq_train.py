"""Translation runs as users meet them: ``configs/translation.py:smoke`` on a slice of the
real software_l10n en-de file, in separate processes.

Resumed equals uninterrupted; 8 fake devices and 2 processes x 4 devices train like one
device (losses, validation/test loss, BLEU and chrF, the end-of-run translation); the
workdir translates with beam search and is evaluated with BLEU; bad translate flags end in
one sentence with exit status 2.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import numpy as np
import pytest

from tests.train.conftest import REPO, TEST_XLA_FLAGS, losses, subprocess_env

sys.path.insert(0, str(REPO))
from launch import local  # noqa: E402

CONFIG = REPO / "configs" / "translation.py"
PAIRS = 3000  # the first pairs of en-de.jsonl.gz: a small real corpus


@pytest.fixture(scope="module")
def mt(shared_data, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("mt")
    src = shared_data / "software_l10n" / "en-de.jsonl.gz"
    with gzip.open(src, "rt", encoding="utf-8") as f:
        lines = [next(f) for _ in range(PAIRS)]
    path = root / "en-de.small.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines(lines)
    return {"path": str(path), "data_dir": str(root / "tfds"), "cache": str(root / "cache")}


def _overrides(mt, **extra) -> dict:
    o = {
        "data.path": mt["path"],
        "data.data_dir": mt["data_dir"],
        "data.vocab_size": 400,
        "data.batch_size": 8,
        "data.max_source_len": 24,
        "data.max_target_len": 24,
        "data.heldout_fraction": 0.02,  # ~60 validation and ~60 test pairs
        "model.max_len": 24,
        "model.d_model": 32,
        "model.d_ff": 64,
        "model.num_heads": 2,
        "model.dropout_rate": 0.1,  # dropout on: resumed runs must draw the same masks
        "mesh.data": 1,
        "train.num_steps": 6,
        "optimizer.warmup_steps": 2,
        "train.log_every": 1,
        "train.eval_every": 3,
        "train.eval_max_batches": 2,
        "train.eval_batch_size": 8,
        "train.checkpoint_every": 0,
        "train.sample_prompt": "File not found",
        "eval.beam_size": 2,
    }
    o.update(extra)
    return o


def _cmd(workdir, mt, **extra) -> list[str]:
    cmd = [sys.executable, "-m", "seqjax.main", f"--config={CONFIG}:smoke", f"--workdir={workdir}"]
    return cmd + [f"--config.{k}={v}" for k, v in _overrides(mt, **extra).items()]


def _run(workdir, mt, devices: int = 1, **extra) -> subprocess.CompletedProcess:
    env = subprocess_env(mt)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices} {TEST_XLA_FLAGS}"
    proc = subprocess.run(_cmd(workdir, mt, **extra), env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def _evals(workdir) -> dict:
    out = {}
    for line in (workdir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        for k, v in rec.items():
            if k.startswith(("validation/", "test/")):
                out[(rec["step"], k)] = v
    return out


@pytest.fixture(scope="module")
def reference(mt, tmp_path_factory):
    """6 uninterrupted steps on one device, validation at step 3, test and a translation."""
    workdir = tmp_path_factory.mktemp("mt_reference")
    proc = _run(workdir, mt)
    return workdir, proc


def _same_run(workdir, reference_dir, rtol) -> None:
    got, want = losses(workdir), losses(reference_dir)
    assert sorted(got) == sorted(want) == list(range(1, 7))
    np.testing.assert_allclose([got[s][-1] for s in range(1, 7)],
                               [want[s][-1] for s in range(1, 7)], rtol=rtol)  # fmt: skip
    e_got, e_want = _evals(workdir), _evals(reference_dir)
    assert sorted(e_got) == sorted(e_want)
    for key, value in e_want.items():
        np.testing.assert_allclose(e_got[key], value, rtol=max(rtol, 1e-6), err_msg=str(key))


def test_result_has_bleu_chrf_signature_and_translation(reference):
    workdir, proc = reference
    result = json.loads((workdir / "result.json").read_text())
    test = result["test"]
    for key in ("loss", "nll", "perplexity", "accuracy", "bleu", "chrf"):
        assert np.isfinite(test[key]), key
    assert 0.0 <= test["bleu"] <= 100.0 and 0.0 <= test["chrf"] <= 100.0
    assert test["bleu_signature"].startswith("nrefs:1|") and "tok:13a" in test["bleu_signature"]
    assert test["loss"] > test["nll"]  # label smoothing 0.1 raises the minimised loss
    assert isinstance(result["sample"], str)
    assert "File not found\n=> " in proc.stdout
    assert (3, "validation/bleu") in _evals(workdir) and (6, "test/bleu") in _evals(workdir)


def test_resumed_equals_uninterrupted(mt, reference, tmp_path):
    _run(tmp_path, mt, **{"train.stop_after": 3})
    _run(tmp_path, mt)
    got = losses(tmp_path)
    assert all(len(v) == 1 for v in got.values())  # the second run starts at step 4
    _same_run(tmp_path, reference[0], rtol=0)


def test_eight_devices_equal_one(mt, reference, tmp_path):
    _run(tmp_path, mt, devices=8, **{"mesh.data": -1})
    _same_run(tmp_path, reference[0], rtol=2e-5)


def test_two_processes_equal_one(mt, reference, tmp_path):
    args = _cmd(tmp_path, mt, **{"mesh.data": -1})[3:]
    code = local.launch(2, 4, args, env=subprocess_env(mt), cwd=str(REPO), timeout_s=600)
    log = tmp_path / "process_1.log"
    assert code == 0, log.read_text()[-3000:] if log.exists() else code
    _same_run(tmp_path, reference[0], rtol=2e-5)
    want = json.loads((reference[0] / "result.json").read_text())
    got = json.loads((tmp_path / "result.json").read_text())
    assert got["sample"] == want["sample"]


def _tool(module, *args, mt):
    env = subprocess_env(mt)
    return subprocess.run([sys.executable, "-m", module, *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_translate_and_evaluate_from_the_workdir(mt, reference):
    workdir = reference[0]
    result = json.loads((workdir / "result.json").read_text())
    proc = _tool("seqjax.translate", f"--workdir={workdir}", "--source=File not found",
                 "--beam_size=2", mt=mt)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines() == [result["sample"].strip()] or (
        proc.stdout.strip() == result["sample"].strip()
    )
    proc = _tool("seqjax.evaluate", f"--workdir={workdir}", "--split=test",
                 "--bleu_by_length=0,4", mt=mt)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(out["bleu"], result["test"]["bleu"], rtol=1e-6)
    assert out["bleu_signature"] == result["test"]["bleu_signature"]
    # BLEU per source-length bucket (words): [0, 4) and [4, inf), every test pair in one.
    buckets = out["bleu_by_length"]
    assert [(b["lo"], b["hi"]) for b in buckets] == [(0, 4), (4, None)]
    assert all(b["count"] > 0 and 0.0 <= b["bleu"] <= 100.0 for b in buckets), buckets
    assert sum(b["count"] for b in buckets) == len(_test_sources(mt))


def _test_sources(mt) -> list[str]:
    """The English strings of the test split (``seqjax.data.translation.heldout_split``)."""
    from seqjax.data.translation import heldout_split

    with gzip.open(mt["path"], "rt", encoding="utf-8") as f:
        english = [json.loads(line)["en"] for line in f]
    return [e for e in english if heldout_split(e, 0.02) == "test"]


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--source=x", "--beam_size=0"], ["--beam_size", ">= 1"]),
        (["--source=x", "--alpha=-1"], ["--alpha", ">= 0"]),
        (["--source=" + "word " * 60], ["max_source_len=24"]),
        ([], ["--source", "--input_file"]),
    ],
)
def test_translate_bad_input_is_one_sentence(mt, reference, flags, words):
    proc = _tool("seqjax.translate", f"--workdir={reference[0]}", *flags, mt=mt)
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "Traceback" not in proc.stderr
    for w in words:
        assert w in last, last


def _bad_file(tmp_path, kind: str) -> str:
    path = tmp_path / f"{kind}.jsonl"
    if kind == "foreign":
        path.write_text("this is not JSON\n")
    elif kind == "unknown_lang":
        path.write_text('{"en": "File", "de": "Datei"}\n' * 50)
    return str(path)


@pytest.mark.parametrize(
    "kind, extra, words",
    [
        ("missing", {}, ["config.data.path", "missing.jsonl"]),
        ("foreign", {}, ["foreign.jsonl", "line 1"]),
        ("unknown_lang", {"data.target_lang": "xx"}, ["xx", "de"]),
        ("ok", {"data.max_source_len": 64}, ["data.max_source_len", "model.max_len=24"]),
        ("ok", {"train.label_smoothing": 1.5}, ["train.label_smoothing", "[0, 1)"]),
        ("ok", {"eval.beam_size": 0}, ["eval.beam_size"]),
        ("ok", {"model.decoder_attention": "linformer"}, ["model.decoder_attention", "causal"]),
    ],
)
def test_bad_translation_config_is_one_sentence(mt, tmp_path, kind, extra, words):
    path = mt["path"] if kind == "ok" else _bad_file(tmp_path, kind)
    proc = subprocess.run(_cmd(tmp_path / "w", mt, **{"data.path": path, **extra}),
                          env=subprocess_env(mt), cwd=REPO, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    text = proc.stderr[proc.stderr.rindex("error") :]
    for w in words:
        assert w in text, text
    assert not (tmp_path / "w" / "checkpoints").exists()


def test_resume_with_another_vocabulary_is_refused(mt, reference, tmp_path):
    import shutil

    work = tmp_path / "copy"
    shutil.copytree(reference[0], work)
    before = sorted(p.name for p in (work / "checkpoints").iterdir())
    proc = subprocess.run(_cmd(work, mt, **{"data.vocab_size": 500}), env=subprocess_env(mt),
                          cwd=REPO, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "vocab_size" in proc.stderr and "Traceback" not in proc.stderr
    assert sorted(p.name for p in (work / "checkpoints").iterdir()) == before
