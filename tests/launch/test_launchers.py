"""Launchers in dry-run: the exact commands and scripts they would run."""

import json
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
                "train.num_steps=7",
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
    assert "--config.train.num_steps=7" in lines[3]


@pytest.mark.parametrize("per_node,tasks", [(False, 4), (True, 1)])
def test_slurm_script(capsys, per_node, tasks):
    argv = [
        "--config",
        "configs/char_lm.py",
        "--workdir",
        "/scratch/r",
        "--nodes",
        "3",
        "--gpus-per-node",
        "4",
        "--partition",
        "gpu",
        "--dry-run",
    ]
    assert slurm.main(argv + (["--per-node"] if per_node else [])) == 0
    script = capsys.readouterr().out
    assert "#SBATCH --nodes=3" in script
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
