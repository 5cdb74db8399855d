"""Launchers check before they ship: the config and every override validated here, stated
defaults, quoted paths, one-sentence errors, library chatter off stdout, a line per run."""

import io
import json
import shlex
import subprocess
import sys

import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO))

from launch import common, local, slurm, sweep, tpu_vm  # noqa: E402

CONFIG = "configs/char_lm.py:smoke"


@pytest.fixture
def fake_sbatch(tmp_path, monkeypatch):
    """An ``sbatch`` on PATH that records its calls (the file lists its arguments)."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    calls = tmp_path / "sbatch_calls.txt"
    (bin_dir / "sbatch").write_text(f'#!/bin/bash\necho "$@" >> {calls}\n')
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return calls


def _no_traceback(err: str) -> None:
    assert "Traceback" not in err
    assert err.strip().startswith("error:")


@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--config", "configs/no_such.py"], "configs/no_such.py does not exist"),
        (["--config", CONFIG, "--set", "model.num_layerz=2"], "has no field 'num_layerz'"),
        (["--config", CONFIG, "--set", "model.num_layers=two"], "num_layers=two"),
        (["--config", CONFIG, "--set", "model.attention=nope"], "config.model.attention"),
        (["--config", CONFIG, "--set", "train.num_steps"], "is not FIELD=VALUE"),
    ],
)
def test_slurm_refuses_bad_config_before_writing(tmp_path, capsys, fake_sbatch, extra, needle):
    workdir = tmp_path / "run"
    code = slurm.main(["--workdir", str(workdir), "--gpus-per-node=4", *extra])
    err = capsys.readouterr().err
    assert code == 2 and needle in err
    _no_traceback(err)
    assert not workdir.exists() and not fake_sbatch.exists()  # nothing written or queued


def test_slurm_batch_size_checked_for_the_allocation(tmp_path, capsys):
    # 3 nodes x 4 GPUs = 12 devices: the smoke config's batch of 16 does not divide.
    argv = ["--config", CONFIG, "--workdir", str(tmp_path / "r"), "--nodes=3", "--dry-run"]
    assert slurm.main(argv + ["--gpus-per-node=4"]) == 2
    assert "config.data.batch_size=16" in capsys.readouterr().err


def test_slurm_without_sbatch_is_one_sentence(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    workdir = tmp_path / "run"
    assert slurm.main(["--config", CONFIG, "--workdir", str(workdir), "--gpus-per-node=4"]) == 2
    err = capsys.readouterr().err
    assert "sbatch is not on PATH" in err and len(err.strip().splitlines()) == 1
    _no_traceback(err)
    assert not workdir.exists()


def test_slurm_defaults_stated_in_help_and_plan(tmp_path, capsys):
    with pytest.raises(SystemExit):
        slurm.main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for needle in ("--gpus-per-node", "(default: 8)", "(default: 24:00:00)", "--mem"):
        assert needle in help_text, needle
    assert "cluster's default" in help_text
    assert slurm.main(["--config", CONFIG, "--workdir", str(tmp_path), "--dry-run"]) == 0
    captured = capsys.readouterr()
    plan = captured.err
    for needle in (
        "GPUs per node 8 (default)",
        "CPUs per task 8 (default)",
        "time 24:00:00 (default)",
        "memory per node the cluster's default",
        "nodes 1 (default)",
    ):
        assert needle in plan, needle
    assert captured.out.startswith("#!/bin/bash") and "[slurm] job" not in captured.out
    argv = ["--config", CONFIG, "--workdir", str(tmp_path), "--dry-run", "--mem=64G"]
    assert slurm.main(argv + ["--time=1:00:00", "--gpus-per-node=4"]) == 0
    captured = capsys.readouterr()
    assert "#SBATCH --mem=64G" in captured.out
    assert "time 1:00:00," in captured.err and "GPUs per node 4," in captured.err


def _sbatch_options(script: str) -> dict:
    """The ``#SBATCH`` options as sbatch reads them (split at spaces outside quotes)."""
    out = {}
    for line in script.splitlines():
        if line.startswith("#SBATCH "):
            for word in shlex.split(line[len("#SBATCH ") :]):
                key, _, value = word.partition("=")
                out[key] = value
    return out


