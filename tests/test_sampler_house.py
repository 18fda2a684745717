"""The sampler's stages talk through their public names: no module of
robocache/data/sampler imports another's private name or reads or writes
a private attribute on anything but itself, and no two files of the data
side share a name."""

import ast
from pathlib import Path

import robocache

DATA = Path(robocache.__file__).parent / "data"
SAMPLER = DATA / "sampler"


def _private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _trees():
    return {path.name: ast.parse(path.read_text()) for path in sorted(SAMPLER.glob("*.py"))}


def _owned_privates(tree):
    """Private names a module defines: its functions, classes, module names,
    and attributes it sets on ``self``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and _private(node.name):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                if _private(node.attr):
                    names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and _private(node.id):
            names.add(node.id)
    return names


def test_no_module_imports_a_private_name_of_another():
    bad = []
    for name, tree in _trees().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                inside = node.level > 0 or (node.module or "").startswith("robocache")
                bad += [
                    f"{name}: from {node.module} import {a.name}"
                    for a in node.names
                    if inside and _private(a.name)
                ]
    assert bad == []


def _foreign_private_reads(trees):
    """Each access of a private attribute another module owns, on anything
    but ``self`` or ``cls``."""
    owned = {name: _owned_privates(tree) for name, tree in trees.items()}
    bad = []
    for name, tree in trees.items():
        others = set().union(*(names for other, names in owned.items() if other != name))
        others -= owned[name]  # a name this module also owns is its own
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in others:
                holder = node.value
                if not (isinstance(holder, ast.Name) and holder.id in ("self", "cls")):
                    bad.append(f"{name}:{node.lineno}: .{node.attr}")
    return bad


def test_no_module_touches_anothers_private_attributes():
    assert _foreign_private_reads(_trees()) == []


def test_the_check_finds_a_private_read_across_modules():
    owner = ast.parse("class A:\n    def __init__(self):\n        self._hidden = 1\n")
    reader = ast.parse("def f(a):\n    return a._hidden\n")
    assert _foreign_private_reads({"owner.py": owner, "reader.py": reader}) == [
        "reader.py:2: ._hidden"
    ]


def test_no_two_files_of_the_data_side_share_a_name():
    names = [p.name for p in DATA.rglob("*.py") if p.name != "__init__.py"]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []
