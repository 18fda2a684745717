"""The suite's skip summary (tests/_skip_summary.py, loaded by pyproject's
addopts): one line a reason with its count, and no line a skipped test."""

import os
import subprocess
import sys

TESTS = os.path.dirname(os.path.abspath(__file__))

SKIPPING = """
import pytest

@pytest.mark.parametrize("n", range(3))
@pytest.mark.skipif(True, reason="no CUDA device")
def test_cuda(n):
    pass

def test_plot():
    pytest.importorskip("no_such_module_here", reason="pip install robocache[bench]")

def test_fails():
    assert False
"""


def test_skips_are_counted_by_reason(tmp_path):
    (tmp_path / "test_skipping.py").write_text(SKIPPING)
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "_skip_summary", "-rfE", "-p", "no:cacheprovider"]
        + ["test_skipping.py"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": TESTS},
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = r.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "4 skipped, by reason" in line)
    assert [line.split(None, 1) for line in lines[start + 1 : start + 3]] == [
        ["3", "no CUDA device"],
        ["1", "pip install robocache[bench]"],
    ]
    assert not any(line.startswith("SKIPPED") for line in lines)
    assert any(line.startswith("FAILED test_skipping.py::test_fails") for line in lines)
