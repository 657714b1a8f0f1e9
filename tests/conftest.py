"""Shared fixtures: a run (directory, lease, journal, epoch) for the process tests, trio
for anyio tests, and the process harness (tests/worker/programs/proc_harness.py) on
sys.path."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "worker" / "programs"))

from proc_harness import Run, open_run


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    opened = open_run(tmp_path)
    yield opened
    opened.close()
