"""The session transcript a trace produces, and its chat-shaped reader messages.

A trace stores a mid-turn steer where the owner typed it: between an assistant tool call
and that call's result. A live session cannot put it there: the harness delivers a steer
with the *next* model request, after the in-flight call's results (reference "Replay and
arms": each steer "must reach the next model request"). So the transcript every arm
starts from moves each steer to just after the tool results that follow it. Every arm
cuts and counts on this order, never on the raw file order.
"""

from __future__ import annotations

from collections.abc import Sequence

from efold.corpus.model import Event
from efold.errors import Code
from efold.folds.checkpoint import ReaderMessage
from efold.folds.errors import FoldError


def session_transcript(events: Sequence[Event]) -> list[Event]:
    """The events in session order (steers after the results of the in-flight call).

    Refuses a trace that is not a conversation: an empty one, or ids that repeat
    (record ids must be stable and unique for the store to cite them).
    """
    if not events:
        raise FoldError(Code.FOLD_INPUT_INVALID, "the trace prefix has no events")
    seen: set[str] = set()
    ordered: list[Event] = []
    # Invariant: ``pending`` holds steers typed while a tool call was in flight; they
    # are released before the next event that is not a tool result.
    pending: list[Event] = []
    for event in events:
        if event.id in seen:
            raise FoldError(Code.FOLD_INPUT_INVALID, f"event id {event.id!r} repeats")
        seen.add(event.id)
        if event.role == "user" and event.steer:
            pending.append(event)
            continue
        if event.role != "tool" and pending:
            ordered.extend(pending)
            pending.clear()
        ordered.append(event)
    ordered.extend(pending)
    return ordered


def reader_message(event: Event) -> ReaderMessage:
    """The chat-shaped message an event becomes in a native transcript."""
    if event.role == "tool":
        return ReaderMessage(
            role="tool", content=event.content, tool_call_id=event.tool_call_id, name=event.name
        )
    if event.role == "assistant" and event.tool_calls:
        return ReaderMessage(role="assistant", content=event.content, tool_calls=list(event.tool_calls))
    return ReaderMessage(role=event.role, content=event.content)



