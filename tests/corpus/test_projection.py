"""The reader projection never carries probes, expected values, categories or
evaluator-only fields."""

from __future__ import annotations

import msgspec
import pytest

from efold.corpus import Category, Event, SuiteItem, reader_projection
from efold.corpus.model import Probe

READER_FIELDS = {"kind", "id", "session", "day", "role", "content", "tool_calls",
                 "tool_call_id", "name", "source", "steer"}


def _never_in_conversation(probe: Probe) -> list[str]:
    """Values a reader must never see in the projection: for abstention probes the label
    (the thing that never came up) and, for any probe, its question and metadata."""
    values = [probe.question, probe.id]
    if probe.category is Category.ABSTENTION:
        values += [probe.label or "", *probe.expected, *probe.forbidden]
    return [v for v in values if v]


@pytest.fixture(params=["original", "hard", "hard-distractors"])
def items(request: pytest.FixtureRequest) -> list[SuiteItem]:
    name = {"original": "original_items", "hard": "hard_items",
            "hard-distractors": "distractor_items"}[request.param]
    return request.getfixturevalue(name)  # type: ignore[no-any-return]


def test_projection_holds_no_probe_content(items: list[SuiteItem]) -> None:
    for item in items:
        projection = reader_projection(item.trace)
        encoded = msgspec.json.encode(projection).decode().lower()
        for probe in item.probes.probes:
            for value in _never_in_conversation(probe):
                assert value.lower() not in encoded, (probe.id, value)
        for key in ('"category"', '"expected"', '"superseded"', '"forbidden"', '"secret"',
                    '"question"', '"trace_id"', '"fictional"', '"family"', '"seed"'):
            assert key not in encoded


def test_projection_events_carry_only_chat_fields(items: list[SuiteItem]) -> None:
    for item in items[:2]:
        projection = reader_projection(item.trace)
        assert [e.id for e in projection] == [e.id for e in item.trace.events]
        assert all(type(e) is Event for e in projection)
        for raw in msgspec.json.decode(msgspec.json.encode(projection)):
            assert set(raw) <= READER_FIELDS
        # Fresh values: the projection shares no objects with the stored trace.
        assert all(a is not b for a, b in zip(projection, item.trace.events, strict=True))


def test_abstention_labels_never_occur_in_any_trace(items: list[SuiteItem]) -> None:
    for item in items:
        text = "\n".join(e.content for e in item.trace.events).lower()
        labels = [p.label for p in item.probes.probes if p.category is Category.ABSTENTION]
        assert labels
        assert all(label and label.lower() not in text for label in labels)
