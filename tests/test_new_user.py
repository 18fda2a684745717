"""What a new user meets first: the demo's timings, the build's progress, the
rebuild of a library another environment replaced, the README's install
steps, the docs' snippets and the benchmark's words."""

import ast
import glob
import importlib.util
import os
import re
import select
import shutil
import subprocess
import sys
import time

import pytest

import robocache
import robocache.data
from robocache.bench.report import legend

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
DOCS = [README, *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]
needs_make = pytest.mark.skipif(
    shutil.which("make") is None or not os.path.exists(os.path.join(ROOT, "Makefile")),
    reason="needs make and the checkout's Makefile",
)


def _demo():
    spec = importlib.util.spec_from_file_location("demo", os.path.join(ROOT, "examples", "demo.py"))
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    return demo


def test_the_demo_times_after_a_warm_up_not_the_first_calls(monkeypatch):
    """A compiled module's first calls are slower than its steady state: the
    demo's times leave them out. A clock of the test's own: each call moves
    it on by what the call "takes", so the times are exact."""
    demo = _demo()
    clock = {"now": 0.0, "cold": 0}

    class Clock:
        @staticmethod
        def perf_counter():
            return clock["now"]

    monkeypatch.setattr(demo, "time", Clock)

    def cold_then_fast():
        clock["cold"] += 1
        clock["now"] += 0.050 if clock["cold"] <= 3 else 0.001
        return "cold"

    def fast():
        clock["now"] += 0.002
        return "fast"

    first, second, cold_ms, fast_ms, spread = demo.compare(cold_then_fast, fast, "cpu", reps=5)
    assert (first, second) == ("cold", "fast")
    assert cold_ms == pytest.approx(1.0), "the slow first calls were timed"
    assert fast_ms == pytest.approx(2.0) and spread == pytest.approx(0.0)
    assert clock["cold"] >= 3 + 5


def test_the_demo_alternates_its_two_sides_and_flags_a_busy_machine():
    demo = _demo()
    order = []
    demo.compare(lambda: order.append("a"), lambda: order.append("b"), "cpu", reps=4, warmup_s=0)
    assert order[-8:] == ["a", "b"] * 4
    assert "busy" in demo.spread_note(demo.NOISY_SPREAD_PCT + 1)
    assert "busy" not in demo.spread_note(1.0)


def _make(folder, *args):
    return subprocess.run(
        ["make", "-s", *args], cwd=folder, capture_output=True, text=True, timeout=120
    )


@needs_make
def test_build_progress_shows_each_file_as_it_finishes(tmp_path):
    """Each ninja step reaches the screen when it is printed, not in a burst
    once the pipe's buffer fills: the second step is printed only once the
    first has been seen (a file the test writes): through a buffered pipe
    the first never comes while the build waits after it."""
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), tmp_path)  # the Makefile reads it
    seen = tmp_path / "seen"
    (tmp_path / "steps.mk").write_text(
        f"include {os.path.join(ROOT, 'Makefile')}\n"
        "steps:\n"
        '\tbash -c \'echo "  [1/2] c++ -MMD -c /src/csrc/cpu/a.cpp -o /t/a.o -O3"; '
        f"while [ ! -e {seen} ]; do sleep 0.05; done; "
        'echo "  [2/2] c++ -MMD -c /src/csrc/cpu/b.cpp -o /t/b.o"\' '
        f"$(call progress,{tmp_path / 'steps.log'})\n"
    )
    make = subprocess.Popen(
        ["make", "-s", "-f", "steps.mk", "steps"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        shown, _, _ = select.select([make.stdout], [], [], 60)
        assert shown, "the first step was not shown while the build waited after it"
        first = make.stdout.readline()
        seen.touch()
        rest = make.stdout.read()
        make.wait(timeout=60)
    finally:
        seen.touch()  # the step's loop ends in any case
        make.kill()
    assert first.strip() == "compiled [1/2] csrc/cpu/a.cpp", first + rest
    assert rest.strip() == "compiled [2/2] csrc/cpu/b.cpp"


def _checkout_for_make(tmp_path):
    """A folder that make's build rules run in: the Makefile, the sources'
    list, a built library with its build info, and a .venv whose python is a
    stand-in that says what it was asked to do."""
    for name in ("Makefile", "setup.py", "pyproject.toml"):
        shutil.copy(os.path.join(ROOT, name), tmp_path)
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "op.cpp").write_text("")
    (tmp_path / "robocache").mkdir()
    library = tmp_path / "robocache" / "_C.cpython-311-x86_64-linux-gnu.so"
    build_info = tmp_path / "robocache" / "_build_info.py"
    library.write_text("")
    build_info.write_text("TORCH_VERSION = '2.13.0+cpu'\nWITH_CUDA = False\n")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text('#!/bin/sh\necho "python $*"\n')
    python.chmod(0o755)
    (venv / ".torch").write_text("torch==2.13.0\n")
    stamps = ["setup.py", "pyproject.toml", "csrc/op.cpp", "venv/.torch", "venv/.deps"]
    stamps += [library, build_info, "venv/.built"]
    start = time.time() - 1000
    for age, path in enumerate(stamps):
        (tmp_path / path).touch()
        os.utime(tmp_path / path, (start + age, start + age))
    return library, build_info


def _rebuilds(folder):
    """Whether make's build rule ran (it ends by touching its stamp)."""
    stamp = folder / "venv" / ".built"
    before = stamp.stat().st_mtime_ns if stamp.exists() else None
    result = _make(folder, "VENV=venv", "TORCH=torch==2.13.0", "venv/.built")
    assert result.returncode == 0, result.stdout + result.stderr
    return stamp.stat().st_mtime_ns != before


@needs_make
def test_make_rebuilds_a_library_another_environment_replaced(tmp_path):
    library, build_info = _checkout_for_make(tmp_path)
    assert not _rebuilds(tmp_path)
    # An editable install from another environment rewrites both in place.
    os.utime(build_info)
    assert _rebuilds(tmp_path)


@needs_make
def test_make_rebuilds_a_missing_library(tmp_path):
    library, _ = _checkout_for_make(tmp_path)
    library.unlink()
    assert _rebuilds(tmp_path)


def _readme_section(title):
    text = open(README).read()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end]


