"""Importing real agent transcripts as efold traces: what every format shares.

A format reader (``import_openai``, ``import_anthropic``, ``import_agents``) turns a file
into a ``Transcript``: normalized ``Message`` values in conversation order (role, text,
tool calls, the line they came from, an optional timestamp) plus a count, by kind, of
what it dropped (system prompts, thinking blocks, side chains, ...). ``to_trace`` turns
a transcript into a ``Trace`` with these invariants:

* Header: ``suite="imported"``, ``family`` = the format name, ``fictional=False``,
  ``title`` = the input file's name, ``seed=None``, ``sessions`` = the last session.
* Events ``e0001``, ``e0002``, ... (4 digits, more when needed), roles user, assistant
  and tool; ``content`` is always a string (``""`` for an assistant message that only
  calls tools); ``steer`` is never set.
* A tool result carries ``tool_call_id``, ``name`` = the called tool's real name (looked
  up from the call) and ``source=None`` (efold's ``ToolSource`` kinds describe its
  fictional records, not real tools). Every result answers a call of an earlier
  assistant event, at most once; a call id never repeats. A call no result answers
  (an interrupted session's last call, say) is dropped and counted: a provider refuses a
  request holding a call without its result. An assistant message left with neither
  text nor calls goes with it.
* Without timestamps every event is session 1, day 1. With timestamps, ``day`` is 1 +
  whole days between the first timestamp's UTC date and the event's, and a new session
  starts when consecutive timestamps are more than 6 hours apart. Both never decrease:
  a message without a timestamp, or with one earlier than the latest seen, keeps the
  latest seen.
* A user or assistant message left with no text (or only whitespace) and no tool call
  is dropped (counted); a transcript with no user or assistant message at all refuses.
  A tool call needs a non-empty id and name.

Privacy: tool results are kept verbatim. efold's retention rule
(``efold.folds.retention``) already omits a credential-bearing tool result from every
store downstream, whole. User and assistant text and tool-call arguments are not covered
by that rule, so here each *value* of a textual credential assignment in them (the same
rule: ``efold.corpus.credentials``) is replaced by ``[redacted]`` and counted. In JSON
arguments the string values are redacted one by one, and a scalar under a
credential-named key (``{"password": "..."}``) is redacted whole; the arguments are
then re-encoded compactly (untouched when nothing was redacted). A value already
reading ``[redacted]`` is left alone.

Every refusal is ``CorpusError(CORPUS_IMPORT_INVALID)`` whose detail starts with
``FILE:LINE:`` (see ``import_error``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal

import msgspec

from efold.corpus.credentials import credential_value_spans, names_credential
from efold.corpus.errors import CorpusError
from efold.corpus.model import Event, FunctionCall, ToolCall, Trace, TraceHeader
from efold.errors import Code

SUITE = "imported"
REDACTED = "[redacted]"
SESSION_GAP = timedelta(hours=6)
UNANSWERED = "tool call without result"
MAX_TRACE_ID = 64
_TRACE_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
_OUTSIDE_ID = re.compile(r"[^a-z0-9-]+")


class Origin(msgspec.Struct, frozen=True):
    """Where a record starts: its 1-based line and, in a JSON document, its path
    (``messages[12]``; empty for JSONL)."""

    line: int
    where: str = ""


def import_error(name: str, origin: Origin, detail: str,
                 code: Code = Code.CORPUS_IMPORT_INVALID) -> CorpusError:
    """The refusal for file ``name`` at ``origin``: ``FILE:LINE: [where: ]detail``."""
    where = f" {origin.where}:" if origin.where else ""
    return CorpusError(code, f"{name}:{origin.line}:{where} {detail}")


# --- strict JSON numbers --------------------------------------------------------------

# The longest integer literal a transcript may hold. Python refuses to convert one of more
# than 4,300 digits (a ValueError, not a JSON error); no count, id or timestamp comes
# near this bound, which stays below that limit whatever the interpreter's setting.
MAX_INTEGER_DIGITS: Final = 1000


class NumberRefused(ValueError):
    """A JSON number a transcript may not hold: ``token`` (cut short) and the fixed
    ``code`` (``corpus_import_integer_too_long`` or ``corpus_import_number_not_finite``)."""

    def __init__(self, code: Code, token: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.token = token
        self.detail = detail


def _parse_int(token: str) -> int:
    digits = len(token) - token.startswith("-")
    if digits > MAX_INTEGER_DIGITS:
        raise NumberRefused(Code.CORPUS_IMPORT_INTEGER_TOO_LONG, token[:MAX_INTEGER_DIGITS + 1],
                            f"an integer literal of {digits} digits (at most "
                            f"{MAX_INTEGER_DIGITS})")
    return int(token)


def _parse_float(token: str) -> float:
    value = float(token)
    if not math.isfinite(value):  # 1e400: no double holds it
        raise NumberRefused(Code.CORPUS_IMPORT_NUMBER_NOT_FINITE, token,
                            f"the number {token[:40]} is not finite as a double")
    return value


def _parse_constant(token: str) -> float:
    # NaN, Infinity, -Infinity: Python's json accepts them; JSON (RFC 8259) does not.
    raise NumberRefused(Code.CORPUS_IMPORT_NUMBER_NOT_FINITE, token,
                        f"{token} is not a JSON number")


# The one JSON decoder of the import path: standard JSON only (no NaN or Infinity), no
# number that does not fit a double, no integer past MAX_INTEGER_DIGITS (NumberRefused).
STRICT_JSON: Final = json.JSONDecoder(parse_int=_parse_int, parse_float=_parse_float,
                                      parse_constant=_parse_constant)


class Message(msgspec.Struct, frozen=True):
    """One normalized message. ``tool_call_id`` is set exactly on role ``tool``."""

    role: Literal["user", "assistant", "tool"]
    content: str
    origin: Origin
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    timestamp: datetime | None = None


class Transcript(msgspec.Struct):
    """What a reader produced: messages in order and dropped items by kind."""

    messages: list[Message] = msgspec.field(default_factory=list)
    dropped: dict[str, int] = msgspec.field(default_factory=dict)

    def add(self, message: Message) -> None:
        self.messages.append(message)

    def drop(self, kind: str, count: int = 1) -> None:
        self.dropped[kind] = self.dropped.get(kind, 0) + count

    def add_calls(self, calls: Sequence[ToolCall], origin: Origin, timestamp: datetime | None) -> None:
        """Attach tool calls to the assistant message just before (a format that logs
        each call as its own item), or start an assistant message with no text."""
        last = self.messages[-1] if self.messages else None
        if last is not None and last.role == "assistant":
            self.messages[-1] = msgspec.structs.replace(last, tool_calls=(*last.tool_calls, *calls))
        else:
            self.add(Message("assistant", "", origin, tuple(calls), timestamp=timestamp))


def tool_call(call_id: str, name: str, arguments: str) -> ToolCall:
    return ToolCall(id=call_id, function=FunctionCall(name=name, arguments=arguments))


def compact_json(value: Any) -> str:
    """Compact JSON text (no spaces, non-ASCII kept) of a decoded value."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def parse_timestamp(value: object, name: str, origin: Origin) -> datetime | None:
    """An ISO 8601 timestamp (``Z`` or an offset; a naive one is taken as UTC), or None
    when absent. A present but unreadable timestamp refuses."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise import_error(name, origin, f"timestamp is not a string: {value!r}")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise import_error(name, origin, f"unreadable timestamp {value!r}") from exc
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def trace_id_for(stem: str) -> str:
    """The trace id of an input file stem: lower case, every run of characters outside
    ``[a-z0-9-]`` replaced by ``-``, trimmed of ``-``, at most 64 characters."""
    candidate = _OUTSIDE_ID.sub("-", stem.lower()).strip("-")[:MAX_TRACE_ID].rstrip("-")
    if not _TRACE_ID.fullmatch(candidate):
        raise CorpusError(Code.CORPUS_IMPORT_INVALID,
                          f"{stem}: no trace id can be made of this file name; use --id")
    return candidate


def check_trace_id(trace_id: str) -> str:
    """An explicit trace id must already be in the form ``trace_id_for`` produces."""
    if not _TRACE_ID.fullmatch(trace_id) or trace_id.endswith("-"):
        raise CorpusError(Code.CORPUS_IMPORT_INVALID,
                          f"trace id {trace_id!r}: use 1-64 of a-z, 0-9 and '-', "
                          "starting with a letter or digit")
    return trace_id


def parts_text(content: Any, name: str, origin: Origin, *, texts: Mapping[str, str],
               placeholders: Mapping[str, str], what: str = "content") -> str:
    """A message's text: ``content`` is None (``""``), a string, or a list of typed
    parts. ``texts`` maps a part type to the key holding its text, ``placeholders`` a
    part type to the text standing for it (``[image]``); any other part refuses, naming
    ``what``. Parts are joined by newlines."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise import_error(name, origin, f"{what} is neither a string nor a list of parts")
    found: list[str] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if isinstance(kind, str) and kind in texts:
            text = part.get(texts[kind])
            if not isinstance(text, str):
                raise import_error(name, origin, f"a {kind} part of {what} without text")
            found.append(text)
        elif isinstance(kind, str) and kind in placeholders:
            found.append(placeholders[kind])
        else:
            raise import_error(name, origin, f"unknown {what} part type {kind!r}")
    return "\n".join(found)


