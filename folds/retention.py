"""What a store arm retains: every conversation record, minus credential-bearing results.

Privacy rule (reference "Hard suite"): a tool result that contains a textual credential
assignment is omitted *whole* from retention and counted; no partial salvage is tried.
An identifier that shares a result with a credential is therefore deliberately
unavailable to the store and the pack; a miss there reflects this rule, not a retrieval
fault.

A *textual credential assignment* is defined in ``efold.corpus.credentials``.
"""

from __future__ import annotations

from collections.abc import Sequence

from efold.corpus.credentials import contains_credential_assignment
from efold.corpus.model import Event
from efold.folds.checkpoint import HistoryRecord, RetainedStore

__all__ = ["contains_credential_assignment", "record_kind", "record_text", "retain"]

def record_kind(event: Event) -> str:
    if event.role == "tool":
        return event.source.value if event.source is not None else "tool"
    return "owner" if event.role == "user" else "assistant"


def record_text(event: Event) -> str:
    """The retained text of an event: its content, plus its tool calls for an assistant
    message (so a search for a call's arguments finds the turn)."""
    lines = [event.content] if event.content else []
    for call in event.tool_calls or ():
        lines.append(f"(tool call {call.function.name} {call.function.arguments})")
    return "\n".join(lines)


def retain(transcript: Sequence[Event]) -> RetainedStore:
    """Retained records for a session transcript (ids and order preserved)."""
    records: list[HistoryRecord] = []
    omitted = 0
    for seq, event in enumerate(transcript):
        text = record_text(event)
        if event.role == "tool" and contains_credential_assignment(text):
            omitted += 1
            continue
        if not text.strip():
            continue
        records.append(
            HistoryRecord(
                id=event.id,
                seq=seq,
                role=event.role,
                kind=record_kind(event),
                session=event.session,
                day=event.day,
                text=text,
            )
        )
    return RetainedStore(records=records, omitted_credential=omitted)
