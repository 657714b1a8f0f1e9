"""The medium suite: the hard suite's layout, facts and probes at a size whose whole
transcript fits the faux reader's input envelope, so ``native`` can be every other
arm's paired reference (the default campaign's premise)."""

from __future__ import annotations

import pytest

from efold.controller.campaigns.campaign import bundled_campaign
from efold.controller.campaigns.feasibility import first_request
from efold.corpus import Category, CorpusError, estimate_tokens, generate, generate_hard, validate
from efold.corpus.shapes import GENERATED, HARD_SEED_MAX, HARD_SEED_MIN, OVERSIZED_HEAD, SHAPES
from efold.errors import Code
from efold.folds import TracePrefix
from efold.folds.arms import NativeFold

SEEDS = range(HARD_SEED_MIN, HARD_SEED_MAX + 1)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_seed_is_valid_and_its_native_first_request_fits(seed: int) -> None:
    item = generate(seed, "medium")
    validate(item)
    assert item.trace.header.trace_id.startswith("med-")
    low, high = SHAPES["medium"].token_estimate
    assert low <= estimate_tokens(item.trace.events) <= high
    campaign, _ = bundled_campaign("default")
    checkpoint = NativeFold().build(TracePrefix.of(item.trace))
    longest = max((p.question for p in item.probes.probes), key=len)
    request = first_request(checkpoint, campaign, "native", longest)
    assert request.fits, request.why_not()
    assert request.budget < 0.97 * request.envelope  # a margin, not a coincidence


def test_same_facts_and_probes_as_hard_at_a_quarter_of_the_size() -> None:
    medium, hard = generate(105, "medium"), generate_hard(105)
    assert [(p.category, p.expected, p.question) for p in medium.probes.probes] == [
        (p.category, p.expected, p.question) for p in hard.probes.probes
    ]
    assert 4 * estimate_tokens(medium.trace.events) < estimate_tokens(hard.trace.events)
    sizes = [len(e.content.encode()) for e in medium.trace.events if e.role == "tool"]
    assert sum(s > OVERSIZED_HEAD for s in sizes) == 2  # the long document and the booking pack
    assert {p.category for p in medium.probes.probes} == set(Category) - {Category.BOUNDARY}


def test_the_medium_suite_is_generated_only_by_name() -> None:
    assert "medium" in GENERATED
    with pytest.raises(CorpusError) as caught:
        generate(101, "original")
    assert caught.value.code is Code.SUITE_UNKNOWN
