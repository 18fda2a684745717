"""Every ```python block of README.md runs as written, each on its own in a
fresh namespace, and the shapes its comments promise (``name = ...  # (8, 200, 14)``)
are the shapes it makes."""

import os
import re

import pytest

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")
SHAPE_COMMENT = re.compile(r"^(\w+) = .*#\s*\((\d+(?:,\s*\d+)*)\)")


def python_blocks(path=README):
    """(first line number, source) of each ```python block in the file."""
    blocks, source, start = [], None, 0
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if source is None and line.strip() == "```python":
                source, start = [], number + 1
            elif source is not None and line.strip() == "```":
                blocks.append((start, "".join(source)))
                source = None
            elif source is not None:
                source.append(line)
    assert source is None, f"README.md: the ```python block at line {start} is not closed"
    return blocks


BLOCKS = python_blocks()


def test_readme_has_python_blocks():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("line, source", BLOCKS, ids=[f"README.md:{line}" for line, _ in BLOCKS])
def test_readme_block_runs(line, source):
    namespace = {"__name__": "__readme__"}
    exec(compile(source, f"README.md:{line}", "exec"), namespace)
    for text in source.splitlines():
        match = SHAPE_COMMENT.match(text)
        if match:
            name, shape = match.group(1), tuple(int(n) for n in match.group(2).split(","))
            assert tuple(namespace[name].shape) == shape, f"README.md: {text.strip()}"