def test_the_readme_installs_the_cpu_torch_unless_told_otherwise():
    """Someone who runs the install block as written, without a GPU, gets
    the CPU build of torch (PyPI's is a CUDA build)."""
    install = _readme_section("Install without make")
    block = re.search(r"```bash\n(.*?)```", install, re.S).group(1)
    torch_line = next(line for line in block.splitlines() if line.startswith("pip install torch"))
    assert "--index-url https://download.pytorch.org/whl/cpu" in torch_line, torch_line
    assert "GPU" in install[: install.index("```bash")]


def test_the_readme_adds_an_extra_without_a_rebuild():
    install = " ".join(_readme_section("Install without make").split())
    assert 'pip install "robocache[frames]"` installs its packages alone' in install
    assert "without building the library again" in install


def _python_blocks(path):
    text = open(path).read()
    for match in re.finditer(r"^```python\n(.*?)^```", text, re.M | re.S):
        yield text.count("\n", 0, match.start()) + 2, match.group(1)


def _used_and_imported(source):
    tree = ast.parse(source)
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imported |= {alias.asname or alias.name for alias in node.names}
    return used, imported


SNIPPETS = [(path, line, source) for path in DOCS for line, source in _python_blocks(path)]


@pytest.mark.parametrize(
    "path, line, source",
    SNIPPETS,
    ids=[f"{os.path.basename(path)}:{line}" for path, line, _ in SNIPPETS],
)
def test_doc_snippets_import_the_data_names_they_use(path, line, source):
    used, imported = _used_and_imported(source)
    missing = sorted((used & set(robocache.data.__all__)) - imported)
    assert not missing, (
        f"{os.path.basename(path)}:{line}: the snippet uses {missing} without importing it "
        "(from robocache.data import ...)"
    )


def test_the_benchmark_names_the_copy_the_device_makes():
    cpu = [line for line in legend("cpu") if line.startswith("%copy: ")]
    gpu = [line for line in legend("NVIDIA H200") if line.startswith("%copy: ")]
    assert "copy in host memory" in cpu[0] and "device-to-device" not in cpu[0]
    assert "device-to-device copy" in gpu[0]


def test_the_library_built_for_another_torch_is_refused_naming_its_file(tmp_path):
    package = os.path.dirname(robocache.__file__)
    copy = tmp_path / "robocache"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "_build_info.py").write_text("TORCH_VERSION = '0.0.1+other'\nWITH_CUDA = False\n")
    code = (
        "import sys; sys.meta_path = [f for f in sys.meta_path "
        "if '__editable__' not in getattr(f, '__module__', '')]; import robocache"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert result.returncode != 0
    assert "built against torch 0.0.1+other" in result.stderr
    assert str(copy / "_C") in result.stderr, result.stderr
    assert "make build" in result.stderr
