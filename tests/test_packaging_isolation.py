"""setup.py refuses to build against a torch in pip's isolated build
environment (it would pin that torch and replace the user's), and says how
to install instead; without torch, it refuses to build in one sentence,
but an sdist, which compiles nothing, builds in isolation."""

import os
import shutil
import subprocess
import sys
import tarfile

import pytest
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


# Runs setup.py with argv[1:] as its arguments where `import torch` fails, as
# in pip's isolated build environment, which is given no torch.
WITHOUT_TORCH = """
import runpy, sys
sys.modules["torch"] = None
sys.argv = ["setup.py", *sys.argv[1:]]
runpy.run_path("setup.py", run_name="__main__")
"""


def _setup_without_torch(*args):
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_TORCH, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


NO_TORCH = "install torch first, then build with: pip install --no-build-isolation ."


def test_without_torch_the_metadata_needs_none():
    r = _setup_without_torch("--version")
    assert r.returncode == 0, r.stderr
    scope = {}
    exec(open(os.path.join(ROOT, "robocache", "_version.py")).read(), scope)
    assert r.stdout.strip() == scope["__version__"]  # no local label: no torch to name


@pytest.mark.parametrize("command", ["build", "build_ext"])
def test_building_without_torch_stops_with_one_sentence(command):
    r = _setup_without_torch(command)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    assert NO_TORCH in r.stderr
    assert "copying" not in r.stdout + r.stderr  # said before build_py lists its copies


# What a checkout holds besides its sources: venvs, builds, the built library.
BUILT = shutil.ignore_patterns(".git", ".venv*", "build", "dist", "dist-cuda", "*.so", "*.egg-info")


@pytest.mark.slow  # pip fetches setuptools, wheel and ninja into the isolated environment
def test_an_sdist_builds_in_isolation(tmp_path):
    pytest.importorskip(
        "build.__main__", reason="python -m build is not installed here (pip install build)"
    )
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=BUILT)
    r = subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--outdir", str(tmp_path / "dist"), "."],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (sdist,) = (tmp_path / "dist").iterdir()
    assert sdist.name.startswith("robocache-") and sdist.name.endswith(".tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
        info = archive.extractfile(f"{sdist.name[: -len('.tar.gz')]}/PKG-INFO").read().decode()
    assert {"setup.py", "pyproject.toml", "robocache/__init__.py", "csrc/robocache.cpp"} <= names
    assert any(name.startswith("csrc/cuda/") and name.endswith(".cu") for name in names)
    assert not any(name.endswith(".so") for name in names)
    # The wheel built from it pins the torch it is built with; the sdist says so.
    assert "Requires-Dist: torch" not in info and "Dynamic: requires-dist" in info
