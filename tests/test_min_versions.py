"""Every run-time dependency's floor in ``pyproject.toml`` is pinned, at that version, in
``.ci/min_constraints.txt`` (what ``.ci/min_versions.sh`` installs and tests)."""

import re

import pytest

from tests.conftest import REPO


def test_every_floor_is_pinned():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    floors = {}
    for dep in deps:
        m = re.match(r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*>=\s*([0-9][0-9A-Za-z.]*)", dep)
        assert m, f"{dep!r} has no >= floor"
        floors[m.group(1).lower()] = m.group(3)
    pins = {}
    for line in (REPO / ".ci/min_constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[name.lower()] = version
    missing = sorted(set(floors) - set(pins))
    assert not missing, f"no pin in .ci/min_constraints.txt for {missing}"
    for name, floor in floors.items():  # 1.0 == 1.0.0
        assert pins[name].split(".")[: len(floor.split("."))] == floor.split("."), (name, floor)
