"""Lazy package exports (PEP 562), written once for every package that needs them.

A child process pays for each module it imports at every launch, so a package's
``__init__`` names its public objects without importing them. Its ``if TYPE_CHECKING:``
block is the one table of exports: each line ``from MODULE import NAME as NAME`` (the
form type checkers read as a re-export) names a public object and the module that
defines it. ``lazy_exports`` reads that table from the ``__init__`` file itself on first
use and returns the module-level ``__getattr__`` and ``__dir__`` that load a name then.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable
from typing import Any, Final

# One export per line, exactly as in the TYPE_CHECKING block (ruff keeps ``as`` imports
# one to a line); ``tests/test_lazy_exports.py`` checks that every import there matches.
EXPORT_LINE: Final = re.compile(r"^    from (efold(?:\.\w+)+) import (\w+) as \2$", re.MULTILINE)


def lazy_exports(
    package: str, init_file: str
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``package``'s ``__getattr__`` and ``__dir__``; ``init_file`` is its ``__file__``."""
    exports: dict[str, str] = {}  # name -> module, read once from init_file

    def table() -> dict[str, str]:
        if not exports:
            with open(init_file, encoding="utf-8") as f:
                exports.update({name: module for module, name in EXPORT_LINE.findall(f.read())})
        return exports

    def __getattr__(name: str) -> Any:
        module = table().get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *table()})

    return __getattr__, __dir__
