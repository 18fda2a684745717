"""A CUDA build finds the CUDA library headers that torch's own CUDA headers
include (cusparse.h, cublas_v2.h, ...) in torch's NVIDIA wheels when the
toolkit lacks them, and stops before compiling anything, in one sentence,
where they are nowhere. No GPU, no nvcc: fake folders stand in for both."""

import os
import runpy
import subprocess
import sys

import pytest
import setuptools

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADERS = ("cuda_runtime_api.h", "cusparse.h", "cublas_v2.h", "cublasLt.h", "cusolverDn.h")


@pytest.fixture
def setup_py(monkeypatch):
    """setup.py's globals, read without running setup() (FORCE_CPU: a CPU
    build's top level), with no system include folder."""
    monkeypatch.setenv("FORCE_CPU", "1")
    monkeypatch.setattr(setuptools, "setup", lambda **kwargs: None)
    # run_path returns a copy of the module's globals; its functions use these:
    scope = runpy.run_path(os.path.join(ROOT, "setup.py"))["_cuda_include_dirs"].__globals__
    scope["SYSTEM_INCLUDE_DIRS"] = ()
    return scope


def _headers(folder, names=HEADERS):
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_text("// header\n")
    return str(folder)


def test_the_headers_are_the_ones_torch_includes(setup_py):
    assert tuple(setup_py["TORCH_CUDA_HEADERS"]) == HEADERS


def test_a_toolkit_with_nvcc_only_takes_cuda13_wheel_headers(setup_py, tmp_path):
    toolkit = _headers(tmp_path / "cuda" / "include", ["cuda_runtime_api.h"])
    wheels = _headers(tmp_path / "site" / "nvidia" / "cu13" / "include")
    _headers(tmp_path / "site" / "nvidia" / "cudnn" / "include", ["cudnn.h"])
    found = setup_py["_cuda_include_dirs"](
        os.path.dirname(toolkit), "13", [str(tmp_path / "site")], {}
    )
    # cu13's folder first; the per-library folders after it, as fallbacks
    assert found == [wheels, str(tmp_path / "site" / "nvidia" / "cudnn" / "include")]


def test_cuda12_wheels_have_a_folder_a_library(setup_py, tmp_path):
    nvidia = tmp_path / "site" / "nvidia"
    folders = [
        _headers(nvidia / "cublas" / "include", ["cublas_v2.h", "cublasLt.h"]),
        _headers(nvidia / "cuda_runtime" / "include", ["cuda_runtime_api.h"]),
        _headers(nvidia / "cusolver" / "include", ["cusolverDn.h"]),
        _headers(nvidia / "cusparse" / "include", ["cusparse.h"]),
    ]
    found = setup_py["_cuda_include_dirs"](
        str(tmp_path / "none"), "12", [str(tmp_path / "site")], {}
    )
    assert found == folders


def test_another_cuda_releases_wheels_are_not_taken(setup_py, tmp_path):
    _headers(tmp_path / "site" / "nvidia" / "cu12" / "include")
    toolkit = _headers(tmp_path / "cuda" / "include", ["cuda_runtime_api.h"])
    with pytest.raises(SystemExit) as stop:
        setup_py["_cuda_include_dirs"](os.path.dirname(toolkit), "13", [str(tmp_path / "site")], {})
    assert "cusparse.h, cublas_v2.h, cublasLt.h, cusolverDn.h" in str(stop.value)


def test_a_header_found_nowhere_stops_with_one_sentence(setup_py, tmp_path):
    toolkit = _headers(tmp_path / "cuda" / "include", ["cuda_runtime_api.h", "cublas_v2.h"])
    _headers(tmp_path / "site" / "nvidia" / "cu13" / "include", ["cublasLt.h", "cusolverDn.h"])
    with pytest.raises(SystemExit) as stop:
        setup_py["_cuda_include_dirs"](os.path.dirname(toolkit), "13", [str(tmp_path / "site")], {})
    said = str(stop.value)
    assert "include cusparse.h, not found in" in said and toolkit in said
    assert "FORCE_CPU=1" in said
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in said
    assert "\n" not in said and said.count(". ") == 0  # one sentence


def test_cpath_is_searched_and_not_added_again(setup_py, tmp_path):
    mine = _headers(tmp_path / "mine")
    assert setup_py["_cuda_include_dirs"](str(tmp_path / "none"), "13", [], {"CPATH": mine}) == []
    # A folder of torch's wheels already on CPATH (as an older Makefile passed it)
    wheels = _headers(tmp_path / "site" / "nvidia" / "cu13" / "include")
    environ = {"CPATH": os.pathsep.join([str(tmp_path / "elsewhere"), wheels])}
    found = setup_py["_cuda_include_dirs"](
        str(tmp_path / "none"), "13", [str(tmp_path / "site")], environ
    )
    assert found == []


# Runs `setup.py build_ext` as a CUDA build would (torch a CUDA 13 build,
# FORCE_CUDA=1, CUDA_HOME argv[1]) with torch's NVIDIA wheels under argv[2]
# only. Where the header check passes, the CUTLASS step that follows it
# stops the build and prints CPATH.
BUILD = """
import os, runpy, sys, setuptools, torch
import torch.utils.cpp_extension as cpp_extension
torch.version.cuda = "13.0"
cpp_extension.CUDA_HOME = sys.argv[1]
real_setup, kwargs = setuptools.setup, {}
setuptools.setup = lambda **given: kwargs.update(given)
scope = runpy.run_path("setup.py")["_site_dirs"].__globals__
scope["_site_dirs"] = lambda: [sys.argv[2]]
scope["SYSTEM_INCLUDE_DIRS"] = ()
scope["_cutlass_include"] = lambda: sys.exit("CPATH=" + os.environ.get("CPATH", ""))
real_setup(**kwargs, script_args=["build_ext", "-b", sys.argv[3], "-t", sys.argv[3]])
"""


def _build(tmp_path, site, cpath=None):
    toolkit = _headers(tmp_path / "cuda" / "include", ["cuda_runtime_api.h"])
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_CPU", "CPATH")}
    env.update(FORCE_CUDA="1", **({"CPATH": cpath} if cpath else {}))
    out = tmp_path / "build"
    r = subprocess.run(
        [sys.executable, "-c", BUILD, os.path.dirname(toolkit), str(site), str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    compiled = [f for _, _, files in os.walk(out) for f in files if f.endswith(".o")]
    return r, compiled


def test_the_build_stops_before_compiling_where_a_header_is_missing(tmp_path):
    r, compiled = _build(tmp_path, tmp_path / "no-wheels")
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("robocache cannot compile its CUDA kernels") and "FORCE_CPU=1" in last
    assert compiled == []


def test_the_build_puts_the_wheel_headers_on_cpath_after_the_users(tmp_path):
    wheels = _headers(tmp_path / "site" / "nvidia" / "cu13" / "include")
    r, compiled = _build(tmp_path, tmp_path / "site", cpath="/my/headers")
    assert f"CUDA library headers from torch's NVIDIA wheels: {wheels}" in r.stdout
    assert r.stderr.strip().splitlines()[-1] == f"CPATH=/my/headers{os.pathsep}{wheels}"
    assert compiled == []
