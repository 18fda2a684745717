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
    shutil.copytree(PACKAGE, dst, ignore=shutil.ignore_patterns("_C*.so", "__pycache__"))
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


def _imports(path, package):
    """The robocache modules a module imports (absolute and relative)."""
    import ast

    tree = ast.parse(open(path).read())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("robocache")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.startswith("robocache"):
                if node.module:  # "from . import x" needs x, not the package's __init__
                    found.add(module)
                found |= {f"{module}.{a.name}" for a in node.names}
    return found


def test_no_import_circles():
    """Nothing flows backwards: the modules' imports (lazy ones included) form no cycle."""
    modules = {}
    root = os.path.dirname(PACKAGE)
    for path in glob.glob(os.path.join(PACKAGE, "**", "*.py"), recursive=True):
        name = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
        package = name.removesuffix(".__init__") if name.endswith("__init__") else name
        package = package if name.endswith("__init__") else name.rsplit(".", 1)[0]
        modules[name.removesuffix(".__init__")] = (path, package)
    edges = {
        name: {m for m in _imports(path, package) if m in modules and m != name}
        for name, (path, package) in modules.items()
    }
    # A package's __init__ re-exports its modules: an edge into a package is
    # an edge into its __init__, which is fine unless that leads back.
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == "open":
                cycle = stack[stack.index(nxt) :] + [nxt]
                raise AssertionError("import circle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node)
