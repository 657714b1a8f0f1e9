"""The bundled original suite: four hand-written fictional traces (DESIGN §6)."""

from __future__ import annotations

from collections import Counter

import pytest

from efold.corpus import Category, CorpusError, SuiteItem, forms, load_suite, validate
from efold.corpus.probe_checks import FactIndex
from efold.corpus.shapes import ORIGINAL_FAMILIES
from efold.errors import Code


def test_four_traces_all_valid(original_items: list[SuiteItem]) -> None:
    assert [i.trace.header.family for i in original_items] == list(ORIGINAL_FAMILIES)
    for item in original_items:
        validate(item)
    assert load_suite("original") == original_items


def test_original_suite_takes_no_seeds() -> None:
    with pytest.raises(CorpusError) as err:
        load_suite("original", [101])
    assert err.value.code is Code.TRACE_SEED_OUT_OF_RANGE
    with pytest.raises(CorpusError) as err:
        load_suite("holdout")
    assert err.value.code is Code.SUITE_UNKNOWN


def test_shape_of_each_trace(original_items: list[SuiteItem]) -> None:
    for item in original_items:
        header, events = item.trace.header, item.trace.events
        assert header.fictional and header.suite == "original" and header.sessions == 5
        assert {e.day for e in events} == {1, 2, 3, 4, 5}
        assert all(e.day == e.session for e in events)
        assert 36 <= sum(forms.is_owner_turn(e) for e in events) <= 38
        tools = [e for e in events if e.role == "tool"]
        assert 26 <= len(tools) <= 30  # "about 28"
        assert {str(e.source) for e in tools} == {"email", "chat", "web", "document",
                                                  "calendar", "parcel"}
        steers = [i for i, e in enumerate(events) if e.steer]
        assert len(steers) == 1
        before, after = events[steers[0] - 1], events[steers[0] + 1]
        assert before.tool_calls and after.tool_call_id == before.tool_calls[0].id


def test_thirteen_probes_in_seven_categories(original_items: list[SuiteItem]) -> None:
    for item in original_items:
        probes = item.probes.probes
        assert len(probes) == 13
        categories = Counter(p.category for p in probes)
        assert set(categories) == set(Category) - {Category.REDACTION}
        assert all(p.question.startswith(forms.PROBE_PREAMBLE) for p in probes)
        assert "tool results" in forms.PROBE_PREAMBLE.lower()


def test_content_properties(original_items: list[SuiteItem]) -> None:
    for item in original_items:
        events = item.trace.events
        probes = item.probes.probes
        facts = FactIndex(events)
        # Early owner constraints, including the confidential-topic rule.
        first = events[0]
        assert first.role == "user" and forms.TOPIC_RULE_LINE.search(first.content)
        assert len(forms.RULE_LINE.findall(first.content)) == 3
        # Superseding corrections (one date moved twice) and a revised amount.
        date = next(p for p in probes if p.value_kind == "date")
        assert len(date.superseded) == 2 and len(facts.history(date.label or "")) == 3
        # Tool-only identifiers, one of them with a superseded decoy.
        ids = [p for p in probes if p.category is Category.TOOL_IDENTIFIER]
        assert len(ids) == 3 and sum(bool(p.superseded) for p in ids) == 1
        # Sent versus drafted commitments, an artifact whose status changed.
        commitments = {p.expected[0] for p in probes if p.category is Category.COMMITMENT_STATUS}
        assert commitments == {"SENT", "DRAFTED"}
        artifact = next(p for p in probes if p.category is Category.ARTIFACT_STATUS)
        assert artifact.superseded == ["DRAFT"]
        # The drafted commitment follows the steer.
        steer = next(i for i, e in enumerate(events) if e.steer)
        drafted = next(p for p in probes if p.expected == ["DRAFTED"])
        assert events[steer + 1].id == drafted.source_event


def test_fits_cold_rebuild_bounds_except_early_constraints(
    original_items: list[SuiteItem],
) -> None:
    """The originals show little except the loss of early constraints: every tool record
    fits the projection (<= 32 records, <= 64 KiB), the turn-1 rules do not fit the last
    64 text messages."""
    for item in original_items:
        events = item.trace.events
        tools = [e for e in events if e.role == "tool"]
        assert len(tools) <= 32 and sum(len(e.content.encode()) for e in tools) <= 64 * 1024
        texts = [e for e in events if forms.is_text_message(e)]
        assert len(texts) > 64 and events[0] not in texts[-64:]


def test_neutral_vocabulary(original_items: list[SuiteItem]) -> None:
    text = " ".join(e.content for i in original_items for e in i.trace.events).lower()
    for word in ("wife", "husband", "girlfriend", "boyfriend", "divorce", "doctor",
                 "diagnosis", "pregnan", "religio", "password"):
        assert word not in text
