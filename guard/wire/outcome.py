"""What a wire parser makes of a response, and the raw readers every parser shares.

Missing usage is not zero usage: a usage object that is absent or null reads as
``usage=None`` (settlement keeps the hold as lost), a present but malformed one as
``usage_invalid`` (an integrity stop, with ``usage=None``). Malformed means any count
that is not an ``int`` (a bool, a float such as ``1e29``, a string) or lies outside
``[0, USAGE_COUNT_LIMIT)`` (a u64 ``-1`` sentinel decodes as 18446744073709551615).
Only the allowlisted counts are read; nothing else of a raw usage object survives.

Conflicting readings are read conservatively, never as the cheaper one: two differing
usage objects, or a second terminal event, make the usage invalid (each parser says
which applies to its wire format). A body or event in which any object repeats a key
(``sse.decode_object``) is ``duplicate_key``: two readings of one field, nothing of it
is read (settlement stops the run on it).

A ``total_tokens``, where the format defines one, must equal its parts, or the usage is
invalid (the parts are priced, so a total that disagrees means the parser cannot tell
which figure was billed): Chat ``prompt_tokens + completion_tokens``, Responses
``input_tokens + output_tokens``. An absent (or null) total is allowed.

The response's model is read, never judged: ``ModelReading`` keeps the first reported
model and notes a conflict when a later reading differs or a reported model is not a
string. Settlement compares it with the contract; ``model_required`` says whether the
wire format always names the model (then a settling response that names none stops).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from efold.guard.permits import UsageRecord
from efold.guard.usage import usage_count

# A tier value that is present but not a string: unknown by construction.
UNREADABLE_TIER: Final = "?"


class StreamEnd(enum.StrEnum):
    """How a response ended, as its wire format said (the terminal event, or none)."""

    COMPLETED = "completed"
    INCOMPLETE = "incomplete"  # settles (usage is valid); the reply may be cut short
    FAILED = "failed"  # response.failed / error event / error body
    NONE = "none"  # the stream ended without a terminal event


@dataclass
class WireOutcome:
    terminal: StreamEnd
    usage: UsageRecord | None = None
    # Invariant: usage_invalid implies usage is None (an invalid reading prices nothing).
    usage_invalid: bool = False
    tier: str | None = None
    output_items: list[dict[str, Any]] = field(default_factory=list)
    malformed: bool = False  # an unreadable event or body: read as a lost stream
    model: str | None = None  # the first model the response reported; None if none did
    model_conflict: bool = False  # readings differed, or a reported model was not a string
    # The wire format always names the model in a completed response (every format but
    # the OpenAI compaction endpoint, whose documented reply has no ``model``).
    model_required: bool = True
    # Invariant: duplicate_key implies usage is None (nothing of such a reply is read).
    duplicate_key: bool = False


def duplicate_key_outcome() -> WireOutcome:
    """What every parser makes of a reply in which some object repeats a key: nothing
    read, no usage, no model (settlement stops the run: ``duplicate_key``)."""
    return WireOutcome(terminal=StreamEnd.NONE, malformed=True, duplicate_key=True)


class WireParser(Protocol):
    def feed(self, chunk: bytes) -> None: ...

    def finish(self) -> WireOutcome: ...

    @property
    def done(self) -> bool:
        """True once a terminal has been parsed: the caller may stop reading. Bytes
        after it can only make the outcome more conservative, never settle it."""
        ...


class BufferedBody:
    """A parser's half for a JSON (non-streamed) body: the bytes buffered until
    ``finish``, which each parser defines. Never ``done`` before: a JSON body is
    complete only when the connection ends."""

    def __init__(self) -> None:
        self._body = bytearray()

    @property
    def done(self) -> bool:
        return False

    def feed(self, chunk: bytes) -> None:
        self._body += chunk


class _Invalid(Exception):
    pass


def _count(value: Any) -> int:
    """A count the format requires: absent or malformed is invalid, never zero."""
    count = usage_count(value)
    if count is None:
        raise _Invalid
    return count


def _optional_count(value: Any) -> int | None:
    return None if value is None else _count(value)


def _detail(details: Any, key: str) -> int | None:
    if details is None:
        return None
    if not isinstance(details, dict):
        raise _Invalid
    return _optional_count(details.get(key))


def read_usage(raw: Any, *, chat: bool) -> tuple[UsageRecord | None, bool]:
    """``(usage, invalid)`` from a Responses (``chat=False``) or Chat usage object."""
    if raw is None:
        return None, False
    if not isinstance(raw, dict):
        return None, True
    if chat:
        keys = ("prompt_tokens", "completion_tokens", "prompt_tokens_details",
                "completion_tokens_details")
    else:
        keys = ("input_tokens", "output_tokens", "input_tokens_details",
                "output_tokens_details")
    inp, out, in_details, out_details = (raw.get(k) for k in keys)
    try:
        usage = UsageRecord(
            input=_count(inp),
            output=_count(out),
            cache_read=_detail(in_details, "cached_tokens"),
            cache_write=_detail(in_details, "cache_write_tokens"),
            reasoning=_detail(out_details, "reasoning_tokens"),
        )
        total = _optional_count(raw.get("total_tokens"))
    except _Invalid:
        return None, True
    if total is not None and total != usage.input + usage.output:
        return None, True  # the total disagrees with its parts (module docstring)
    return usage, False


class ModelReading:
    """The model a response reports across its events or chunks.

    A container whose ``model`` key is present reports a model; ``null`` or any other
    non-string counts as a reading that cannot agree with anything.
    """

    def __init__(self) -> None:
        self.model: str | None = None  # Invariant: the first string reading, never replaced
        self.conflict = False

    def see(self, container: Any) -> None:
        if not isinstance(container, dict) or "model" not in container:
            return
        model = container["model"]
        if not isinstance(model, str):
            self.conflict = True
        elif self.model is None:
            self.model = model
        elif model != self.model:
            self.conflict = True


def read_tier(container: Any) -> str | None:
    """The reported ``service_tier`` of a response/chunk object (``None`` if absent)."""
    if not isinstance(container, dict):
        return None
    tier = container.get("service_tier")
    if tier is None:
        return None
    return tier if isinstance(tier, str) else UNREADABLE_TIER
