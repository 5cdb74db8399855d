#!/usr/bin/env bash
# The lowest supported versions: installs the floors of pyproject.toml (pinned exactly in
# .ci/min_constraints.txt) into a fresh .ci/venv-min and runs the smoke tests against them.
# Not part of .ci/run (which tests the newest versions); run it when changing a floor:
#   bash .ci/min_versions.sh
# Keep every ">=X" floor of pyproject.toml and its "==X" pin here in sync.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m venv .ci/venv-min
# shellcheck disable=SC1091
source .ci/venv-min/bin/activate
python -m pip install --quiet --upgrade pip
python -m pip install --quiet -c .ci/min_constraints.txt -e ".[test]"
python - <<'PY'
import importlib.metadata as md
for line in open(".ci/min_constraints.txt"):
    line = line.split("#")[0].strip()
    if line:
        name, want = line.split("==")
        got = md.version(name)
        assert got == want, f"{name}: installed {got}, floor {want}"
print("floors installed:", open(".ci/min_constraints.txt").read().split())
PY

# Smoke: configs/char_lm.py:smoke jobs on a tiny text with the workdir as written (relative,
# ~ + symlink; checkpoints, validation, test, sample, then seqjax.evaluate / seqjax.sample), a
# gs:// run + resume (fake GCS network layer), the console and --help, the launchers.
# (Not the gs:// test: its fake GCS network layer patches the newest Orbax's internals; with
# Orbax 0.11.x the checkpoint would go to the real TensorStore GCS driver, i.e. the network.)
# The warm starts at the safetensors and tokenizers floors: the README's snippet, import and
# export (dropout, token ids, tokenizer files) and the tokenizers.
python -m pytest -q -p no:cacheprovider tests/train/test_paths.py tests/e2e/test_console.py \
    tests/launch/test_launchers.py tests/e2e/test_readme_warm_start.py \
    tests/convert/test_carry.py tests/convert/test_tokenizer.py -k "not gs_workdir"
