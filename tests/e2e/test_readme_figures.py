"""Issue 40, item 6: the README's test count is the one CI collects (within 5 %), stated
with the command that counts it and the machine its figures are for."""

import re
import subprocess
import sys

import pytest

from tests.conftest import REPO


def _readme_count() -> int:
    text = (REPO / "README.md").read_text()
    block = text[text.index("# 2. Install with the test extra") :]
    block = block[: block.index("```")]
    assert "idle 2-core" in block and "--collect-only" in block
    return int(re.search(r"about ([\d,]+) tests", block).group(1).replace(",", ""))


@pytest.mark.slow  # collects the whole suite (imports every test module)
def test_the_readme_test_count_is_what_ci_collects():
    cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "not slow"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    last = proc.stdout.strip().splitlines()[-1]  # "N/M tests collected (K deselected) in S"
    collected = int(re.match(r"(\d+)(/\d+)? tests? collected", last).group(1))
    assert abs(_readme_count() - collected) <= 0.05 * collected, (last, _readme_count())