def test_slurm_workdir_with_a_space(tmp_path, capsys):
    """The generated script parses (bash -n), #SBATCH --output keeps the whole path, and
    running it (fake srun, fake job) hands the job the exact workdir and checks the exact
    result.json for the requeue."""
    workdir = tmp_path / "my runs" / "a b"
    repo = tmp_path / "check out"
    repo.mkdir()
    argv = ["--config", CONFIG, "--workdir", str(workdir), "--gpus-per-node=4", "--dry-run"]
    argv += ["--time=0:04:00", f"--repo={repo}", "--setup=true", "--job-name=my job"]
    assert slurm.main(argv) == 0
    script = capsys.readouterr().out
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
    options = _sbatch_options(script)
    assert options["--output"] == f"{workdir}/slurm-%j.out"
    assert options["--job-name"] == "my job"
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text('#!/bin/bash\nshift\nexec "$@"\n')
    (fake / "scontrol").write_text(f'#!/bin/bash\necho "$@" >> "{tmp_path}/scontrol.log"\n')
    (fake / "python").write_text(
        "#!/bin/bash\n"
        f'if [ "$1" = "-m" ]; then printf "%s\\n" "$@" > "{tmp_path}/argv.txt"; exit 0; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    for f in fake.iterdir():
        f.chmod(0o755)
    env = {"PATH": f"{fake}:/usr/bin:/bin", "SLURM_JOB_ID": "5", "PYTHONPATH": str(REPO)}
    assert subprocess.run(["bash", str(path)], env=env, timeout=60).returncode == 0
    assert f"--workdir={workdir}" in (tmp_path / "argv.txt").read_text().splitlines()
    assert (tmp_path / "scontrol.log").read_text().split() == ["requeue", "5"]


def test_sbatch_quote_refuses_what_a_line_cannot_carry():
    assert slurm.sbatch_quote("--log-dir", "/a b/x") == '"/a b/x"'
    assert slurm.sbatch_quote("--partition", "gpu") == "gpu"
    with pytest.raises(common.LaunchError, match="--log-dir"):
        slurm.sbatch_quote("--log-dir", '/a"b')


def test_sweep_checks_every_run_before_writing(tmp_path, capsys, fake_sbatch):
    workdir = tmp_path / "sweep"
    for extra in (["--set", "model.num_layerz=1"], ["--set", "optimizer.learning_rate=fast"]):
        argv = ["--config", CONFIG, "--workdir", str(workdir), "--mode=slurm", *extra]
        assert sweep.main(argv + ["--gpus-per-node=4"]) == 2
        err = capsys.readouterr().err
        assert "sweep run" in err
        _no_traceback(err)
    assert not workdir.exists() and not fake_sbatch.exists()


def test_sweep_slurm_without_sbatch(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    workdir = tmp_path / "sweep"
    argv = ["--config", CONFIG, "--workdir", str(workdir), "--mode=slurm", "--gpus-per-node=4"]
    assert sweep.main(argv) == 2
    assert "sbatch is not on PATH" in capsys.readouterr().err
    assert not workdir.exists()


def test_sweep_prints_a_line_per_run(tmp_path, capsys):
    writes = (
        "import json, pathlib, sys; d = pathlib.Path(sys.argv[1]); d.mkdir(parents=True, "
        "exist_ok=True); (d / 'result.json').write_text(json.dumps({'step': 60, "
        "'test': {'bits_per_char': 2.5, 'count': 100.0}}))"
    )
    runs = [
        {"name": "ok_run", "workdir": str(tmp_path / "a")},
        {"name": "bad_run", "workdir": str(tmp_path / "b")},
    ]
    runs[0]["command"] = [sys.executable, "-c", writes, runs[0]["workdir"]]
    runs[1]["command"] = [sys.executable, "-c", "import sys; sys.exit(3)"]
    assert sweep.run_local(runs, parallel=1) == 1
    captured = capsys.readouterr()
    assert "[sweep] 1/2 ok_run: started" in captured.err
    assert "[sweep] 2/2 bad_run: started" in captured.err
    out = captured.out.splitlines()
    ok = next(line for line in out if "ok_run" in line)
    assert "ok in " in ok and "test bits_per_char=2.5 (step 60)" in ok and "count" not in ok
    bad = next(line for line in out if "bad_run" in line)
    assert "FAILED (exit 3)" in bad and "sweep.log" in bad


def test_run_result_falls_back_to_the_last_validation_with_its_step(tmp_path):
    lines = [{"step": 30, "validation/loss": 1.5}, {"step": 60, "train/loss": 1.0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert sweep.run_result(str(tmp_path)) == "validation/loss=1.5 (step 30)"


def _tpu(*extra):
    return tpu_vm.main(["--tpu", "pod", "--zone", "z", "--project", "p", *extra])


def test_tpu_vm_multi_host_needs_a_bucket(capsys):
    base = ["--config", CONFIG, "--workdir", "/local/run", "--dry-run"]
    assert _tpu(*base, "--hosts=4") == 2
    captured = capsys.readouterr()
    assert "not a bucket" in captured.err and "4 hosts" in captured.err
    assert captured.out == ""  # no command printed, nothing copied
    assert _tpu(*base) == 2  # size unknown: a local workdir is refused too
    assert "--hosts 1" in capsys.readouterr().err
    assert _tpu("--config", CONFIG, "--workdir", "gs://b/r", "--hosts=4", "--dry-run") == 0


def test_tpu_vm_validates_overrides_before_copying(capsys):
    argv = ["--config", CONFIG, "--workdir", "gs://b/r", "--dry-run", "--set", "model.x=1"]
    assert _tpu(*argv) == 2
    captured = capsys.readouterr()
    assert "has no field 'x'" in captured.err and captured.out == ""


def test_tpu_vm_warns_about_untracked_package_files(tmp_path, capsys, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "seqjax" / "attention").mkdir(parents=True)
    (repo / "seqjax" / "attention" / "mine.py").write_text("x = 1\n")
    (repo / "notes.txt").write_text("not in the package\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    assert common.untracked_package_files(repo) == ["seqjax/attention/mine.py"]
    monkeypatch.setattr(common, "untracked_package_files", lambda: ["seqjax/attention/mine.py"])
    monkeypatch.setattr(tpu_vm, "uncommitted_changes", lambda: [])
    assert _tpu("--config", CONFIG, "--workdir", "gs://b/r", "--dry-run") == 0
    err = capsys.readouterr().err
    assert "untracked files under seqjax/ are NOT shipped" in err and "mine.py" in err


def test_local_routes_library_lines_to_stderr():
    out, err = io.StringIO(), io.StringIO()
    stream = io.StringIO("[Gloo] Rank 0 is connected to 1 peer ranks.\ntest: loss=1.0\n")
    local.route_output(stream, out, err)
    assert out.getvalue() == "test: loss=1.0\n" and err.getvalue().startswith("[Gloo]")


def test_local_two_processes_stdout_is_results_only(tmp_path, capsys):
    """Two real JAX processes joined by gloo: its connection line reaches stderr only."""
    code = (
        "from seqjax.train import sharding; sharding.maybe_initialize_distributed(); "
        "import jax.numpy as jnp; from jax.experimental import multihost_utils; "
        "x = multihost_utils.process_allgather(jnp.ones(2)); print('RESULT', x.shape)"
    )
    env = {**__import__("os").environ, "PYTHONPATH": str(REPO)}
    args = ["-c", code, f"--workdir={tmp_path}"]
    assert local.launch(2, 1, args, module="tests.launch._exec", env=env, cwd=str(REPO)) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == "RESULT (2, 2)"
    assert "[Gloo]" in captured.err


def test_local_checks_the_job_config_first(tmp_path, capsys):
    argv = ["--", f"--config={CONFIG}", f"--workdir={tmp_path / 'w'}", "--config.model.nope=1"]
    assert local.main(argv) == 2
    err = capsys.readouterr().err
    assert "has no field 'nope'" in err
    _no_traceback(err)
    assert not (tmp_path / "w").exists()


def test_slurm_and_sweep_submit_with_sbatch(tmp_path, capsys, fake_sbatch):
    """With sbatch on PATH: the script is written into the (spaced) workdir and submitted;
    a sweep submits one script per run."""
    workdir = tmp_path / "my run"
    argv = ["--config", CONFIG, "--workdir", str(workdir), "--gpus-per-node=4"]
    assert slurm.main(argv) == 0
    assert fake_sbatch.read_text().strip() == str(workdir / "job.sbatch")
    assert (workdir / "job.sbatch").read_text().startswith("#!/bin/bash")
    fake_sbatch.unlink()
    capsys.readouterr()
    base = tmp_path / "sweep"
    argv = ["--config", CONFIG, "--workdir", str(base), "--mode=slurm", "--gpus-per-node=4"]
    assert sweep.main(argv) == 0
    runs = json.loads((base / "sweep.json").read_text())
    calls = fake_sbatch.read_text().splitlines()
    assert calls == [str(base / r["name"] / "job.sbatch") for r in runs]
    assert capsys.readouterr().err.count("[slurm] job ") == len(runs)  # a plan per run


def test_sweep_says_a_run_is_still_running(tmp_path, capsys):
    wd = tmp_path / "slow"
    wd.mkdir()
    (wd / "metrics.jsonl").write_text(json.dumps({"step": 20, "train/loss": 2.0}) + "\n")
    run = {"name": "slow", "workdir": str(wd)}
    run["command"] = [sys.executable, "-c", "import time; time.sleep(1.5)"]
    assert sweep.run_local([run], parallel=1, heartbeat_s=0.5) == 0
    beats = [x for x in capsys.readouterr().err.splitlines() if "running for" in x]
    assert beats and "[sweep] 1/1 slow: running for" in beats[0] and beats[0].endswith("step 20")


def test_interrupted_sweep_stops_its_runs(tmp_path, capsys, monkeypatch):
    def interrupt(workdir):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "_last_step", interrupt)
    run = {"name": "long", "workdir": str(tmp_path / "long")}
    run["command"] = [sys.executable, "-c", "import time; time.sleep(60)"]
    t0 = __import__("time").monotonic()
    with pytest.raises(KeyboardInterrupt):
        sweep.run_local([run], parallel=1, heartbeat_s=0.3)
    assert __import__("time").monotonic() - t0 < 30  # the child was stopped, not awaited
    assert "long: stopped (SIGTERM)" in capsys.readouterr().err
