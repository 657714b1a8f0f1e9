"""Shared fixtures: the original suite and one hard trace (session-scoped), a run
(directory, lease, journal, epoch) for the process tests, trio for anyio tests, and on
sys.path the process harness (tests/worker/programs/proc_harness.py) and the shared
test material (tests/kit/efold_test_kit.py)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).resolve().parent / "worker" / "programs"))
sys.path.insert(0, str(Path(__file__).resolve().parent / "kit"))

from proc_harness import Run, open_run

from efold.corpus.model import SuiteItem


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    opened = open_run(tmp_path)
    yield opened
    opened.close()


@pytest.fixture(scope="session")
def original_items() -> list[SuiteItem]:
    from efold.corpus import original_suite

    return original_suite()


@pytest.fixture(scope="session")
def hard_item() -> SuiteItem:
    from efold.corpus import generate_hard

    return generate_hard(101)


# CI decides whether a submission lands, so there the property tests run on a fixed
# seed (reproducible verdicts); everywhere else they explore fresh examples each run.
if "CI" in os.environ:
    settings.register_profile("ci", derandomize=True, database=None)
    settings.load_profile("ci")
