"""Launchers in dry-run: the exact commands and scripts they would run."""

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO))

from launch import collect, common, local, slurm, sweep, tpu_vm  # noqa: E402


def test_tpu_vm_dry_run_prints_commands_for_all_workers(capsys):
    assert (
        tpu_vm.main(
            [
                "--tpu",
                "pod",
                "--zone",
                "z1",
                "--project",
                "p1",
                "--config",
                "configs/char_lm.py",
                "--workdir",
                "gs://b/run",
                "--set",
                "train.num_steps=700",
                "--dry-run",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 4 and lines[0].startswith("+ git ")
    assert all("--worker=all" in line and "--zone=z1" in line for line in lines[1:])
    assert "scp" in lines[1] and "pip install" in lines[2] and "'.[tpu]'" in lines[2]
    assert "-m seqjax.main --config=configs/char_lm.py --workdir=gs://b/run" in lines[3]
    assert "--config.train.num_steps=700" in lines[3]


@pytest.mark.parametrize("per_node,tasks", [(False, 4), (True, 1)])
def test_slurm_script(capsys, per_node, tasks):
    argv = [
        "--config",
        "configs/char_lm.py",
        "--workdir",
        "/scratch/r",
        "--nodes",
        "2",
        "--gpus-per-node",
        "4",
        "--partition",
        "gpu",
        "--dry-run",
    ]
    assert slurm.main(argv + (["--per-node"] if per_node else [])) == 0
    script = capsys.readouterr().out
    assert "#SBATCH --nodes=2" in script
    assert f"#SBATCH --ntasks-per-node={tasks}" in script
    assert "#SBATCH --requeue" in script and "#SBATCH --signal=TERM@120" in script
    assert "#SBATCH --partition=gpu" in script
    assert "srun --kill-on-bad-exit=1 python -m seqjax.main" in script
    assert "--workdir=/scratch/r" in script


def test_sweep_plan_and_collect(tmp_path, capsys):
    runs = sweep.plan("configs/char_lm.py:smoke", str(tmp_path), {"train.num_steps": 5})
    points = common.sweep_points("configs/char_lm.py")
    assert len(runs) == len(points) >= 2
    assert len({r["workdir"] for r in runs}) == len(runs)  # one workdir per run
    for run, point in zip(runs, points):
        for key, value in point.items():
            assert f"--{key}={value}" in run["command"]
        assert "--config.train.num_steps=5" in run["command"]
    # Collect: fake metrics for two runs.
    for i, run in enumerate(runs[:2]):
        wd = tmp_path / run["name"]
        wd.mkdir()
        lines = [{"step": s, "validation/bits_per_char": 3.0 - s / 10 - i} for s in (10, 20)]
        (wd / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
    rows, curves = collect.collect(str(tmp_path), "validation/bits_per_char")
    assert [r["run"] for r in rows] == sorted(r["name"] for r in runs[:2])
    best = {r["run"]: r["best validation/bits_per_char"] for r in rows}
    assert best == {runs[0]["name"]: pytest.approx(1.0), runs[1]["name"]: pytest.approx(0.0)}
    assert collect.main(["--workdir", str(tmp_path)]) == 0
    assert (tmp_path / "summary.csv").exists() and (tmp_path / "summary.png").exists()


def test_local_launcher_environment_and_fail_fast(tmp_path):
    env = local.process_env(1, 2, 4, 1234)
    assert env["JAX_COORDINATOR_ADDRESS"] == "127.0.0.1:1234"
    assert env["JAX_PROCESS_ID"] == "1" and env["JAX_NUM_PROCESSES"] == "2"
    assert "--xla_force_host_platform_device_count=4" in env["XLA_FLAGS"]
    # The device count replaces a given one; other XLA flags of the caller are kept.
    base = {
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8 --xla_cpu_enable_fast_math=false"
    }
    flags = local.process_env(0, 2, 4, 1234, base=base)["XLA_FLAGS"].split()
    assert flags == ["--xla_force_host_platform_device_count=4", "--xla_cpu_enable_fast_math=false"]
    # A failing process stops the others and its status is returned.
    code = local.launch(
        2,
        1,
        [
            "-c",
            "import os,sys,time; "
            "sys.exit(3) if os.environ['JAX_PROCESS_ID']=='1' "
            "else time.sleep(60)",
            f"--workdir={tmp_path}",
        ],
        module="tests.launch._exec",
    )
    assert code == 3


def _slurm_script(capsys, *extra):
    argv = ["--config", "configs/char_lm.py", "--workdir", "/scratch/r", "--dry-run", *extra]
    assert slurm.main(argv) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("per_node,expected", [(False, ""), (True, "0,1,2,3")])
def test_slurm_task_devices_and_requeue_at_time_limit(capsys, tmp_path, per_node, expected):
    """Runs the generated script with fake srun/scontrol and a fake job: the devices each
    task gets, and the requeue only when the job stopped at the time limit unfinished."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text('#!/bin/bash\nshift\nexport SLURM_LOCALID=3\nexec "$@"\n')
    (fake / "scontrol").write_text(f'#!/bin/bash\necho "$@" >> {tmp_path}/scontrol.log\n')
    # "python -m seqjax.main ...": records its devices and exits 0 (as after a SIGTERM save);
    # anything else (the script's result.json check) is the real Python.
    (fake / "python").write_text(
        "#!/bin/bash\n"
        'if [ "$1" = "-m" ]; then\n'
        f'  echo "${{JAX_LOCAL_DEVICE_IDS:-}} $SLURM_LOCALID" > {tmp_path}/devices.txt; exit 0\n'
        "fi\n"
        f'exec {sys.executable} "$@"\n'
    )
    for f in fake.iterdir():
        f.chmod(0o755)
    workdir = tmp_path / "run"
    workdir.mkdir()
    env = {"PATH": f"{fake}:/usr/bin:/bin", "SLURM_JOB_ID": "77", "PYTHONPATH": str(REPO)}

    def run(time_limit):
        flags = [f"--workdir={workdir}", f"--time={time_limit}", "--gpus-per-node=4"]
        flags += [f"--repo={tmp_path}", "--setup=true"] + (["--per-node"] if per_node else [])
        script = _slurm_script(capsys, *flags)
        assert f"--ntasks-per-node={1 if per_node else 4}" in script
        (tmp_path / "job.sbatch").write_text(script)
        proc = subprocess.run(["bash", str(tmp_path / "job.sbatch")], env=env, timeout=60)
        assert proc.returncode == 0
        log = tmp_path / "scontrol.log"
        out = log.read_text().split() if log.exists() else []
        log.unlink(missing_ok=True)
        return out

    # Per node: all 4 GPUs; per GPU: unset, so JAX takes [SLURM_LOCALID].
    assert run("1:00:00") == []  # ended long before the limit: done or failed, not requeued
    assert (tmp_path / "devices.txt").read_text().split() == (expected + " 3").split()
    assert run("0:04:00") == ["requeue", "77"]  # ended at the limit, unfinished
    (workdir / "result.json").write_text("{}")
    assert run("0:04:00") == []  # ended at the limit, but finished


def test_slurm_time_limit_parsing():
    t = slurm.time_limit_seconds
    assert t("30") == 1800 and t("1:30") == 90 and t("24:00:00") == 86400
    assert t("2-0") == 172800 and t("1-2:3") == 93780 and t("1-2:3:4") == 93784


def test_slurm_account_partition_and_sweep_passes_allocation(capsys, tmp_path):
    script = _slurm_script(capsys, "--account=acc", "--partition=gpu", "--time=1:00:00")
    assert "#SBATCH --account=acc" in script and "#SBATCH --partition=gpu" in script
    assert "#SBATCH --time=1:00:00" in script
    argv = ["--config", "configs/char_lm.py:smoke", "--workdir", str(tmp_path), "--mode=slurm"]
    argv += ["--nodes=2", "--gpus-per-node=4", "--partition=p", "--time=2:00:00"]
    assert sweep.main(argv + ["--account=a", "--per-node", "--dry-run"]) == 0
    scripts = capsys.readouterr().out.split("#!/bin/bash")[1:]
    assert len(scripts) == len(common.sweep_points("configs/char_lm.py"))
    for s in scripts:
        for line in ("--nodes=2", "--ntasks-per-node=1", "--gpus-per-node=4", "--partition=p"):
            assert f"#SBATCH {line}" in s
        assert "#SBATCH --time=2:00:00" in s and "#SBATCH --account=a" in s
        assert "export JAX_LOCAL_DEVICE_IDS=0,1,2,3" in s


def test_relative_workdirs_become_absolute_for_launched_jobs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    runs = sweep.plan(str(REPO / "configs" / "char_lm.py"), "sw")
    assert all(r["workdir"].startswith(str(tmp_path / "sw") + "/") for r in runs)
    script = _slurm_script(capsys, "--workdir=~/r")
    srun = next(line for line in script.splitlines() if line.startswith("srun "))
    assert "--workdir=/" in srun and "~" not in srun


def _tpu(*extra):
    base = ["--tpu", "pod", "--zone", "z1", "--project", "p1"]
    return tpu_vm.main(base + list(extra) + ["--dry-run"])


def test_tpu_vm_job_is_detached_with_per_worker_logs(capsys, monkeypatch):
    monkeypatch.setattr(tpu_vm, "uncommitted_changes", lambda: [" M seqjax/main.py"])
    assert _tpu("--config", "configs/char_lm.py", "--workdir", "gs://b/run") == 0
    captured = capsys.readouterr()
    start = captured.out.strip().splitlines()[3]
    assert "nohup setsid python3 -m seqjax.main" in start and "< /dev/null &" in start
    assert ">> ~/seqjax_job/worker.log 2>&1" in start and "echo $! > ~/seqjax_job/pid" in start
    assert "tee" not in start  # nothing keeps the ssh session attached
    assert (
        "uncommitted changes are NOT shipped" in captured.err and "seqjax/main.py" in captured.err
    )
    # A local workdir: only on a single-host VM, said explicitly (--hosts 1).
    assert _tpu("--config", "configs/char_lm.py", "--workdir", "/local/run", "--hosts=1") == 0
    capsys.readouterr()
    for flag, needle in (
        ("--status", "kill -0"),
        ("--stop", "kill -TERM"),
        ("--logs", "tail -n 50"),
    ):
        assert _tpu(flag) == 0
        line = capsys.readouterr().out.strip()
        assert needle in line and "~/seqjax_job/" in line
        assert ("--worker=0" if flag == "--logs" else "--worker=all") in line
    with pytest.raises(SystemExit):
        _tpu("--status", "--stop")


def _fake_runs(tmp_path, metric, values_by_run):
    runs = []
    for name, (overrides, values) in values_by_run.items():
        wd = tmp_path / name
        wd.mkdir()
        lines = [{"step": 10 * (i + 1), metric: v} for i, v in enumerate(values)]
        (wd / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
        runs.append({"name": name, "workdir": str(wd), "overrides": overrides})
    (tmp_path / "sweep.json").write_text(json.dumps(runs))


def test_collect_direction_seeds_and_final_plot(tmp_path, capsys):
    m = "validation/accuracy"
    _fake_runs(
        tmp_path,
        m,
        {
            "a0": ({"config.model.num_layers": 2, "config.seed": 0}, [0.24, 0.375]),
            "a1": ({"config.model.num_layers": 2, "config.seed": 1}, [0.30, 0.325]),
            "b0": ({"config.model.num_layers": 4, "config.seed": 0}, [0.5, 0.45]),
        },
    )
    rows, _ = collect.collect(str(tmp_path), m)
    best = {r["run"]: r[f"best {m}"] for r in rows}
    assert best == {"a0": 0.375, "a1": 0.325, "b0": 0.5}  # accuracy: the maximum
    points = {p["num_layers"]: p for p in collect.aggregate(rows, m)}
    assert points[2]["seeds"] == 2 and points[2]["mean"] == pytest.approx(0.35)
    assert points[2]["std"] == pytest.approx(0.035355339, rel=1e-6)  # ddof=1
    assert points[4]["seeds"] == 1 and points[4]["std"] == 0.0
    rows, _ = collect.collect(str(tmp_path), m, "min")
    assert {r["run"]: r[f"best {m}"] for r in rows}["a0"] == 0.24
    assert collect.main(["--workdir", str(tmp_path), "--metric", m]) == 0
    for name in ("summary.md", "summary.csv", "points.csv", "summary.png", "final.png"):
        assert (tmp_path / name).exists(), name
    assert "seeds" in (tmp_path / "points.md").read_text()
    with pytest.raises(ValueError, match="pass --direction min or max"):
        collect.direction("validation/score")
    assert collect.direction("test/loss") == "min" and collect.direction("x/bits_per_byte") == "min"
