"""The signatures the docs state are the code's: every Python signature in
README.md and docs/*.md, and every operator schema there, against the code.

A Python signature is a call of a public name written where the docs define
it: in a plain ``` block (not python/bash), a table cell, the head of a
bullet (``- `name(...)`: ...``), or any call with a keyword-only ``*`` or a
closing ``...`` (the rest of the parameters, as the text says). It must name
the parameters in order, with their kinds and defaults; a closing ``...``
may stand only for parameters the docs say every such call shares. Calls
that show a use (values given, or a leading ``...``) are not signatures.
"""

import ast
import glob
import inspect
import os
import re

import pytest
import torch

import robocache
import robocache.data

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = [os.path.join(ROOT, "README.md"), *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]
# What a closing "..." may stand for: the loaders' shared tail (docs/data.md says so).
SHARED_TAIL = {"frames", "jpeg_quality", "resize", "progress", "skip_bad", "device"}


def _public():
    names = {}
    for name in robocache.__all__:
        obj = getattr(robocache, name)
        if callable(obj):
            names[name] = obj
    for name in robocache.data.__all__:
        obj = getattr(robocache.data, name)
        if name.startswith("load_"):
            names[name] = obj
    names["WindowSampler"] = robocache.data.WindowSampler
    names["EpisodeStore.from_episodes"] = robocache.data.EpisodeStore.from_episodes
    names["EpisodeStore.load"] = robocache.data.EpisodeStore.load
    return names


PUBLIC = _public()
CALL = re.compile(
    r"(?<![\w.:])(?:robocache\.(?:data\.)?)?("
    + "|".join(re.escape(n) for n in sorted(PUBLIC, key=len, reverse=True))
    + r")\("
)


def _balanced(text, start):
    """The text between the "(" at start - 1 and its ")"."""
    depth = 1
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i]
    return None


def _items(inside):
    items, depth, current = [], 0, ""
    for ch in inside:
        if ch == "," and depth == 0:
            items.append(current.strip())
            current = ""
            continue
        depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(ch, 0)
        current += ch
    if current.strip():
        items.append(current.strip())
    return items


def _contexts(text):
    """(start, end, kind) of the places where the docs define signatures."""
    places, fence, offset = [], None, 0
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.startswith("```"):
            if fence is None:
                fence = (offset + len(line), stripped == "```")
            else:
                if fence[1]:  # a plain block: signatures, not code
                    places.append((fence[0], offset))
                fence = None
        offset += len(line)
    for m in re.finditer(r"^\|.*\|[ \t]*$", text, re.M):
        places.append((m.start(), m.end()))
    for m in re.finditer(r"^- `[^`]*`", text, re.M):
        places.append((m.start(), m.end()))
    return places


def signatures():
    found = []
    for path in DOCS:
        text = open(path).read()
        places = _contexts(text)
        for m in CALL.finditer(text):
            inside = _balanced(text, m.end())
            if inside is None:
                continue
            items = _items(" ".join(inside.replace("`", " ").split()))
            if items and items[0] == "...":
                continue  # a use: robocache.resample(..., check=True)
            defining = any(a <= m.start() < b for a, b in places)
            if not items or (not defining and "*" not in items and items[-1] != "..."):
                continue
            params = [i for i in items if i not in ("*", "...")]
            if any(not re.fullmatch(r"\w+(\s*=.*)?", p) for p in params):
                continue  # values, not parameters: a use
            line = text.count("\n", 0, m.start()) + 1
            found.append(pytest.param(m.group(1), items, id=f"{os.path.basename(path)}:{line}"))
    return found


@pytest.mark.parametrize("name, items", signatures())
def test_python_signature(name, items):
    real = list(inspect.signature(PUBLIC[name]).parameters.values())
    if real and real[0].name in ("self", "cls"):
        real = real[1:]
    keyword_only, expected = False, []
    for item in items:
        if item == "*":
            keyword_only = True
            continue
        if item == "...":
            continue
        name_, _, default = item.partition("=")
        expected.append((name_.strip(), keyword_only, default.strip() or None))
    got = [
        (
            p.name,
            p.kind == p.KEYWORD_ONLY,
            None if p.default is inspect.Parameter.empty else repr(p.default),
        )
        for p in real
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    for (n, kw, d), (rn, rkw, rd) in zip(expected, got):
        assert n == rn, f"{name}: the docs name {n!r} where the code has {rn!r}"
        assert kw == rkw, f"{name}: {n} is {'' if rkw else 'not '}keyword-only in the code"
        if d is not None:
            assert ast.literal_eval(d) == ast.literal_eval(rd), (
                f"{name}: {n}={d} in the docs, {n}={rd} in the code"
            )
        else:
            assert rd is None, f"{name}: the docs give {n} no default; the code's is {rd}"
    assert len(expected) <= len(got), f"{name}: the docs list more parameters than the code has"
    rest = {p for p, _, _ in got[len(expected) :]}
    if items[-1] == "...":
        assert rest <= SHARED_TAIL, f"{name}: '...' stands for {sorted(rest)}, not only the tail"
    else:
        assert not rest, f"{name}: the docs leave out {sorted(rest)}"


def _schema_blocks():
    found = []
    for path in DOCS:
        text = open(path).read()
        for m in re.finditer(
            r"robocache::(\w+)\((.*?)\)\s*->\s*(\([^)]*\)|Tensor\[?\]?)", text, re.S
        ):
            line = text.count("\n", 0, m.start()) + 1
            found.append(
                pytest.param(
                    m.group(1), " ".join(m.group(0).split()), id=f"{os.path.basename(path)}:{line}"
                )
            )
    return found


@pytest.mark.parametrize("op, documented", _schema_blocks())
def test_operator_schema(op, documented):
    """The schema as robocache.cpp defines it; the docs may name the results."""
    schema = str(getattr(torch.ops.robocache, op).default._schema)
    arguments, _, results = documented.partition(" -> ")
    results = re.sub(r"(Tensor(?:\[\])?) \w+", r"\1", results)
    assert f"{arguments} -> {results}" == " ".join(schema.split()), documented
