"""Validation: the gate every trace passes before anything else uses it.

``validate(item)`` raises ``CorpusError`` with one named code for the first rule the
item breaks, checked in this order:

1. ``trace_schema_invalid`` - message shapes (FORMS.md §1), ids, sessions, tool-call
   linkage, a steer anywhere but between a call and its result, probe-file binding.
2. ``trace_not_fictional``.
3. ``trace_shape_invalid`` / ``trace_missing_steer`` / ``trace_size_invalid`` - counts
   and sizes for the suite and family (``corpus.shapes``).
4. ``trace_missing_category`` - a probe category the suite requires is absent.
5. ``trace_identifier_outside_tool`` / ``trace_secret_outside_tool`` - an identifier,
   a probe's identifier value, the redaction secret or a credential line anywhere but in
   a tool result (owner/assistant text and tool-call arguments included).
6. ``probe_invalid`` - a probe whose fields, question or source do not match the trace
   (e.g. an abstention label that does occur, an expected value that is not the latest).
7. ``trace_placement_invalid`` (hard suites) - ``corpus.placement``.
"""

from __future__ import annotations

import msgspec

from efold.corpus import forms
from efold.corpus.errors import CorpusError
from efold.corpus.model import (
    PROBE_VERSION,
    TRACE_VERSION,
    Event,
    Probe,
    SuiteItem,
    Trace,
)
from efold.corpus.placement import check_hard_placements
from efold.corpus.probe_checks import check_probes
from efold.corpus.scoring import identifier_pattern
from efold.corpus.shapes import (
    HARD_SEED_MAX,
    HARD_SEED_MIN,
    OVERSIZED_HEAD,
    SHAPES,
    SuiteShape,
    generated_trace_id,
    hard_family,
)
from efold.errors import Code


def _fail(code: Code, detail: str) -> CorpusError:
    return CorpusError(code, detail)


def _check_event_fields(event: Event) -> None:
    bad = Code.TRACE_SCHEMA_INVALID
    if event.role == "tool":
        if event.tool_call_id is None or event.name not in forms.TOOL_SOURCES:
            raise _fail(bad, f"{event.id}: tool result without a known tool and call id")
        if event.source is not forms.TOOL_SOURCES[event.name] or event.tool_calls or event.steer:
            raise _fail(bad, f"{event.id}: tool result source or fields do not match")
        return
    if event.tool_call_id is not None or event.name is not None or event.source is not None:
        raise _fail(bad, f"{event.id}: tool fields on a {event.role} message")
    if event.role == "user":
        if event.tool_calls or not event.content:
            raise _fail(bad, f"{event.id}: owner message must be text without tool calls")
        if event.steer and not event.content.startswith(forms.STEER_PREFIX):
            raise _fail(bad, f"{event.id}: steer text must start with the steer prefix")
        return
    if event.steer:
        raise _fail(bad, f"{event.id}: only owner input can be a steer")
    if event.tool_calls is not None:
        if len(event.tool_calls) != 1 or event.content:
            raise _fail(bad, f"{event.id}: a tool call carries one call and no text")
        try:
            arguments = msgspec.json.decode(event.tool_calls[0].function.arguments)
        except (msgspec.DecodeError, RecursionError) as exc:  # too deeply nested: not JSON
            raise _fail(bad, f"{event.id}: tool-call arguments are not JSON") from exc
        if not isinstance(arguments, dict):
            raise _fail(bad, f"{event.id}: tool-call arguments must be a JSON object")
    elif not event.content:
        raise _fail(bad, f"{event.id}: assistant reply without text")


def _check_schema(item: SuiteItem) -> None:
    trace, probe_file = item.trace, item.probes
    bad = Code.TRACE_SCHEMA_INVALID
    header = trace.header
    if header.version != TRACE_VERSION:
        raise _fail(bad, f"trace version {header.version} is not {TRACE_VERSION}")
    if header.suite not in SHAPES:
        raise _fail(bad, f"unknown suite {header.suite!r}")
    if not trace.events:
        raise _fail(bad, "trace has no events")
    ids: set[str] = set()
    call_ids: set[str] = set()
    pending: tuple[str, str] | None = None  # (call id, tool name) awaiting its result
    steered = False
    session, day = 1, 1
    for event in trace.events:
        if event.id in ids:
            raise _fail(bad, f"{event.id}: duplicate event id")
        ids.add(event.id)
        if event.session not in (session, session + 1) or event.day < day:
            raise _fail(bad, f"{event.id}: sessions must count up by one, days never back")
        session, day = event.session, event.day
        _check_event_fields(event)
        if pending is not None:
            if event.steer and not steered:
                steered = True
                continue
            if event.role != "tool" or (event.tool_call_id, event.name) != pending:
                raise _fail(bad, f"{event.id}: expected the result of {pending[0]}")
            pending, steered = None, False
            continue
        if event.steer:
            raise _fail(bad, f"{event.id}: a steer must sit between a tool call and its result")
        if event.role == "tool":
            raise _fail(bad, f"{event.id}: tool result without a pending call")
        if event.tool_calls:
            call = event.tool_calls[0]
            if call.id in call_ids:
                raise _fail(bad, f"{event.id}: duplicate tool call id")
            call_ids.add(call.id)
            pending = (call.id, call.function.name)
    if pending is not None:
        raise _fail(bad, "trace ends with a tool call awaiting its result")
    if trace.events[0].session != 1 or session != header.sessions:
        raise _fail(bad, f"header says {header.sessions} sessions, events say {session}")
    if probe_file.trace_id != header.trace_id or probe_file.version != PROBE_VERSION:
        raise CorpusError(Code.PROBE_INVALID, "probe file is not bound to this trace")
    probe_ids = [p.id for p in probe_file.probes]
    if len(set(probe_ids)) != len(probe_ids):
        raise CorpusError(Code.PROBE_INVALID, "duplicate probe id")
    if any(p.trace_id != header.trace_id or p.version != PROBE_VERSION for p in probe_file.probes):
        raise CorpusError(Code.PROBE_INVALID, "a probe is bound to another trace or version")


