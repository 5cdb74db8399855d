"""Issue 38, items 1, 2 and 6 end to end: a full disk and a damaged newest checkpoint end
in one sentence on stderr (library noise goes to ``<workdir>/seqjax.log``, which the
sentence names), the committed checkpoints survive, ``metrics.jsonl`` parses line by line
after the fault and after the resume, an unfinished save is gone, and the resumed run
reproduces the uninterrupted losses.

The full disk is a real 1.2 MB tmpfs where a user namespace can mount one
(``unshare -rm``), and a simulated ``ENOSPC`` in the metrics writer everywhere.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

# Real training jobs; the fast tests of the same faults: test_issue38_files, test_run_log.
pytestmark = pytest.mark.slow

NOISE = ("Traceback", "Event loop is closed", "RESOURCE_EXHAUSTED", "_SignalingThread",
         "Encountered error while reading", "Logging error")  # fmt: skip


def _rows(workdir) -> list[dict]:
    return [json.loads(x) for x in (Path(workdir) / "metrics.jsonl").read_text().splitlines()]


def _one_sentence(stderr: str, workdir) -> str:
    for noise in NOISE:
        assert noise not in stderr, stderr[-3000:]
    (line,) = [x for x in stderr.splitlines() if x.startswith("error:")]
    assert f"{workdir}/seqjax.log" in line
    return line


def _same(helpers, workdir, reference) -> None:
    for step, values in helpers.losses(workdir).items():
        assert all(v == reference[step] for v in values), step


def _can_mount_tmpfs(tmp_path) -> bool:
    if not shutil.which("unshare"):
        return False
    probe = tmp_path / "probe"
    probe.mkdir()
    cmd = ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {probe}"]
    return subprocess.run(cmd, capture_output=True).returncode == 0


def test_simulated_full_disk_then_resume(helpers, corpus, tmp_path):
    work = tmp_path / "work"
    env = {**helpers.subprocess_env(corpus), "SEQJAX_TEST_ENOSPC_AT_STEP": "9"}
    cmd = helpers.main_command(work, corpus, **{"train.checkpoint_every": 4})
    cmd[1:3] = [str(Path(__file__).with_name("_enospc_main.py"))]
    proc = subprocess.run(cmd, env=env, cwd=helpers.repo, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = _one_sentence(proc.stderr, work)
    assert "the disk is full" in line
    kept = int(line.split("newest complete checkpoint is step ")[1].split()[0])
    assert kept in (4, 8) and helpers.complete_steps(work)[-1] == kept  # (8: if it finished)
    assert [r["step"] for r in _rows(work)] == list(range(1, 9))  # no half line of step 9
    done = helpers.run_main(work, corpus, **{"train.checkpoint_every": 4})
    assert done.returncode == 0, done.stderr[-3000:]
    rows = _rows(work)  # parsable line by line after the resume too
    assert sorted({r["step"] for r in rows}) == list(range(1, 41))
    by_step = {}
    for r in rows:  # the steps run twice (after the kept checkpoint) have equal losses
        by_step.setdefault(r["step"], set()).add(r["train/loss"])
    assert all(len(v) == 1 for v in by_step.values())


def test_full_tmpfs_then_resume(helpers, corpus, tmp_path, reference_losses):
    if not _can_mount_tmpfs(tmp_path):
        pytest.skip("no tmpfs can be mounted here (the simulated ENOSPC test covers it)")
    mnt, work = tmp_path / "mnt", tmp_path / "mnt" / "work"
    mnt.mkdir()
    overrides = {"train.checkpoint_every": 2, "train.max_to_keep": 100}
    first, second = (subprocess.list2cmdline(helpers.main_command(work, corpus, **overrides)),) * 2
    script = tmp_path / "run.sh"
    script.write_text(
        f"mount -t tmpfs -o size=1200k tmpfs {mnt} || exit 99\n"
        f"{first} > {tmp_path}/1.out 2> {tmp_path}/1.err; echo $? > {tmp_path}/1.rc\n"
        f"cp -r {work} {tmp_path}/after_fault\n"
        f"mount -o remount,size=64m {mnt}\n"
        f"{second} > {tmp_path}/2.out 2> {tmp_path}/2.err; echo $? > {tmp_path}/2.rc\n"
        f"cp -r {work} {tmp_path}/after_resume\n"
    )
    subprocess.run(["unshare", "-rm", "sh", str(script)], env=helpers.subprocess_env(corpus),
                   cwd=helpers.repo, timeout=600, check=True)  # fmt: skip
    err1 = (tmp_path / "1.err").read_text()
    assert (tmp_path / "1.rc").read_text().strip() == "2", err1[-3000:]
    line = _one_sentence(err1, work)
    assert "the disk is full" in line
    kept = int(line.split("newest complete checkpoint is step ")[1].split()[0])
    after = tmp_path / "after_fault"
    assert kept in helpers.complete_steps(after) and kept >= 2
    _rows(after)  # parsable line by line after the fault
    assert (tmp_path / "2.rc").read_text().strip() == "0", (tmp_path / "2.err").read_text()
    resumed = tmp_path / "after_resume"
    assert helpers.partial_checkpoints(resumed) == []  # the unfinished save was removed
    assert sorted({r["step"] for r in _rows(resumed)}) == list(range(1, 41))
    _same(helpers, resumed, reference_losses)


def test_damaged_newest_checkpoint_resumes_quietly(helpers, corpus, tmp_path):
    every = {"train.checkpoint_every": 3}
    assert helpers.run_main(tmp_path, corpus, **every, **{"train.stop_after": 6}).returncode == 0
    files = [p for p in (tmp_path / "checkpoints" / "6" / "state").rglob("*") if p.is_file()]
    big = max(files, key=lambda p: p.stat().st_size)
    big.write_bytes(big.read_bytes()[: big.stat().st_size // 2])
    proc = helpers.run_main(tmp_path, corpus, **every, **{"train.stop_after": 9})
    assert proc.returncode == 0, proc.stderr[-3000:]
    for noise in NOISE:
        assert noise not in proc.stderr, proc.stderr[-3000:]
    assert "step 6" in proc.stderr and "damaged_checkpoints" in proc.stderr  # seqjax's warning
    log = (tmp_path / "seqjax.log").read_text()
    assert "step 6" in log and "does not restore" in log  # every log line is kept there
    assert helpers.complete_steps(tmp_path) == [3, 6, 9]
