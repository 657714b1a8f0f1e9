"""Hard-suite placements: where the key facts sit relative to the folds' bounds.

Each check names a property of docs/architecture.md §6 and fails ``trace_placement_invalid``:

* three owner rules in turn 1 (topic, phone/postcode, passwords);
* exactly three corrections: a date that moves twice and an amount revised once;
* an early identifier outside both the last-64-text-message window and the tool
  projection bound (at least 32 newer tool records *and* at least 64 KiB of newer
  results counted as projected, i.e. each capped at its 16 KiB head), so that it is
  outside under either reading of "32 records or 64 KiB";
* an identifier in the middle of a long result (past its first 16 KiB, 30-70 % in);
* an identifier in the head of an oversized result whose record is inside the newest
  projected records, with a superseded decoy in an earlier tool result;
* the temporary password in exactly one tool result.
"""

from __future__ import annotations

import itertools

from efold.corpus import forms
from efold.corpus.errors import CorpusError
from efold.corpus.model import Category, Event, Probe, Trace
from efold.corpus.scoring import identifier_pattern
from efold.corpus.shapes import OVERSIZED_HEAD, PROJECTION_BYTES, PROJECTION_RECORDS, TEXT_WINDOW
from efold.errors import Code

HEAD_IDENTIFIER_LIMIT = 2 * 1024  # "at the head": within the first 2 KiB


def _fail(why: str) -> CorpusError:
    return CorpusError(Code.TRACE_PLACEMENT_INVALID, why)


def _size(event: Event) -> int:
    return len(event.content.encode())


def newer_load(events: list[Event], index: int) -> tuple[int, int, int]:
    """(text messages, tool records, projected tool bytes) strictly after ``index``;
    projected bytes cap each record at its 16 KiB head."""
    texts = records = projected = 0
    for event in events[index + 1 :]:
        if forms.is_text_message(event):
            texts += 1
        elif event.role == "tool":
            records += 1
            projected += min(_size(event), OVERSIZED_HEAD)
    return texts, records, projected


def _check_rules(events: list[Event]) -> None:
    first = next((e for e in events if forms.is_owner_turn(e)), None)
    text = first.content if first else ""
    if not (forms.TOPIC_RULE_LINE.search(text) and forms.PHONE_RULE_LINE.search(text)
            and forms.PASSWORD_RULE_LINE in text.splitlines()):
        raise _fail("turn 1 must hold the three owner rules")


def _check_corrections(events: list[Event], probes: list[Probe]) -> None:
    count = sum(len(forms.CORRECTION_LINE.findall(e.content)) for e in events)
    current = [p for p in probes if p.category is Category.SUPERSEDED_CURRENT]
    dates = [p for p in current if p.value_kind == "date" and len(p.superseded) == 2]
    amounts = [p for p in current if p.value_kind == "amount" and len(p.superseded) == 1]
    if count != 3 or not dates or not amounts:
        raise _fail("need three corrections: a date moved twice and an amount revised once")


def _locate(probe: Probe, events: list[Event], positions: dict[str, int]) -> tuple[int, int]:
    """(event index, character offset) of the probe's expected identifier."""
    index = positions[probe.source_event or ""]
    match = identifier_pattern(probe.expected[0]).search(events[index].content)
    if match is None:  # pragma: no cover - probe checks ran first
        raise _fail(f"{probe.id}: identifier not in its source")
    return index, match.start()


def _is_early(events: list[Event], index: int) -> bool:
    texts, records, projected = newer_load(events, index)
    return texts >= TEXT_WINDOW and records >= PROJECTION_RECORDS and projected >= PROJECTION_BYTES


def _is_mid(event: Event, offset: int) -> bool:
    size = _size(event)
    return size > OVERSIZED_HEAD and offset >= OVERSIZED_HEAD and 0.3 <= offset / size <= 0.7


def _is_projected_head(events: list[Event], index: int, offset: int) -> bool:
    event = events[index]
    _, records, projected = newer_load(events, index)
    return (
        _size(event) > OVERSIZED_HEAD
        and offset <= HEAD_IDENTIFIER_LIMIT
        and records < PROJECTION_RECORDS
        and projected + OVERSIZED_HEAD <= PROJECTION_BYTES
    )


def _has_earlier_decoy(probe: Probe, events: list[Event], index: int) -> bool:
    patterns = [identifier_pattern(v) for v in probe.superseded]
    return bool(patterns) and all(
        any(e.role == "tool" and p.search(e.content) for e in events[:index]) for p in patterns
    )


def _check_identifiers(events: list[Event], probes: list[Probe]) -> None:
    """Three *distinct* identifier probes must fill the early, mid and head roles."""
    positions = {e.id: i for i, e in enumerate(events)}
    located = [
        (p, *_locate(p, events, positions))
        for p in probes if p.category is Category.TOOL_IDENTIFIER
    ]
    early = {p.id for p, i, _ in located if _is_early(events, i)}
    mid = {p.id for p, i, offset in located if _is_mid(events[i], offset)}
    head = {p.id for p, i, offset in located
            if _is_projected_head(events, i, offset) and _has_earlier_decoy(p, events, i)}
    if not early:
        raise _fail("no early identifier outside the text window and the tool projection")
    if not mid:
        raise _fail("no identifier in the middle of a long result")
    if not head:
        raise _fail("no projected head-of-oversized identifier with a superseded decoy")
    if not any(len({a, b, c}) == 3 for a, b, c in itertools.product(early, mid, head)):
        raise _fail("the early, mid and head identifiers must be three different probes")


def _check_secret(events: list[Event], probes: list[Probe]) -> None:
    secrets = [p.secret for p in probes if p.category is Category.REDACTION and p.secret]
    for secret in secrets:
        holders = [e for e in events if secret in e.content]
        if len(holders) != 1 or holders[0].role != "tool":
            raise _fail("the temporary password must sit in exactly one tool result")
    credential_holders = [e for e in events if forms.CREDENTIAL_LINE.search(e.content)]
    if len(credential_holders) != len(secrets):
        raise _fail("a credential line without a redaction probe")


def check_hard_placements(trace: Trace, probes: list[Probe]) -> None:
    events = trace.events
    _check_rules(events)
    _check_corrections(events, probes)
    _check_identifiers(events, probes)
    _check_secret(events, probes)
