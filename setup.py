"""Build robocache._C with torch.utils.cpp_extension (and ninja).

CUDA kernels are compiled when torch is a CUDA build and nvcc is found, or
when FORCE_CUDA=1; otherwise the library holds the CPU and Meta kernels only.
FORCE_CPU=1 skips CUDA even where it is available.

Environment:
  TORCH_CUDA_ARCH_LIST  target GPUs (default "8.0;9.0;10.0+PTX": A100, H100/H200,
                        B200, and PTX that newer GPUs compile at load)
  CUTLASS_INCLUDE_DIR   CUTLASS/CuTe headers; default: an installed
                        nvidia-cutlass package, else the headers of
                        CUTLASS_REQUIREMENT, which the build fetches with pip
                        into build/ (once)
  NVIMGCODEC_INCLUDE_DIR  nvImageCodec's C API header (the GPU frame decoder);
                        default: an installed nvidia-nvimgcodec-cu13, else the
                        headers of NVIMGCODEC_REQUIREMENT, fetched the same way
  MAX_JOBS              parallel compile jobs (ninja)

Install with ``pip install --no-build-isolation .`` into an environment that
already has the torch robocache will run with. pyproject.toml does not list
torch as a build requirement, so a plain ``pip install .`` (an isolated
build) stops as soon as it starts building, with one sentence saying this,
instead of downloading the newest torch, compiling against it and then
replacing the user's torch with it. A torch found inside an isolated build
environment anyway is refused the same way (ROBOCACHE_ALLOW_ISOLATED_BUILD=1
allows it). Only building needs torch: an sdist (``python -m build --sdist``)
builds in isolation.

A CUDA build needs the headers of the CUDA libraries that torch's own CUDA
headers include (cusparse.h, cublas_v2.h, ...). A CUDA toolkit that has only
nvcc and the runtime lacks them, but a CUDA build of torch from pip installs
them in its NVIDIA wheels (site-packages/nvidia/cu13/include, or one
nvidia/<library>/include folder a library for CUDA 12): the build adds those
folders to the include path (after CUDA_HOME's), and where a header is found
nowhere it stops before compiling anything, saying to build with FORCE_CPU=1
or to install the CPU build of torch.
"""

import functools
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata

import setuptools
from setuptools import Extension, find_packages, setup
from setuptools.command.build import build
from setuptools.command.build_ext import build_ext

try:
    import torch
except ImportError:  # pip's isolated build: pyproject.toml does not ask for torch
    torch = None
if torch is not None:
    from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

ROOT = os.path.dirname(os.path.abspath(__file__))
DEFAULT_ARCHS = "8.0;9.0;10.0+PTX"
# The folders pip and pypa/build make their isolated build environments in.
ISOLATED_BUILD_MARKERS = ("pip-build-env-", "build-env-")
# A CUDA build's one build dependency besides torch and its CUDA headers: the
# CUTLASS headers of this release of the nvidia-cutlass package (fetched by the
# build when not installed).
CUTLASS_REQUIREMENT = "nvidia-cutlass==4.2.0.0"
CUTLASS_HEADERS = (
    "CUTLASS",
    CUTLASS_REQUIREMENT,
    "cutlass_library/source/include",
    "cutlass/numeric_conversion.h",
    "CUTLASS_INCLUDE_DIR",
)
# The GPU frame decoder's: nvImageCodec's C API header, of the release that
# the nvimgcodec extra installs (fetched by the build when not installed).
NVIMGCODEC_REQUIREMENT = "nvidia-nvimgcodec-cu13==0.9.0.20"
NVIMGCODEC_HEADERS = (
    "nvImageCodec",
    NVIMGCODEC_REQUIREMENT,
    "nvidia/nvimgcodec/include",
    "nvimgcodec.h",
    "NVIMGCODEC_INCLUDE_DIR",
)
# What the package needs besides its torch; the lower bounds are the versions
# CI's oldest leg tests (.ci/oldest.txt).
RUNTIME_REQUIREMENTS = ["numpy>=1.26.4", "safetensors>=0.4.3", "tqdm>=4.66.1"]
# pyproject.toml names the license as an SPDX expression, which setuptools
# reads from this release on; a build without isolation uses whichever
# setuptools is installed, so this file checks it (the oldest CI leg installs it).
SETUPTOOLS_MINIMUM = "77.0.3"
# Said where building (not an sdist) finds no torch.
NO_TORCH = (
    "robocache compiles against the torch it will run with, and this build sees no torch: "
    "install torch first, then build with: pip install --no-build-isolation ."
)
# The CUDA headers that torch's own CUDA headers include (ATen/cuda/CUDAContextLight.h
# and Exceptions.h, torch 2.6 to 2.15): without any one of them no CUDA source compiles.
TORCH_CUDA_HEADERS = (
    "cuda_runtime_api.h",
    "cusparse.h",
    "cublas_v2.h",
    "cublasLt.h",
    "cusolverDn.h",
)
# Where the host compiler finds headers by itself (a distribution's CUDA packages).
SYSTEM_INCLUDE_DIRS = ("/usr/local/include", "/usr/include")


