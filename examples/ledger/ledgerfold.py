"""ledger: an example fold that passes ``efold-controller certify`` (group "efold.folds").

A cumulative projection of the source, rebuilt from ``prefix.events`` at every fold
(it never reads ``prefix.prior``, and says so with ``derives_from_source = True``):

* the opening owner turn verbatim (the goal and the rules stated with it);
* every file a ``read_file`` call named, citing its latest result;
* every open error: a result line ``ERROR <code>: ...`` that no later line
  ``RESOLVED <code>`` closed, citing the result that raised it;
* the earlier entries' first lines, newest first, until the byte budget is spent or
  ``HOT_SESSIONS`` sessions are in view (the opening's and the kept turn's count too):
  older sessions stay cold, in the store, not in view;

then the newest turn verbatim, from the newest owner turn whose tail is closed (every
result after its call, every call followed by its result). Every cited entry is written
``[record <id>]``, and the reader can expand it: the fold offers the history lookup
tools over efold's standard retained store (every record, minus tool results that hold
a credential). The summary never exceeds ``BUDGET`` bytes of UTF-8, so it stays bounded
however long the session grows.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from efold.corpus.model import Event
from efold.folds.checkpoint import LOOKUP_TOOLS, BoundaryEvidence, Checkpoint, ReaderMessage, cite
from efold.folds.fold import TracePrefix, build_receipt
from efold.folds.retention import retain
from efold.folds.transcript import reader_message, session_transcript

BUDGET = 28 * 1024  # bytes of UTF-8 in the summary message
OPENING_CHARS = 4_000
LINE_CHARS = 160
HOT_SESSIONS = 8  # sessions whose entries stay in view (certification bounds it at 8)
ERROR = re.compile(r"^ERROR (\S+?):")
RESOLVED = re.compile(r"^RESOLVED (\S+)")


def _closed(tail: Sequence[Event], answered: set[str]) -> bool:
    calls: set[str] = set()
    for index, event in enumerate(tail):
        if event.role == "tool" and event.tool_call_id not in calls:
            return False
        for call in event.tool_calls or ():
            calls.add(call.id)
            if call.id in answered and not any(e.tool_call_id == call.id for e in tail[index:]):
                return False
    return True


def kept_from(transcript: Sequence[Event]) -> int:
    """Index of the first event kept verbatim: the newest owner turn whose tail is
    closed; ``len(transcript)`` (keep nothing) when none is."""
    answered = {e.tool_call_id for e in transcript if e.role == "tool" and e.tool_call_id}
    for index in range(len(transcript) - 1, -1, -1):
        event = transcript[index]
        if event.role == "user" and not event.steer and _closed(transcript[index:], answered):
            return index
    return len(transcript)


def _first_line(text: str) -> str:
    return next((line for line in text.splitlines() if line.strip()), "")[:LINE_CHARS]


def _fit(parts: list[str], line: str, budget: int) -> bool:
    """Append ``line`` (cut to what is left of ``budget``); False once it is spent."""
    used = sum(len(p.encode()) + 1 for p in parts)
    room = budget - used - 1
    if room <= 0:
        return False
    data = line.encode()
    if len(data) > room:
        parts.append(data[:room].decode(errors="ignore"))  # never half a character
        return False
    parts.append(line)
    return True


def ledger(transcript: Sequence[Event], head: Sequence[Event]) -> str:
    files: dict[str, str] = {}  # path -> the id of its latest result
    paths: dict[str, str] = {}  # call id -> path
    errors: dict[str, str] = {}  # code -> the line and the cited result
    for event in transcript:
        for call in event.tool_calls or ():
            try:
                path = json.loads(call.function.arguments).get("path")
            except (ValueError, AttributeError):
                path = None
            if isinstance(path, str):
                paths[call.id] = path
        if event.role == "tool":
            if event.tool_call_id in paths:
                files[paths[event.tool_call_id]] = event.id
            for line in event.content.splitlines():
                if match := ERROR.match(line):
                    errors[match.group(1)] = f"{line[:LINE_CHARS]} {cite(event.id)}"
                elif match := RESOLVED.match(line):
                    errors.pop(match.group(1), None)
    opening = next((e for e in transcript if e.role == "user"), None)
    parts = ["Ledger of the conversation so far (derived from the source; "
             "[record <id>] cites an entry)."]
    if opening is not None:
        parts.append(f"Opening {cite(opening.id)}:\n{opening.content[:OPENING_CHARS]}")
    parts.append("Files read (latest result):")
    parts += [f"- {path} {cite(record)}" for path, record in files.items()]
    parts.append("Open errors:")
    parts += [f"- {line}" for line in errors.values()] or ["- none"]
    parts.append("Earlier entries, newest first:")
    hot = {e.session for e in [*transcript[len(head):], *([opening] if opening else [])]}
    for event in reversed(head):
        hot.add(event.session)
        if len(hot) > HOT_SESSIONS:
            break
        text = _first_line(event.content) or ", ".join(
            c.function.name for c in event.tool_calls or ())
        if not _fit(parts, f"- {cite(event.id)} {event.role}: {text}", BUDGET):
            break
    return "\n".join(parts)


class LedgerFold:
    name = "ledger"  # must equal the entry point's name
    derives_from_source = True  # never reads prefix.prior

    def build(self, prefix: TracePrefix) -> Checkpoint:
        transcript = session_transcript(prefix.events)
        cut = kept_from(transcript)
        summary = ReaderMessage(role="user", content=ledger(transcript, transcript[:cut]))
        messages = [summary, *(reader_message(e) for e in transcript[cut:])]
        store = retain(transcript)
        tools = list(LOOKUP_TOOLS)  # ["history_search", "history_get"], with the store
        receipt = build_receipt(arm=self.name, prefix=prefix, messages=messages, tools=tools,
                                boundary=BoundaryEvidence(kind="external", verified=True),
                                pressure=[], store=store)
        return Checkpoint(arm=self.name, trace_id=prefix.trace_id, messages=messages,
                          tools=tools, receipt=receipt, store=store)
