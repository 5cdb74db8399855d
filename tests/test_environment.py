"""``seqjax.environment``: the one capture behind run_info.json and every result file."""

import json
import subprocess

import jax
import ml_collections

from seqjax import bench, environment
from seqjax.train import metrics
from tests.conftest import REPO


def test_git_commit_is_this_checkout_and_unknown_elsewhere(tmp_path):
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    full, short = environment.git_commit(), environment.git_commit(short=True)
    assert full.removesuffix("-dirty") == head
    assert head.startswith(short.removesuffix("-dirty")) and len(short) < len(full)
    assert full.endswith("-dirty") == short.endswith("-dirty")
    assert environment.git_commit(tmp_path) == "unknown"  # not a checkout


def test_capture_is_what_runs_and_benchmarks_record(tmp_path):
    env = environment.capture()
    json.dumps(env)  # a result file can hold it
    assert env["cpu_count"] >= 1 and env["device_count"] == len(env["devices"]) >= 1
    assert env["versions"]["jax"] == jax.__version__
    assert env["python"] == environment.package_versions((), python=True)["python"]
    assert set(bench.environment()) == set(env)
    info = metrics.write_run_info(str(tmp_path), ml_collections.ConfigDict())
    assert info["versions"] == environment.package_versions(python=True)
    assert list(info["versions"])[0] == "python" and "tensorboardX" in info["versions"]
    assert info["git_commit"] == environment.git_commit()


def test_missing_package_is_none():
    assert environment.package_versions(("no-such-package-xyz",)) == {"no-such-package-xyz": None}
