"""setup.py refuses to build against a torch in pip's isolated build
environment (it would pin that torch and replace the user's), and says how
to install instead."""

import os
import subprocess
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _setup_version(torch_parent, env=None):
    """`python setup.py --version` with torch imported from `torch_parent`."""
    # FORCE_CPU: a CUDA machine without the CUTLASS headers still reads the version.
    environ = dict(os.environ, PYTHONPATH=str(torch_parent), FORCE_CPU="1", **(env or {}))
    return subprocess.run(
        [sys.executable, "setup.py", "--version"],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_torch_in_an_isolated_build_environment_is_refused(tmp_path):
    isolated = tmp_path / "pip-build-env-abc123" / "overlay" / "site-packages"
    isolated.mkdir(parents=True)
    (isolated / "torch").symlink_to(os.path.dirname(torch.__file__))
    r = _setup_version(isolated)
    assert r.returncode != 0
    assert "pip install --no-build-isolation ." in r.stderr
    assert "pip-build-env-abc123" in r.stderr
    allowed = _setup_version(isolated, {"ROBOCACHE_ALLOW_ISOLATED_BUILD": "1"})
    assert allowed.returncode == 0, allowed.stderr
    assert allowed.stdout.strip().startswith("0.")


def test_the_users_torch_builds(tmp_path):
    r = _setup_version(tmp_path)  # an empty PYTHONPATH entry: the environment's torch
    assert r.returncode == 0, r.stderr
    assert "+pt" in r.stdout


def test_a_folder_that_only_contains_the_marker_is_not_isolation(tmp_path):
    mine = tmp_path / "my-pip-build-env-venv" / "site-packages"
    mine.mkdir(parents=True)
    (mine / "torch").symlink_to(os.path.dirname(torch.__file__))
    r = _setup_version(mine)
    assert r.returncode == 0, r.stderr


def test_no_torch_at_all_stops_with_one_sentence():
    # -S: no site-packages, as in an isolated build that was not given torch
    r = subprocess.run(
        [sys.executable, "-S", "setup.py", "--version"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    assert "install torch first, then build with: pip install --no-build-isolation ." in r.stderr
