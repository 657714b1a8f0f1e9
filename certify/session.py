"""The persisted session endurance folds: parent-linked JSONL entries, fsynced.

Format ``efold-session-v1``, one JSON object per line, each naming its ``parent`` (the
previous entry's id; None for the first), so the active branch is the chain walked back
from the last line:

* ``{"type": "event", "id", "parent", "event": <trace event>}``: a conversation event;
* ``{"type": "compaction", "id", "parent", "cycle", "messages", "first_kept_id",
  "poison", "injected"}``: a fold's stored summary. ``messages`` are the summary
  messages, the last ending with the cycle-unique ``poison``; ``first_kept_id`` the
  first event kept verbatim after them (None: none kept); ``injected`` marks the one
  compaction the closure fixture stores with a malformed boundary.

The built context of a branch (``built_context``) is the latest compaction's messages
followed by the live events: those from its ``first_kept_id`` on, and everything
appended after it. Writes are appends of whole lines followed by ``fsync``; a reader
refuses a torn or unknown line (``certify_session_invalid``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import msgspec

from efold.corpus.model import Event
from efold.errors import Code, EfoldError
from efold.folds.checkpoint import ReaderMessage
from efold.folds.transcript import reader_message


class SessionError(EfoldError):
    """A persisted session that does not read back whole."""


class EventEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="event",
                 tag_field="type"):
    id: str
    parent: str | None
    event: Event


class CompactionEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True,
                      tag="compaction", tag_field="type"):
    id: str
    parent: str | None
    cycle: int
    messages: list[ReaderMessage]
    first_kept_id: str | None
    poison: str
    injected: bool = False


Entry = EventEntry | CompactionEntry
_DECODER = msgspec.json.Decoder(Entry)


def encode_line(entry: Entry) -> bytes:
    return msgspec.json.encode(entry) + b"\n"


class SyncedAppend:
    """A new file written by whole appends, each flushed and fsynced before it returns."""

    def __init__(self, path: Path) -> None:
        self._file = open(path, "xb")  # closed by close()

    def append(self, data: bytes) -> None:
        self._file.write(data)
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


class SessionWriter:
    """Appends entries to one session file, each line whole and fsynced.

    # Invariant: ``last_id`` is the id of the last line written (None before any), the
    # parent of the next entry.
    """

    def __init__(self, path: Path) -> None:
        self.last_id: str | None = None
        self._file = SyncedAppend(path)

    def append_events(self, events: Sequence[Event]) -> None:
        lines = []
        for event in events:
            lines.append(encode_line(EventEntry(id=event.id, parent=self.last_id, event=event)))
            self.last_id = event.id
        self._file.append(b"".join(lines))

    def append_compaction(self, *, entry_id: str, cycle: int, messages: list[ReaderMessage],
                          first_kept_id: str | None, poison: str,
                          injected: bool = False) -> CompactionEntry:
        entry = CompactionEntry(id=entry_id, parent=self.last_id, cycle=cycle,
                                messages=messages, first_kept_id=first_kept_id, poison=poison,
                                injected=injected)
        self._file.append(encode_line(entry))
        self.last_id = entry_id
        return entry

    def close(self) -> None:
        self._file.close()


def read_session(raw: bytes, name: str = "session.jsonl") -> list[Entry]:
    """Every entry of a session file's bytes, in order: each line decoded strictly
    (UTF-8 included) and linked to the one before it, or ``certify_session_invalid``."""
    entries: list[Entry] = []
    if raw and not raw.endswith(b"\n"):
        raise SessionError(Code.CERTIFY_SESSION_INVALID, f"{name}: the last line is torn")
    previous: str | None = None
    seen: set[str] = set()
    for number, line in enumerate(raw.splitlines(), start=1):
        try:
            entry = _DECODER.decode(line)
        except msgspec.DecodeError as exc:
            raise SessionError(Code.CERTIFY_SESSION_INVALID,
                               f"{name} line {number}: {exc}") from exc
        if entry.parent != previous or entry.id in seen:
            raise SessionError(Code.CERTIFY_SESSION_INVALID,
                               f"{name} line {number}: not linked to the line before")
        seen.add(entry.id)
        previous = entry.id
        entries.append(entry)
    return entries


def branch_events(entries: Sequence[Entry]) -> list[Event]:
    return [e.event for e in entries if isinstance(e, EventEntry)]


def latest_compaction(entries: Sequence[Entry]) -> CompactionEntry | None:
    return next((e for e in reversed(entries) if isinstance(e, CompactionEntry)), None)


def live_events(entries: Sequence[Entry]) -> list[Event]:
    """The events the built context replays after the latest compaction's messages."""
    compaction = latest_compaction(entries)
    if compaction is None:
        return branch_events(entries)
    position = entries.index(compaction)
    live: list[Event] = []
    keeping = False
    for index, entry in enumerate(entries):
        if not isinstance(entry, EventEntry):
            continue
        if entry.id == compaction.first_kept_id:
            keeping = True
        if (keeping and index < position) or index > position:
            live.append(entry.event)
    return live


def built_context(entries: Sequence[Entry]) -> list[ReaderMessage]:
    """The latest compaction's messages, then the live events (module docstring)."""
    compaction = latest_compaction(entries)
    head = [] if compaction is None else list(compaction.messages)
    return head + [reader_message(e) for e in live_events(entries)]

