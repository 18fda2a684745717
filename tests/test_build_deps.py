"""The build's dependencies: a CUDA build fetches its CUTLASS headers itself
(setup.py), and the lower bounds the package declares are the versions the
oldest-dependencies CI leg installs (.ci/oldest.txt)."""

import os
import re
import subprocess
import sys
import tomllib
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Loads setup.py's functions without running setup() (FORCE_CPU: no CUTLASS
# lookup while the module runs), points its build folder at argv[1], and
# prints what _fetched_cutlass_include() returns, or its error.
FETCH = """
import sys, setuptools
setuptools.setup = lambda **kwargs: None
import runpy
fetch = runpy.run_path("setup.py")["_fetched_cutlass_include"]
fetch.__globals__["ROOT"] = sys.argv[1]
try:
    print("PATH", fetch())
except RuntimeError as e:
    print("ERROR", e)
"""


def _fetch(build_root, wheels):
    env = dict(os.environ, FORCE_CPU="1", PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheels))
    r = subprocess.run(
        [sys.executable, "-c", FETCH, str(build_root)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def _requirement():
    source = open(os.path.join(ROOT, "setup.py")).read()
    return re.search(r'CUTLASS_REQUIREMENT = "([^"]+)"', source).group(1)


def _fake_cutlass_wheel(folder, version):
    """A wheel shaped as nvidia-cutlass's: headers under cutlass_library/source/include."""
    folder.mkdir()
    path = folder / f"nvidia_cutlass-{version}-py3-none-any.whl"
    info = f"nvidia_cutlass-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: nvidia-cutlass\nVersion: {version}\n"
        )
        wheel.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        wheel.writestr(f"{info}/RECORD", "")
        wheel.writestr("cutlass_library/source/include/cutlass/numeric_conversion.h", "// header\n")
        wheel.writestr("cutlass_library/source/include/cute/tensor.hpp", "// header\n")
        wheel.writestr("cutlass_library/source/tools/big_example.cu", "// not a header\n")
        wheel.writestr("cutlass_library/__init__.py", "")
    return path


def test_a_cuda_build_fetches_the_cutlass_headers_once(tmp_path):
    requirement = _requirement()
    _fake_cutlass_wheel(tmp_path / "wheels", requirement.split("==")[1])
    out = _fetch(tmp_path / "checkout", tmp_path / "wheels")
    assert out.startswith("robocache: fetching the CUTLASS headers"), out
    include = out.split("PATH ")[1].strip()
    assert include == str(
        tmp_path / "checkout" / "build" / f"cutlass-{requirement.split('==')[1]}" / "include"
    )
    assert open(os.path.join(include, "cutlass", "numeric_conversion.h")).read() == "// header\n"
    assert os.path.exists(os.path.join(include, "cute", "tensor.hpp"))
    unpacked = [
        os.path.relpath(os.path.join(d, f), include) for d, _, fs in os.walk(include) for f in fs
    ]
    assert sorted(unpacked) == ["cute/tensor.hpp", "cutlass/numeric_conversion.h"]  # headers only
    # Fetched once: a second build finds them with no index at all.
    again = _fetch(tmp_path / "checkout", tmp_path / "nowhere")
    assert again.strip() == f"PATH {include}"


def test_a_failed_fetch_says_what_to_do(tmp_path):
    (tmp_path / "empty").mkdir()
    out = _fetch(tmp_path / "checkout", tmp_path / "empty")
    assert out.splitlines()[-1].startswith("ERROR"), out
    assert f"pip install --no-deps {_requirement()}" in out
    assert "CUTLASS_INCLUDE_DIR" in out
    assert not (tmp_path / "checkout" / "build").exists() or not any(
        p.name.startswith("cutlass-") and not p.name.endswith(".partial")
        for p in (tmp_path / "checkout" / "build").iterdir()
    )


def _lower_bounds(requirements):
    bounds = {}
    for requirement in requirements:
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)>=([0-9][0-9A-Za-z.]*)", requirement)
        assert match, f"{requirement!r}: every dependency states its lower bound as name>=version"
        bounds[match.group(1).lower()] = match.group(2)
    return bounds


def test_the_declared_lower_bounds_are_what_the_oldest_ci_leg_installs():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    runtime = re.search(
        r"RUNTIME_REQUIREMENTS = \[([^\]]*)\]", open(os.path.join(ROOT, "setup.py")).read()
    )
    declared = {}
    for requirements in [*extras.values(), re.findall(r'"([^"]+)"', runtime.group(1))]:
        for name, version in _lower_bounds(requirements).items():
            assert declared.setdefault(name, version) == version, f"{name}: two lower bounds"
    pins = {}
    for line in open(os.path.join(ROOT, ".ci", "oldest.txt")):
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[name.lower()] = version
    torch_pin = pins.pop("torch")
    setuptools_pin = pins.pop("setuptools")
    assert pins == declared
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        build_requires = tomllib.load(f)["build-system"]["requires"]
    assert f"setuptools>={setuptools_pin}" in build_requires
    assert f'SETUPTOOLS_MINIMUM = "{setuptools_pin}"' in open(os.path.join(ROOT, "setup.py")).read()
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert f"torch {torch_pin}" in readme


# Runs setup.py as a build would, with setuptools claiming the version in
# argv[1] and setup() stubbed out.
OLD_SETUPTOOLS = """
import runpy, sys, setuptools
setuptools.__version__ = sys.argv[1]
setuptools.setup = lambda **kwargs: print("SETUP")
runpy.run_path("setup.py")
"""


def test_a_build_with_too_old_a_setuptools_says_what_to_do():
    env = dict(os.environ, FORCE_CPU="1")

    def build(version):
        return subprocess.run(
            [sys.executable, "-c", OLD_SETUPTOOLS, version],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    old = build("69.5.1")
    assert old.returncode == 1
    assert "needs setuptools>=77.0.3" in old.stderr
    assert "setuptools 69.5.1: pip install -U setuptools" in old.stderr
    assert "SETUP" not in old.stdout
    new = build("77.0.3")
    assert new.returncode == 0, new.stderr
    assert new.stdout.strip().endswith("SETUP")
