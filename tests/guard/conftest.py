"""Fixtures for the guard tests.

pytest runs in importlib mode, so sibling helper modules are not importable by plain
name. They are loaded here once under unique names (``efold_guard_loopback`` for the
loopback server, ``efold_guard_kit`` for payload/contract builders) so test modules
can ``import efold_guard_kit as kit`` after this conftest has run.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

_HERE = Path(__file__).resolve().parent


def _load(name: str, filename: str) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, _HERE / filename)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


loopback = _load("efold_guard_loopback", "server.py")
_load("efold_guard_kit", "kit.py")


@pytest.fixture(scope="session")
def _loopback_server() -> Iterator[object]:
    with loopback.LoopbackServer() as server:
        yield server


@pytest.fixture
def server(_loopback_server: object) -> object:
    """The scripted provider on 127.0.0.1, its request log cleared for this test."""
    _loopback_server.reset()  # type: ignore[attr-defined]
    return _loopback_server