def _refuse_isolated_build():
    where = os.path.abspath(torch.__file__)
    if os.environ.get("ROBOCACHE_ALLOW_ISOLATED_BUILD") == "1":
        return
    parts = where.split(os.sep)
    if any(part.startswith(ISOLATED_BUILD_MARKERS) for part in parts):
        raise RuntimeError(
            f"robocache compiles against the torch it will run with, but this build "
            f"sees torch {torch.__version__} in pip's isolated build environment ({where}), "
            "not yours; the package would then pin that torch and replace your own. "
            "Install torch first, then: pip install --no-build-isolation . "
            "(set ROBOCACHE_ALLOW_ISOLATED_BUILD=1 to build in isolation anyway)"
        )


def _refuse_old_setuptools():
    def release(version):
        return tuple(int(part) for part in version.split(".")[:3] if part.isdigit())

    if release(setuptools.__version__) < release(SETUPTOOLS_MINIMUM):
        raise SystemExit(
            f"robocache's build needs setuptools>={SETUPTOOLS_MINIMUM} (pyproject.toml names its "
            f"license as an SPDX expression), and this environment has setuptools "
            f"{setuptools.__version__}: pip install -U setuptools"
        )


def _wheel_cuda_includes(site_dirs, cuda_major):
    """The include folders of the NVIDIA wheels that a CUDA build of torch
    brings, under each of `site_dirs`: nvidia/cu<major>/include (CUDA 13
    wheels: every library's headers in one folder), then every
    nvidia/<library>/include (CUDA 12 wheels: a folder a library), but not
    the nvidia/cu<N>/include of another CUDA release."""
    found = []
    for site in site_dirs:
        nvidia = os.path.join(site, "nvidia")
        merged = os.path.join(nvidia, f"cu{cuda_major}", "include")
        for path in [merged, *sorted(glob.glob(os.path.join(nvidia, "*", "include")))]:
            library = os.path.basename(os.path.dirname(path))
            if path != merged and library.startswith("cu") and library[2:].isdigit():
                continue  # another CUDA release's
            if os.path.isdir(path) and path not in found:
                found.append(path)
    return found


def _cuda_include_dirs(cuda_home, cuda_major, site_dirs, environ):
    """The folders of torch's NVIDIA wheels to add to the include path, after
    the compilers' own (CUDA_HOME's, CPATH's, the system's). Raises
    SystemExit, before anything is compiled, where a header that torch's CUDA
    headers include is found in none of them."""
    paths = lambda name: [p for p in environ.get(name, "").split(os.pathsep) if p]  # noqa: E731
    searched = [os.path.join(cuda_home or "", "include"), *paths("CUDA_INC_PATH"), *paths("CPATH")]
    searched += [*paths("CPLUS_INCLUDE_PATH"), *SYSTEM_INCLUDE_DIRS]
    wheels = [d for d in _wheel_cuda_includes(site_dirs, cuda_major) if d not in searched]
    missing = [
        header
        for header in TORCH_CUDA_HEADERS
        if not any(os.path.isfile(os.path.join(d, header)) for d in searched + wheels)
    ]
    if missing:
        raise SystemExit(
            f"robocache cannot compile its CUDA kernels: torch's CUDA headers include "
            f"{', '.join(missing)}, not found in {cuda_home}/include, CPATH or torch's NVIDIA "
            f"wheels (site-packages/nvidia/cu{cuda_major}/include); build the CPU kernels only "
            "with FORCE_CPU=1, or install the CPU build of torch: "
            "pip install torch --index-url https://download.pytorch.org/whl/cpu"
        )
    return wheels


def _site_dirs():
    """Where torch's NVIDIA wheels may be: beside torch, and on sys.path."""
    dirs = [os.path.dirname(os.path.dirname(os.path.abspath(torch.__file__))), *sys.path]
    return [d for d in dict.fromkeys(os.path.abspath(d) for d in dirs) if os.path.isdir(d)]


