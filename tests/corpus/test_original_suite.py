"""The bundled original suite: four hand-written fictional traces (docs/architecture.md §6)."""

from __future__ import annotations

from collections import Counter

import pytest

from efold.corpus import Category, CorpusError, SuiteItem, forms, load_suite, validate
from efold.corpus.probe_checks import FactIndex
from efold.corpus.shapes import (
    ORIGINAL_FAMILIES,
    OVERSIZED_HEAD,
    PROJECTION_BYTES,
    PROJECTION_RECORDS,
    SHAPES,
)
from efold.errors import Code
from efold.folds.summariser import TOOL_HEAD_CHARS, TOOL_TAIL_CHARS


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
        # The hand-written suite is unchanged: the field categories (issue 19) and
        # redaction are the hard suite's.
        field = {Category.REDACTION, Category.DECISION_REASON, Category.PRIORITY_ORDER,
                 Category.CROSS_REFERENCE, Category.CONTRADICTION, Category.BOUNDARY}
        assert set(categories) == set(Category) - field
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
    fits the projection (<= 32 records, <= 64 KiB, each result counted up to its 16 KiB
    head), the turn-1 rules do not fit the last 64 text messages."""
    for item in original_items:
        events = item.trace.events
        tools = [e for e in events if e.role == "tool"]
        retained = sum(min(len(e.content.encode()), OVERSIZED_HEAD) for e in tools)
        assert len(tools) <= PROJECTION_RECORDS and retained <= PROJECTION_BYTES
        assert all(len(e.content.encode()) <= OVERSIZED_HEAD for e in tools)
        texts = [e for e in events if forms.is_text_message(e)]
        assert len(texts) > 64 and events[0] not in texts[-64:]


def test_realistic_sizes_above_the_smallest_compaction_trigger(
    original_items: list[SuiteItem],
) -> None:
    """Tool results are realistic in length (quoted threads, whole pages and documents),
    so each trace is 11k-14k chars/4 tokens: over the 6,400-token smallest trigger with
    room for its 4,000-token recent tail, so the compaction arms cross their boundary."""
    assert SHAPES["original"].token_estimate == (11_000, 14_000)
    for item in original_items:
        events = item.trace.events
        assert 11_000 <= forms.estimate_tokens(events) <= 14_000
        tools = [e for e in events if e.role == "tool"]
        assert sum(len(e.content.encode()) for e in tools) >= 32 * 1024
        # Short ones (a calendar week, a parcel history) are still not one-liners.
        assert all(len(e.content) >= 400 for e in tools)
        assert sum(len(e.content) >= 1_000 for e in tools) >= len(tools) // 2


def test_fact_lines_sit_at_the_head_or_tail_of_their_results(
    original_items: list[SuiteItem],
) -> None:
    """Unlike the hard suite (which hides an identifier mid-result on purpose), every
    fact line of an original tool result lies within the head or tail that a compaction
    summary keeps, so the originals measure the loss of early constraints, not of
    mid-result values."""
    for item in original_items:
        for event in item.trace.events:
            if event.role != "tool":
                continue
            text = event.content
            for match in forms.FACT_LINE.finditer(text):
                if match.group("label").lower() in ("estimated delivery", "delivery report"):
                    continue  # documented context lines, never asked about
                assert match.end() <= TOOL_HEAD_CHARS or len(text) - match.start() <= (
                    TOOL_TAIL_CHARS
                ), (event.id, match.group(0))


def test_neutral_vocabulary(original_items: list[SuiteItem]) -> None:
    text = " ".join(e.content for i in original_items for e in i.trace.events).lower()
    for word in ("wife", "husband", "girlfriend", "boyfriend", "divorce", "doctor",
                 "diagnosis", "pregnan", "religio", "password"):
        assert word not in text
