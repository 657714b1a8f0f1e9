"""Each kind of bad trace is rejected with its own fixed code."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from efold.corpus import Category, CorpusError, Event, SuiteItem, Trace, forms, validate
from efold.errors import Code

replace = msgspec.structs.replace


def with_events(item: SuiteItem, events: list[Event], **header: Any) -> SuiteItem:
    trace = Trace(header=replace(item.trace.header, **header), events=events)
    return SuiteItem(trace=trace, probes=item.probes)


def with_probes(item: SuiteItem, keep: Callable[[Any], bool] = lambda p: True,
                change: Callable[[Any], Any] = lambda p: p) -> SuiteItem:
    probes = [change(p) for p in item.probes.probes if keep(p)]
    return SuiteItem(trace=item.trace, probes=replace(item.probes, probes=probes))


def edit(item: SuiteItem, event_id: str | None, **fields: Any) -> SuiteItem:
    events = [replace(e, **fields) if e.id == event_id else e for e in item.trace.events]
    return with_events(item, events)


def rejected(item: SuiteItem) -> Code:
    with pytest.raises(CorpusError) as err:
        validate(item)
    return err.value.code


def first(item: SuiteItem, predicate: Callable[[Event], bool]) -> Event:
    return next(e for e in item.trace.events if predicate(e))


@pytest.fixture
def orig(original_items: list[SuiteItem]) -> SuiteItem:
    return original_items[0]


@pytest.fixture
def hard(hard_items: list[SuiteItem]) -> SuiteItem:
    return hard_items[0]


def test_valid_items_pass(orig: SuiteItem, hard: SuiteItem) -> None:
    validate(orig)
    validate(hard)


def test_not_fictional(orig: SuiteItem, hard: SuiteItem) -> None:
    assert rejected(with_events(orig, orig.trace.events, fictional=False)) is Code.TRACE_NOT_FICTIONAL
    assert rejected(with_events(hard, hard.trace.events, fictional=False)) is Code.TRACE_NOT_FICTIONAL


def test_schema_violations(orig: SuiteItem) -> None:
    events = orig.trace.events
    steer = next(i for i, e in enumerate(events) if e.steer)
    # A steer moved out of its tool call (after the result) is not a mid-turn steer.
    moved = [*events[:steer], events[steer + 1], events[steer], *events[steer + 2 :]]
    assert rejected(with_events(orig, moved)) is Code.TRACE_SCHEMA_INVALID
    # A tool result with no call before it.
    call = next(i for i, e in enumerate(events) if e.tool_calls)
    assert rejected(with_events(orig, events[:call] + events[call + 1 :])) is Code.TRACE_SCHEMA_INVALID
    # A duplicate event id, a session that jumps, an unknown suite, a wrong source.
    dup = [events[0], replace(events[1], id=events[0].id), *events[2:]]
    assert rejected(with_events(orig, dup)) is Code.TRACE_SCHEMA_INVALID
    jump = [replace(e, session=e.session + 1) if i > 3 else e for i, e in enumerate(events)]
    assert rejected(with_events(orig, jump)) is Code.TRACE_SCHEMA_INVALID
    assert rejected(with_events(orig, events, suite="holdout")) is Code.TRACE_SCHEMA_INVALID
    tool = first(orig, lambda e: e.role == "tool" and e.name == "email_read")
    assert rejected(edit(orig, tool.id, source=forms.TOOL_SOURCES["chat_read"])) is (
        Code.TRACE_SCHEMA_INVALID)
    # Tool-call arguments must be a JSON object.
    call_event = events[call]
    bad_call = replace(call_event.tool_calls[0], function=replace(
        call_event.tool_calls[0].function, arguments="[1]"))
    assert rejected(edit(orig, call_event.id, tool_calls=[bad_call])) is Code.TRACE_SCHEMA_INVALID


def test_probe_file_bound_to_another_trace(orig: SuiteItem) -> None:
    other = SuiteItem(trace=orig.trace, probes=replace(orig.probes, trace_id="someone-else"))
    assert rejected(other) is Code.PROBE_INVALID


def test_wrong_shape_for_the_suite_or_family(orig: SuiteItem, hard: SuiteItem) -> None:
    assert rejected(with_events(orig, orig.trace.events, family="kiln")) is Code.TRACE_SHAPE_INVALID
    assert rejected(with_events(hard, hard.trace.events, family="cider")) is Code.TRACE_SHAPE_INVALID
    assert rejected(with_events(hard, hard.trace.events, seed=140)) is Code.TRACE_SEED_OUT_OF_RANGE
    # Drop the last day's plain owner turns (and their replies): too few owner turns.
    events = orig.trace.events
    cut = next(i for i, e in enumerate(events) if e.session == 5)
    short = events[:cut]
    assert rejected(with_events(orig, short, sessions=4)) is Code.TRACE_SHAPE_INVALID
    # A hard trace re-labelled as original has the wrong counts for that suite.
    relabel = with_events(hard, hard.trace.events, suite="original", family="stage-hire", seed=None)
    assert rejected(relabel) is Code.TRACE_SHAPE_INVALID


def test_missing_steer(orig: SuiteItem) -> None:
    events = [e for e in orig.trace.events if not e.steer]
    assert rejected(with_events(orig, events)) is Code.TRACE_MISSING_STEER


def test_missing_category(orig: SuiteItem, hard: SuiteItem) -> None:
    assert rejected(with_probes(orig, keep=lambda p: p.category is not Category.ABSTENTION)) is (
        Code.TRACE_MISSING_CATEGORY)
    assert rejected(with_probes(hard, keep=lambda p: p.category is not Category.REDACTION)) is (
        Code.TRACE_MISSING_CATEGORY)


def test_size_outside_the_hard_bounds(hard: SuiteItem) -> None:
    tool = first(hard, lambda e: e.role == "tool" and len(e.content) < 16 * 1024)
    assert rejected(edit(hard, tool.id, content=tool.content[:4000])) is Code.TRACE_SIZE_INVALID
    # Inflating an ordinary record past 16 KiB makes too many oversized results...
    assert rejected(edit(hard, tool.id, content=tool.content * 2)) is Code.TRACE_SIZE_INVALID


def test_size_outside_the_original_bounds(orig: SuiteItem) -> None:
    # Tool results cut back to their first lines (the originals' old size) fall under the
    # 11,000 chars/4 floor that keeps the compaction arms above their trigger.
    short = [replace(e, content="\n".join(e.content.split("\n")[:8])) if e.role == "tool" else e
             for e in orig.trace.events]
    assert rejected(with_events(orig, short)) is Code.TRACE_SIZE_INVALID
    # ... and results padded far past realistic length go over the 14,000 ceiling.
    tool = first(orig, lambda e: e.role == "tool")
    assert rejected(edit(orig, tool.id, content=tool.content + " more" * 2_000)) is (
        Code.TRACE_SIZE_INVALID)


def test_identifier_outside_tool_output(orig: SuiteItem, hard: SuiteItem) -> None:
    ident = next(p for p in orig.probes.probes if p.category is Category.TOOL_IDENTIFIER)
    reply = first(orig, lambda e: e.role == "assistant" and bool(e.content))
    leak = edit(orig, reply.id, content=reply.content + f" Reference {ident.expected[0]}.")
    assert rejected(leak) is Code.TRACE_IDENTIFIER_OUTSIDE_TOOL
    # Normalised forms count too, and so do tool-call arguments.
    spaced = ident.expected[0].replace("-", " ").lower()
    owner = first(orig, lambda e: e.role == "user")
    assert rejected(edit(orig, owner.id, content=owner.content + " " + spaced)) is (
        Code.TRACE_IDENTIFIER_OUTSIDE_TOOL)
    call = first(hard, lambda e: bool(e.tool_calls))
    assert call.tool_calls is not None
    args = replace(call.tool_calls[0].function, arguments='{"query": "XY-AB12-345"}')
    assert rejected(edit(hard, call.id, tool_calls=[replace(call.tool_calls[0], function=args)])) is (
        Code.TRACE_IDENTIFIER_OUTSIDE_TOOL)


def test_secret_outside_tool_output(hard: SuiteItem, orig: SuiteItem) -> None:
    secret = next(p.secret for p in hard.probes.probes if p.secret)
    assert secret
    reply = first(hard, lambda e: e.role == "assistant" and bool(e.content))
    # Even an 8-character run of the secret in an assistant reply is a leak.
    leak = edit(hard, reply.id, content=reply.content + " " + secret[2:10])
    assert rejected(leak) is Code.TRACE_SECRET_OUTSIDE_TOOL
    owner = first(orig, lambda e: e.role == "user")
    credential = edit(orig, owner.id, content=owner.content + "\npassword: hunter22")
    assert rejected(credential) is Code.TRACE_SECRET_OUTSIDE_TOOL


def test_probes_that_do_not_match_the_trace(orig: SuiteItem) -> None:
    # An abstention label that does occur in the conversation.
    abst = next(p for p in orig.probes.probes if p.category is Category.ABSTENTION)
    reply = first(orig, lambda e: e.role == "assistant" and bool(e.content))
    assert rejected(edit(orig, reply.id, content=reply.content + f" The {abst.label} is 7.")) is (
        Code.PROBE_INVALID)
    # An expected value that is not the latest under its label (the decoy).
    decoyed = with_probes(orig, change=lambda p: replace(p, expected=p.superseded[:1])
                          if p.category is Category.TOOL_IDENTIFIER and p.superseded else p)
    assert rejected(decoyed) is Code.PROBE_INVALID
    # A question that does not name the label, a question without the preamble.
    renamed = with_probes(orig, change=lambda p: replace(p, label="docket number")
                          if p.category is Category.TOOL_IDENTIFIER else p)
    assert rejected(renamed) is Code.PROBE_INVALID
    bare = with_probes(orig, change=lambda p: replace(p, question=p.question.split(". ", 2)[-1]))
    assert rejected(bare) is Code.PROBE_INVALID
    # A status probe expecting a token from the other vocabulary.
    wrong = with_probes(orig, change=lambda p: replace(p, expected=["SENT"])
                        if p.category is Category.ARTIFACT_STATUS else p)
    assert rejected(wrong) is Code.PROBE_INVALID


def test_hard_placements(hard: SuiteItem) -> None:
    events = hard.trace.events
    head = [p for p in hard.probes.probes if p.category is Category.TOOL_IDENTIFIER][2]
    pack = first(hard, lambda e: e.id == head.source_event)
    # Move the booking ref from the head of the pack to its tail: the head control is lost.
    line = forms.fact_line("Booking ref", head.expected[0])
    body = pack.content.replace(line, "x" * len(line), 1)
    moved = body[: -len(line) - 1] + "\n" + line
    assert rejected(edit(hard, pack.id, content=moved)) is Code.TRACE_PLACEMENT_INVALID
    # Rules not in turn 1.
    rules = events[0]
    no_rules = edit(hard, rules.id, content=rules.content.replace(
        forms.PASSWORD_RULE_LINE, "Keep it tidy."))
    assert rejected(no_rules) is Code.TRACE_PLACEMENT_INVALID
    # A fourth correction.
    reply = first(hard, lambda e: e.role == "assistant" and bool(e.content))
    extra = edit(hard, reply.id, content=reply.content + "\n" + forms.correction_line(
        "pallet count", "4", "5"))
    assert rejected(extra) is Code.TRACE_PLACEMENT_INVALID


def test_early_identifier_must_be_outside_the_projection(hard: SuiteItem) -> None:
    """Move the account reference's record to the end: it is no longer early."""
    early = next(p for p in hard.probes.probes if p.category is Category.TOOL_IDENTIFIER)
    events = hard.trace.events
    at = next(i for i, e in enumerate(events) if e.id == early.source_event)
    rest = [*events[: at - 1], *events[at + 1 :]]
    last = rest[-1]
    # The call and its result move to just before the closing exchange of the last session.
    call, result = (replace(e, session=last.session, day=last.day) for e in events[at - 1 : at + 1])
    moved = [*rest[:-2], call, result, *rest[-2:]]
    assert rejected(with_events(hard, moved)) is Code.TRACE_PLACEMENT_INVALID