@functools.cache
def _check_before_building():
    """Runs once, before anything is built: refuses a build without torch,
    and for a CUDA build adds torch's NVIDIA wheel headers to CPATH (searched
    after CUDA_HOME's include folder) or stops if a header is missing."""
    if torch is None:
        raise SystemExit(NO_TORCH)
    if WITH_CUDA:
        major = torch.version.cuda.split(".")[0]
        added = _cuda_include_dirs(CUDA_HOME, major, _site_dirs(), os.environ)
        if added:
            print(f"robocache: CUDA library headers from torch's NVIDIA wheels: {', '.join(added)}")
            cpath = [p for p in os.environ.get("CPATH", "").split(os.pathsep) if p]
            os.environ["CPATH"] = os.pathsep.join(cpath + added)


def _nvcc_found():
    return CUDA_HOME is not None and os.path.exists(os.path.join(CUDA_HOME, "bin", "nvcc"))


def _with_cuda():
    if os.environ.get("FORCE_CPU", "0") == "1":
        return False
    if os.environ.get("FORCE_CUDA", "0") == "1":
        if torch.version.cuda is None:
            raise RuntimeError(
                f"FORCE_CUDA=1, but torch {torch.__version__} is a CPU-only build; "
                "install a CUDA build of torch to compile robocache's CUDA kernels"
            )
        return True
    return torch.version.cuda is not None and _nvcc_found()


def _cutlass_include():
    """The CUTLASS headers: CUTLASS_INCLUDE_DIR, else an installed nvidia-cutlass,
    else CUTLASS_REQUIREMENT's headers, fetched once into build/."""
    return _wheel_headers(*CUTLASS_HEADERS)


def _fetched_cutlass_include():
    return _fetched_headers(*CUTLASS_HEADERS)


def _nvimgcodec_include():
    """nvImageCodec's C API header (the GPU frame decoder compiles against it
    and loads the library at run time, from the optional extra):
    NVIMGCODEC_INCLUDE_DIR, else an installed nvidia-nvimgcodec-cu13, else
    NVIMGCODEC_REQUIREMENT's headers, fetched once into build/."""
    return _wheel_headers(*NVIMGCODEC_HEADERS)


def _wheel_headers(name, requirement, in_wheel, marker, variable):
    path = os.environ.get(variable)
    if not path:
        try:
            dist = metadata.distribution(requirement.split("==")[0])
            path = str(dist.locate_file(in_wheel))
        except metadata.PackageNotFoundError:
            path = _fetched_headers(name, requirement, in_wheel, marker, variable)
    if not os.path.exists(os.path.join(path, marker)):
        raise RuntimeError(f"no {name} headers under {path} ({marker})")
    return path


def _fetched_headers(name, requirement, in_wheel, marker, variable):
    """Downloads the `requirement` wheel with pip (the user's index settings
    apply) and unpacks its headers only, into build/<name>-<version>/."""
    version = requirement.split("==")[1]
    dest = os.path.join(ROOT, "build", f"{name.lower()}-{version}")
    include = os.path.join(dest, "include")
    if os.path.exists(os.path.join(include, marker)):
        return include
    print(f"robocache: fetching the {name} headers ({requirement}) into {dest}", flush=True)
    with tempfile.TemporaryDirectory() as download:
        command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps"]
        command += ["--only-binary=:all:", "-d", download, requirement]
        result = subprocess.run(command, capture_output=True, text=True)
        wheels = [f for f in os.listdir(download) if f.endswith(".whl")]
        if result.returncode != 0 or len(wheels) != 1:
            said = (result.stderr or result.stdout).strip().splitlines()
            raise RuntimeError(
                f"robocache's CUDA build compiles with the {name} headers of {requirement}, "
                f"and fetching them with pip failed ({said[-1] if said else 'no wheel'}). "
                f"Install them (pip install --no-deps {requirement}) or set "
                f"{variable} to a {name} include folder, then build again."
            )
        prefix = in_wheel + "/"
        unpacking = dest + ".partial"
        with zipfile.ZipFile(os.path.join(download, wheels[0])) as wheel:
            for member in wheel.namelist():
                if member.startswith(prefix) and not member.endswith("/"):
                    target = os.path.join(unpacking, "include", member[len(prefix) :])
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    with wheel.open(member) as src, open(target, "wb") as out:
                        out.write(src.read())
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(unpacking, dest)
    return include


class Build(build):
    """Checks what building needs before build_py's listing of copied files,
    so that a refusal is the last thing said."""

    def run(self):
        _check_before_building()
        super().run()


