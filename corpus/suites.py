"""Suites by name: the bundled original suite (package data) and the generated hard
suites. ``load_suite`` validates every item before returning it, so nothing downstream
ever sees a trace that broke a corpus rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from importlib import resources

from efold.corpus.codec import load_probes, load_trace
from efold.corpus.errors import CorpusError
from efold.corpus.generator import generate
from efold.corpus.model import SuiteItem
from efold.corpus.shapes import (
    HARD_DEFAULT_SEEDS,
    MEDIUM,
    MEDIUM_DEFAULT_SEEDS,
    ORIGINAL,
    ORIGINAL_FAMILIES,
    SUITES,
)
from efold.corpus.validation import validate
from efold.errors import Code

_DATA_PACKAGE = "efold.corpus.data"


@lru_cache(maxsize=1)
def _original_items() -> tuple[SuiteItem, ...]:
    folder = resources.files(_DATA_PACKAGE).joinpath(ORIGINAL)
    items = []
    for family in ORIGINAL_FAMILIES:
        trace_id = f"orig-{family}"
        trace = load_trace(folder.joinpath(f"{trace_id}.jsonl").read_bytes())
        probes = load_probes(folder.joinpath(f"{trace_id}.probes.json").read_bytes())
        item = SuiteItem(trace=trace, probes=probes)
        validate(item)
        items.append(item)
    return tuple(items)


def original_suite() -> list[SuiteItem]:
    """The four bundled original traces with their probes (validated)."""
    return list(_original_items())


def load_suite(suite: str, seeds: Sequence[int] | None = None) -> list[SuiteItem]:
    """Validated items of ``suite`` ("original", "medium", "hard" or "hard-distractors").

    ``seeds`` selects generated traces (default: medium 101-104, hard 101-108; 101-124
    allowed) and must be None for the original suite, which has no seeds."""
    if suite not in SUITES:
        raise CorpusError(Code.SUITE_UNKNOWN, f"unknown suite {suite!r}")
    if suite == ORIGINAL:
        if seeds is not None:
            raise CorpusError(Code.TRACE_SEED_OUT_OF_RANGE, "the original suite has no seeds")
        return original_suite()
    default = MEDIUM_DEFAULT_SEEDS if suite == MEDIUM else HARD_DEFAULT_SEEDS
    chosen = default if seeds is None else tuple(seeds)
    if len(set(chosen)) != len(chosen):
        raise CorpusError(Code.TRACE_SEED_OUT_OF_RANGE, "a seed is repeated")
    items = []
    for seed in chosen:
        item = generate(seed, suite)
        validate(item)
        items.append(item)
    return items
