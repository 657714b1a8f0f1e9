"""The reader projection: what of a trace a reader (or a fold) may ever see.

Invariant: the projection is built from ``Trace.events`` alone, field by field, into
fresh ``Event`` values that carry only the chat-shaped fields. Probes, expected values,
categories, labels, the header (suite, family, seed, title) and any field added to the
model later for evaluators can never reach it, because nothing here reads them.
"""

from __future__ import annotations

from efold.corpus.model import Event, ToolCall, Trace


def _reader_event(event: Event) -> Event:
    calls = (
        [ToolCall(id=c.id, function=c.function) for c in event.tool_calls]
        if event.tool_calls
        else None
    )
    return Event(
        id=event.id,
        session=event.session,
        day=event.day,
        role=event.role,
        content=event.content,
        tool_calls=calls,
        tool_call_id=event.tool_call_id,
        name=event.name,
        source=event.source,
        steer=event.steer,
    )


def reader_projection(trace: Trace) -> list[Event]:
    """The conversation in order, as a reader sees it (never the probes)."""
    return [_reader_event(e) for e in trace.events]