class BuildExt(BuildExtension if torch is not None else build_ext):
    """Checks what building needs first; then, for a CUDA build, adds the
    CUTLASS headers to the include path; after the build, writes
    robocache/_build_info.py next to the built library.

    robocache/_ops.py reads it to refuse a library built for another torch.
    """

    def run(self):
        _check_before_building()
        if WITH_CUDA:
            for headers in (_cutlass_include(), _nvimgcodec_include()):
                for ext in self.extensions:
                    if headers not in ext.include_dirs:
                        ext.include_dirs.append(headers)
        super().run()
        for ext in self.extensions:
            out_dir = os.path.dirname(self.get_ext_fullpath(ext.name))
            with open(os.path.join(out_dir, "_build_info.py"), "w") as f:
                f.write("# Generated by setup.py; do not edit.\n")
                f.write(f"TORCH_VERSION = {torch.__version__!r}\n")
                f.write(f"WITH_CUDA = {WITH_CUDA!r}\n")


def _extension(with_cuda):
    """robocache._C: its CPU and Meta kernels, and its CUDA kernels `with_cuda`.
    Without torch, only its name and sources (an sdist needs no more)."""
    sources = sorted(glob.glob(os.path.join("csrc", "*.cpp")))
    sources += sorted(glob.glob(os.path.join("csrc", "checks", "*.cpp")))
    sources += sorted(glob.glob(os.path.join("csrc", "cpu", "*.cpp")))
    sources += sorted(glob.glob(os.path.join("csrc", "meta", "*.cpp")))
    sources += sorted(glob.glob(os.path.join("csrc", "io", "*.cpp")))
    sources += sorted(glob.glob(os.path.join("csrc", "frames", "*.cpp")))
    if torch is None:
        return Extension("robocache._C", sources)
    include_dirs = [os.path.join(ROOT, "csrc", "include")]
    cxx_flags = ["-O3"]
    if not with_cuda:
        return CppExtension(
            "robocache._C",
            sources,
            include_dirs=include_dirs,
            extra_compile_args={"cxx": cxx_flags},
        )

    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", DEFAULT_ARCHS)
    sources += sorted(glob.glob(os.path.join("csrc", "cuda", "*.cu")))
    sources += sorted(glob.glob(os.path.join("csrc", "decoders", "*.cpp")))
    nvcc_flags = [
        "-O3",
        "-lineinfo",
        "--expt-relaxed-constexpr",
        # CUTLASS's half/bfloat16 types need CUDA's own half operators, which
        # torch's default flags switch off.
        "-U__CUDA_NO_HALF_OPERATORS__",
        "-U__CUDA_NO_HALF_CONVERSIONS__",
        "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
        "-U__CUDA_NO_HALF2_OPERATORS__",
    ]
    if os.environ.get("ROBOCACHE_PTXAS_VERBOSE") == "1":
        nvcc_flags.append("-Xptxas=-v")
    return CUDAExtension(
        "robocache._C",
        sources,
        include_dirs=include_dirs,
        define_macros=[("ROBOCACHE_WITH_CUDA", "1")],
        extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags},
    )


def _version(with_cuda):
    """robocache/_version.py's version, with a local label naming the torch
    (and CUDA) the library is built for: 0.1.0+pt213cpu, 0.1.0+pt214cu130;
    without torch (an sdist), the version alone."""
    scope = {}
    with open(os.path.join(ROOT, "robocache", "_version.py")) as f:
        exec(f.read(), scope)
    if torch is None:
        return scope["__version__"]
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    flavour = f"cu{torch.version.cuda.replace('.', '')}" if with_cuda else "cpu"
    return f"{scope['__version__']}+pt{major}{minor}{flavour}"


if torch is not None:
    _refuse_isolated_build()
_refuse_old_setuptools()
WITH_CUDA = torch is not None and _with_cuda()
# The library runs only with the torch it was compiled against: pin it (a
# public version, so 2.13.0 matches 2.13.0+cpu). An sdist pins none.
TORCH_REQUIREMENT = [f"torch=={torch.__version__.split('+')[0]}"] if torch is not None else []

setup(
    version=_version(WITH_CUDA),
    install_requires=[*TORCH_REQUIREMENT, *RUNTIME_REQUIREMENTS],
    packages=find_packages(include=["robocache", "robocache.*"]),
    ext_modules=[_extension(WITH_CUDA)],
    cmdclass={"build": Build, "build_ext": BuildExt},
)
