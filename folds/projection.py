"""The cold boundary: the last 64 text messages plus a bounded tool-history projection.

This is what a model change (``cold-rebuild``) hands the new reader, and the base the
``store`` and ``pack`` arms build on (reference "Replay and arms", arm b):

* the newest ``TEXT_WINDOW`` (64) text messages (owner, steer and assistant text; tool
  calls are dropped with their results);
* the tool-history projection: the newest tool records, newest first, while both bounds
  hold: at most ``PROJECTION_RECORDS`` (32) records and at most ``PROJECTION_BYTES``
  (64 KiB) of retained text. A result over ``RESULT_HEAD_BYTES`` (16 KiB) keeps its first
  16 KiB. The projection is a contiguous run of the newest records: the first record
  that does not fit ends it (an older, smaller record never jumps the queue).

The projection is one owner-channel message placed before the text window, each record
cited as ``[record <id>]`` so a reader with the lookup tool can fetch it whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from efold.corpus.forms import is_text_message
from efold.corpus.model import Event
from efold.folds.checkpoint import ProjectionStats, ReaderMessage, cite

TEXT_WINDOW = 64
PROJECTION_RECORDS = 32
PROJECTION_BYTES = 64 * 1024
RESULT_HEAD_BYTES = 16 * 1024

PROJECTION_HEADER = "Tool history projection"


@dataclass(frozen=True)
class ColdBoundary:
    messages: list[ReaderMessage]
    stats: ProjectionStats
    projected_ids: list[str]
    # What ``messages`` is made of, as events: the projected tool records (each result
    # cut to the head it keeps) and the text window (tool calls dropped, as in
    # ``messages``).
    projected: list[Event]
    window: list[Event]


def utf8_head(text: str, limit: int) -> str:
    """The longest prefix of ``text`` of at most ``limit`` UTF-8 bytes."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", errors="ignore")


def _render_record(event: Event, text: str, total_bytes: int) -> str:
    tool = event.name or "tool"
    source = event.source.value if event.source is not None else "tool"
    lines = [f"{cite(event.id)} {tool} ({source}), day {event.day}:", text]
    kept = len(text.encode("utf-8"))
    if kept < total_bytes:
        lines.append(f"[truncated: the first {kept} of {total_bytes} bytes are shown]")
    return "\n".join(lines)


def cold_boundary(transcript: Sequence[Event]) -> ColdBoundary:
    """The cold-rebuild context for a session transcript (see the module docstring)."""
    text_events = [e for e in transcript if is_text_message(e)]
    window = text_events[-TEXT_WINDOW:]
    tool_events = [e for e in transcript if e.role == "tool"]

    projected: list[tuple[Event, str, int]] = []
    used = 0
    truncated = 0
    for event in reversed(tool_events):
        if len(projected) >= PROJECTION_RECORDS:
            break
        total = len(event.content.encode("utf-8"))
        kept_text = utf8_head(event.content, RESULT_HEAD_BYTES)
        kept = len(kept_text.encode("utf-8"))
        if used + kept > PROJECTION_BYTES:
            break
        used += kept
        truncated += kept < total
        projected.append((event, kept_text, total))
    projected.reverse()

    messages: list[ReaderMessage] = []
    if projected:
        header = (
            f"{PROJECTION_HEADER}: the {len(projected)} newest of {len(tool_events)} tool "
            f"records (at most {PROJECTION_RECORDS} records or {PROJECTION_BYTES // 1024} KiB; "
            f"a result over {RESULT_HEAD_BYTES // 1024} KiB keeps its first "
            f"{RESULT_HEAD_BYTES // 1024} KiB). Older tool results are not shown."
        )
        body = "\n\n".join(_render_record(e, t, n) for e, t, n in projected)
        messages.append(ReaderMessage(role="user", content=header + "\n\n" + body))
    window = [msgspec.structs.replace(e, tool_calls=None) for e in window]
    messages.extend(ReaderMessage(role=e.role, content=e.content) for e in window)

    stats = ProjectionStats(
        text_messages_available=len(text_events),
        text_messages_kept=len(window),
        tool_records_available=len(tool_events),
        tool_records_projected=len(projected),
        tool_records_dropped=len(tool_events) - len(projected),
        tool_records_truncated=truncated,
        projected_bytes=used,
    )
    return ColdBoundary(messages=messages, stats=stats, projected_ids=[e.id for e, _, _ in projected],
                        projected=[msgspec.structs.replace(e, content=t) for e, t, _ in projected],
                        window=window)