# --- redaction ---------------------------------------------------------------------


def redact_text(text: str) -> tuple[str, int]:
    """``text`` with every credential value replaced by ``[redacted]``, and how many."""
    spans = [(start, end) for start, end in credential_value_spans(text)
             if text[max(0, start - 1):end + 1] != REDACTED]
    for start, end in reversed(spans):
        text = text[:start] + REDACTED + text[end:]
    return text, len(spans)


def _redact_value(value: Any, key: str | None) -> tuple[Any, int]:
    if key is not None and isinstance(value, str | int | float) and not isinstance(value, bool) \
            and value not in (REDACTED, "") and names_credential(key):
        return REDACTED, 1
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list):
        total = 0
        items = []
        for item in value:
            redacted, count = _redact_value(item, key)
            items.append(redacted)
            total += count
        return items, total
    if isinstance(value, dict):
        total = 0
        members = {}
        for member, item in value.items():
            redacted, count = _redact_value(item, member)
            members[member] = redacted
            total += count
        return members, total
    return value, 0


def redact_arguments(arguments: str) -> tuple[str, int]:
    """Tool-call arguments with credential values redacted (see the module docstring)."""
    try:
        decoded = STRICT_JSON.decode(arguments)
    except (ValueError, RecursionError):  # not JSON (NumberRefused included): as text
        return redact_text(arguments)
    redacted, count = _redact_value(decoded, None)
    return (compact_json(redacted), count) if count else (arguments, 0)