def _within(value: int, bounds: tuple[int, int]) -> bool:
    return bounds[0] <= value <= bounds[1]


def _check_family(trace: Trace, shape: SuiteShape) -> None:
    header = trace.header
    if header.family not in shape.families:
        raise _fail(Code.TRACE_SHAPE_INVALID, f"family {header.family!r} not in this suite")
    if shape.record_bytes is None:  # the original suite has no seeds
        if header.seed is not None:
            raise _fail(Code.TRACE_SHAPE_INVALID, "an original trace has no seed")
        return
    seed = header.seed
    if seed is None or not HARD_SEED_MIN <= seed <= HARD_SEED_MAX:
        raise _fail(Code.TRACE_SEED_OUT_OF_RANGE, f"seed {seed} outside 101-124")
    if header.family != hard_family(seed) or header.trace_id != generated_trace_id(
        header.suite, seed
    ):
        raise _fail(Code.TRACE_SHAPE_INVALID, "family or trace id does not match the seed")


def _check_counts(trace: Trace, shape: SuiteShape) -> None:
    events = trace.events
    if not _within(trace.header.sessions, shape.sessions):
        raise _fail(Code.TRACE_SHAPE_INVALID, f"{trace.header.sessions} sessions")
    if shape.days_are_sessions and any(e.day != e.session for e in events):
        raise _fail(Code.TRACE_SHAPE_INVALID, "each session of this suite is one day")
    owner = sum(1 for e in events if forms.is_owner_turn(e))
    if not _within(owner, shape.owner_turns):
        raise _fail(Code.TRACE_SHAPE_INVALID, f"{owner} owner turns")
    steers = sum(1 for e in events if e.steer)
    if steers == 0:
        raise _fail(Code.TRACE_MISSING_STEER, "no mid-turn steer")
    if steers != shape.steers:
        raise _fail(Code.TRACE_SHAPE_INVALID, f"{steers} steers, expected {shape.steers}")
    sizes = [len(e.content.encode()) for e in events if e.role == "tool"]
    if not _within(len(sizes), shape.tool_records):
        raise _fail(Code.TRACE_SHAPE_INVALID, f"{len(sizes)} tool records")
    if shape.record_bytes is not None and not all(_within(s, shape.record_bytes) for s in sizes):
        raise _fail(Code.TRACE_SIZE_INVALID, "a tool record is outside the size bounds")
    if shape.oversized_records is not None:
        oversized = sum(1 for s in sizes if s > OVERSIZED_HEAD)
        if not _within(oversized, shape.oversized_records):
            raise _fail(Code.TRACE_SIZE_INVALID, f"{oversized} results over 16 KiB")
    if shape.token_estimate is not None:
        estimate = forms.estimate_tokens(events)
        if not _within(estimate, shape.token_estimate):
            raise _fail(Code.TRACE_SIZE_INVALID, f"chars/4 estimate {estimate}")


def _check_categories(probes: list[Probe], shape: SuiteShape) -> None:
    present = {p.category for p in probes}
    missing = shape.categories - present
    if missing:
        raise _fail(Code.TRACE_MISSING_CATEGORY, f"missing {sorted(missing)}")
    extra = present - shape.categories
    if extra:
        raise CorpusError(Code.PROBE_INVALID, f"category not in this suite: {sorted(extra)}")
    if not _within(len(probes), shape.probes):
        raise CorpusError(Code.PROBE_INVALID, f"{len(probes)} probes")


def _outside_tool_texts(trace: Trace) -> list[tuple[str, str]]:
    texts: list[tuple[str, str]] = []
    for event in trace.events:
        if event.role == "tool":
            continue
        if event.content:
            texts.append((event.id, event.content))
        for call in event.tool_calls or ():
            texts.append((event.id, call.function.arguments))
    return texts


def _check_tool_only(trace: Trace, probes: list[Probe]) -> None:
    values = [
        v for p in probes if p.category == "tool_identifier" for v in (*p.expected, *p.superseded)
    ]
    patterns = [identifier_pattern(v) for v in values]
    secrets = [p.secret.lower() for p in probes if p.secret]
    runs = {s[i : i + 8] for s in secrets for i in range(len(s) - 7)}
    for event_id, text in _outside_tool_texts(trace):
        if forms.IDENTIFIER.search(text) or any(p.search(text) for p in patterns):
            raise _fail(Code.TRACE_IDENTIFIER_OUTSIDE_TOOL, f"{event_id}: identifier")
        lowered = text.lower()
        if forms.CREDENTIAL_LINE.search(text) or any(run in lowered for run in runs):
            raise _fail(Code.TRACE_SECRET_OUTSIDE_TOOL, f"{event_id}: secret or credential")


def validate(item: SuiteItem) -> None:
    """Raise ``CorpusError`` (named code) unless ``item`` may be used; see module doc."""
    _check_schema(item)
    trace, probes = item.trace, item.probes.probes
    if not trace.header.fictional:
        raise _fail(Code.TRACE_NOT_FICTIONAL, f"{trace.header.trace_id} is not marked fictional")
    shape = SHAPES[trace.header.suite]
    _check_family(trace, shape)
    _check_counts(trace, shape)
    _check_categories(probes, shape)
    _check_tool_only(trace, probes)
    check_probes(trace, probes)
    if shape.record_bytes is not None:
        check_hard_placements(trace, probes)
