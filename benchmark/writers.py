"""The datasets the benchmarks write come from the tests' writers
(``tests/fixtures/``: each format's own writer library), imported from the
checkout that holds this package.

They are imported as ``fixtures.<format>`` with the checkout's ``tests/``
first on the path, as the tests import them: a ``tests`` package that some
other distribution installs (mcap-protobuf-support 0.5 does) must not shadow
them."""

import importlib
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"


def writers(name):
    """The module ``tests/fixtures/<name>.py`` of this checkout."""
    if not (TESTS / "fixtures" / f"{name}.py").is_file():
        raise FileNotFoundError(
            f"the benchmarks write their datasets with {TESTS / 'fixtures' / name}.py, "
            "which is not there: run them from a checkout of robocache"
        )
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    module = importlib.import_module(f"fixtures.{name}")
    found = Path(module.__file__).resolve()
    if found.parent != TESTS / "fixtures":
        raise ImportError(f"fixtures.{name} imported from {found}, not from {TESTS / 'fixtures'}")
    return module