# --- the trace ----------------------------------------------------------------------


class Imported(msgspec.Struct, frozen=True):
    """An imported trace and what the import did: ``tool_calls`` kept (each answered),
    ``unanswered_calls`` dropped (also counted in ``dropped``)."""

    trace: Trace
    tool_calls: int
    unanswered_calls: int
    redactions: int
    dropped: dict[str, int]


def _clock(messages: Sequence[Message]) -> list[tuple[int, int]]:
    """(session, day) of each message (see the module docstring)."""
    known = [m.timestamp for m in messages if m.timestamp is not None]
    if not known:
        return [(1, 1)] * len(messages)
    first_day = known[0].astimezone(UTC).date()
    latest: datetime | None = None
    session = 1
    placed: list[tuple[int, int]] = []
    for message in messages:
        stamp = message.timestamp
        if stamp is not None:
            if latest is not None and stamp - latest > SESSION_GAP:
                session += 1
            if latest is None or stamp > latest:
                latest = stamp
        now = latest if latest is not None else known[0]
        placed.append((session, max(1, 1 + (now.astimezone(UTC).date() - first_day).days)))
    return placed


def _check_text(message: Message, name: str) -> None:
    """Every string of the message must be encodable (JSON allows an unpaired surrogate
    escape such as ``\\ud800``; UTF-8 does not)."""
    texts = [message.content, message.tool_call_id or ""]
    texts += [t for c in message.tool_calls for t in (c.id, c.function.name, c.function.arguments)]
    for text in texts:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise import_error(name, message.origin, "text with an unpaired surrogate "
                                                     "escape") from exc


