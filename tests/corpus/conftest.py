"""Shared corpus fixtures: the bundled original suite and the default hard suites,
generated once per test session (about a second)."""

from __future__ import annotations

import pytest

from efold.corpus import SuiteItem, generate_hard, original_suite
from efold.corpus.shapes import HARD_DEFAULT_SEEDS


@pytest.fixture(scope="session")
def original_items() -> list[SuiteItem]:
    return original_suite()


@pytest.fixture(scope="session")
def hard_items() -> list[SuiteItem]:
    return [generate_hard(seed) for seed in HARD_DEFAULT_SEEDS]


@pytest.fixture(scope="session")
def distractor_items() -> list[SuiteItem]:
    return [generate_hard(seed, distractors=True) for seed in HARD_DEFAULT_SEEDS]
