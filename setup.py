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
  MAX_JOBS              parallel compile jobs (ninja)

Install with ``pip install --no-build-isolation .`` into an environment that
already has the torch robocache will run with. pyproject.toml does not list
torch as a build requirement, so a plain ``pip install .`` (an isolated
build) stops at once with one sentence saying this, instead of downloading
the newest torch, compiling against it and then replacing the user's torch
with it. A torch found inside an isolated build environment anyway is
refused the same way (ROBOCACHE_ALLOW_ISOLATED_BUILD=1 allows it).
"""

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata

try:
    import torch
except ImportError:  # pip's isolated build: pyproject.toml does not ask for torch
    raise SystemExit(
        "robocache compiles against the torch it will run with, and this build sees no torch: "
        "install torch first, then build with: pip install --no-build-isolation ."
    ) from None
import setuptools
from setuptools import find_packages, setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

ROOT = os.path.dirname(os.path.abspath(__file__))
DEFAULT_ARCHS = "8.0;9.0;10.0+PTX"
# The folders pip and pypa/build make their isolated build environments in.
ISOLATED_BUILD_MARKERS = ("pip-build-env-", "build-env-")
# A CUDA build's one build dependency besides torch: the CUTLASS headers of this
# release of the nvidia-cutlass package (fetched by the build when not installed).
CUTLASS_REQUIREMENT = "nvidia-cutlass==4.2.0.0"
CUTLASS_HEADERS_IN_WHEEL = "cutlass_library/source/include"
# What the package needs besides its torch; the lower bounds are the versions
# CI's oldest leg tests (.ci/oldest.txt).
RUNTIME_REQUIREMENTS = ["numpy>=1.26.4", "safetensors>=0.4.3", "tqdm>=4.66.1"]
# pyproject.toml names the license as an SPDX expression, which setuptools
# reads from this release on; a build without isolation uses whichever
# setuptools is installed, so this file checks it (the oldest CI leg installs it).
SETUPTOOLS_MINIMUM = "77.0.3"


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
    path = os.environ.get("CUTLASS_INCLUDE_DIR")
    if not path:
        try:
            dist = metadata.distribution("nvidia-cutlass")
            path = str(dist.locate_file(CUTLASS_HEADERS_IN_WHEEL))
        except metadata.PackageNotFoundError:
            path = _fetched_cutlass_include()
    if not os.path.exists(os.path.join(path, "cutlass", "numeric_conversion.h")):
        raise RuntimeError(f"no CUTLASS headers under {path} (cutlass/numeric_conversion.h)")
    return path


def _fetched_cutlass_include():
    """Downloads the CUTLASS_REQUIREMENT wheel with pip (the user's index
    settings apply) and unpacks its headers only, into build/cutlass/."""
    version = CUTLASS_REQUIREMENT.split("==")[1]
    dest = os.path.join(ROOT, "build", f"cutlass-{version}")
    include = os.path.join(dest, "include")
    if os.path.exists(os.path.join(include, "cutlass", "numeric_conversion.h")):
        return include
    print(
        f"robocache: fetching the CUTLASS headers ({CUTLASS_REQUIREMENT}) into {dest}", flush=True
    )
    with tempfile.TemporaryDirectory() as download:
        command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps"]
        command += ["--only-binary=:all:", "-d", download, CUTLASS_REQUIREMENT]
        result = subprocess.run(command, capture_output=True, text=True)
        wheels = [f for f in os.listdir(download) if f.endswith(".whl")]
        if result.returncode != 0 or len(wheels) != 1:
            said = (result.stderr or result.stdout).strip().splitlines()
            raise RuntimeError(
                f"robocache's CUDA kernels compile with the CUTLASS headers of {CUTLASS_REQUIREMENT}, "
                f"and fetching them with pip failed ({said[-1] if said else 'no wheel'}). "
                f"Install them (pip install --no-deps {CUTLASS_REQUIREMENT}) or set "
                "CUTLASS_INCLUDE_DIR to a CUTLASS include folder, then build again."
            )
        prefix = CUTLASS_HEADERS_IN_WHEEL + "/"
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


class BuildExt(BuildExtension):
    """Also writes robocache/_build_info.py next to the built library.

    robocache/__init__.py reads it to refuse a library built for another torch.
    """

    def run(self):
        super().run()
        for ext in self.extensions:
            out_dir = os.path.dirname(self.get_ext_fullpath(ext.name))
            with open(os.path.join(out_dir, "_build_info.py"), "w") as f:
                f.write("# Generated by setup.py; do not edit.\n")
                f.write(f"TORCH_VERSION = {torch.__version__!r}\n")
                f.write(f"WITH_CUDA = {WITH_CUDA!r}\n")


def _extension(with_cuda):
    sources = sorted(glob.glob(os.path.join("csrc", "*.cpp")))
    sources += sorted(glob.glob(os.path.join("csrc", "checks", "*.cpp")))
    sources += sorted(glob.glob(os.path.join("csrc", "cpu", "*.cpp")))
    sources += sorted(glob.glob(os.path.join("csrc", "meta", "*.cpp")))
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
    include_dirs.append(_cutlass_include())
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
    (and CUDA) the library is built for: 0.1.0+pt213cpu, 0.1.0+pt214cu130."""
    scope = {}
    with open(os.path.join(ROOT, "robocache", "_version.py")) as f:
        exec(f.read(), scope)
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    flavour = f"cu{torch.version.cuda.replace('.', '')}" if with_cuda else "cpu"
    return f"{scope['__version__']}+pt{major}{minor}{flavour}"


_refuse_isolated_build()
_refuse_old_setuptools()
WITH_CUDA = _with_cuda()

setup(
    version=_version(WITH_CUDA),
    # The library runs only with the torch it was compiled against: pin it
    # (a public version, so 2.13.0 matches 2.13.0+cpu).
    install_requires=[f"torch=={torch.__version__.split('+')[0]}", *RUNTIME_REQUIREMENTS],
    packages=find_packages(include=["robocache", "robocache.*"]),
    ext_modules=[_extension(WITH_CUDA)],
    cmdclass={"build_ext": BuildExt},
)