def _checked(transcript: Transcript, name: str,
             dropped: dict[str, int]) -> tuple[list[Message], int, int, int]:
    """The messages to keep, checked and redacted; (messages, calls, unanswered,
    redactions). Counts empty user/assistant messages into ``dropped``."""
    kept: list[Message] = []
    calls: dict[str, str] = {}
    answered: set[str] = set()
    redactions = 0
    for message in transcript.messages:
        _check_text(message, name)
        if message.role == "tool":
            call_id = message.tool_call_id
            if call_id is None or call_id not in calls:
                raise import_error(name, message.origin, f"tool result for unknown call {call_id!r}")
            if call_id in answered:
                raise import_error(name, message.origin, f"a second result for call {call_id!r}")
            answered.add(call_id)
            kept.append(message)
            continue
        if not message.content.strip() and not message.tool_calls:
            kind = f"empty {message.role} message"
            dropped[kind] = dropped.get(kind, 0) + 1
            continue
        content, count = redact_text(message.content)
        redactions += count
        new_calls: list[ToolCall] = []
        for call in message.tool_calls:
            if message.role != "assistant":  # pragma: no cover - readers never do this
                raise import_error(name, message.origin, "a tool call outside an assistant message")
            if not call.id or not call.function.name.strip():
                raise import_error(name, message.origin, "a tool call without an id or a name")
            if call.id in calls:
                raise import_error(name, message.origin, f"call id {call.id!r} repeats")
            calls[call.id] = call.function.name
            arguments, count = redact_arguments(call.function.arguments)
            redactions += count
            new_calls.append(tool_call(call.id, call.function.name, arguments))
        kept.append(msgspec.structs.replace(message, content=content, tool_calls=tuple(new_calls)))
    kept = _without_unanswered(kept, answered)
    if not any(m.role != "tool" for m in kept):
        raise import_error(name, Origin(1), "empty transcript (no user or assistant message)")
    unanswered = len(calls) - len(answered)
    if unanswered:
        dropped[UNANSWERED] = dropped.get(UNANSWERED, 0) + unanswered
    return kept, len(answered), unanswered, redactions


def _without_unanswered(messages: list[Message], answered: set[str]) -> list[Message]:
    """``messages`` without the calls no result answers; an assistant message left with
    neither text nor calls goes too."""
    kept: list[Message] = []
    for message in messages:
        calls = tuple(c for c in message.tool_calls if c.id in answered)
        if len(calls) != len(message.tool_calls):
            if not calls and not message.content.strip():
                continue
            message = msgspec.structs.replace(message, tool_calls=calls)
        kept.append(message)
    return kept


def to_trace(transcript: Transcript, *, trace_id: str, family: str, title: str,
             name: str) -> Imported:
    """The trace of a transcript (invariants in the module docstring)."""
    dropped = dict(transcript.dropped)
    messages, call_count, unanswered, redactions = _checked(transcript, name, dropped)
    names = {c.id: c.function.name for m in messages for c in m.tool_calls}
    width = max(4, len(str(len(messages))))
    events: list[Event] = []
    for number, (message, (session, day)) in enumerate(zip(messages, _clock(messages), strict=True), 1):
        event_id = f"e{number:0{width}d}"
        if message.role == "tool":
            events.append(Event(id=event_id, session=session, day=day, role="tool",
                                content=message.content, tool_call_id=message.tool_call_id,
                                name=names[message.tool_call_id or ""]))
        else:
            events.append(Event(id=event_id, session=session, day=day, role=message.role,
                                content=message.content,
                                tool_calls=list(message.tool_calls) or None))
    header = TraceHeader(trace_id=trace_id, suite=SUITE, family=family, fictional=False,
                         title=title, sessions=events[-1].session, seed=None)
    return Imported(trace=Trace(header=header, events=events), tool_calls=call_count,
                    unanswered_calls=unanswered, redactions=redactions,
                    dropped=dict(sorted(dropped.items())))
