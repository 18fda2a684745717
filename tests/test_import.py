"""import robocache fails clearly when its compiled library is missing or mismatched."""

import glob
import os
import shutil
import subprocess
import sys

import torch

import robocache

PACKAGE = os.path.dirname(robocache.__file__)


def _import_copy(tmp_path, with_library, torch_version):
    """Import a copy of the package (Python files, maybe the library, build info)."""
    dst = tmp_path / "robocache"
    dst.mkdir()
    for f in glob.glob(os.path.join(PACKAGE, "*.py")):
        shutil.copy(f, dst)
    if with_library:
        for f in glob.glob(os.path.join(PACKAGE, "_C*.so")):
            shutil.copy(f, dst)
    (dst / "_build_info.py").write_text(f"TORCH_VERSION = {torch_version!r}\nWITH_CUDA = False\n")
    # An editable install adds a meta-path finder that would resolve
    # robocache._C to the real library: import the copy without it.
    code = (
        "import sys; sys.meta_path = [f for f in sys.meta_path "
        "if '__editable__' not in getattr(f, '__module__', '')]; import robocache"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )


def test_missing_library_says_so_and_what_to_run(tmp_path):
    result = _import_copy(tmp_path, with_library=False, torch_version=torch.__version__)
    assert result.returncode != 0
    assert "ImportError: robocache's compiled library (robocache._C) is missing" in result.stderr
    assert "pip install --no-build-isolation -e ." in result.stderr


def test_library_built_for_another_torch_says_which(tmp_path):
    result = _import_copy(tmp_path, with_library=True, torch_version="0.0.1")
    assert result.returncode != 0
    assert f"built against torch 0.0.1, but torch {torch.__version__} is installed" in result.stderr
    assert "Rebuild it" in result.stderr


def test_matching_library_imports(tmp_path):
    result = _import_copy(tmp_path, with_library=True, torch_version=torch.__version__)
    assert result.returncode == 0, result.stderr
