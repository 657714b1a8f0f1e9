"""An incremental server-sent-events decoder over raw bytes.

Bytes arrive in arbitrary chunks. Lines end at ``\\n``, ``\\r\\n`` or ``\\r`` (a
``\\r\\n`` split across two chunks counts once). Lines are split on the *bytes*
0x0A/0x0D before decoding, so a UTF-8 sequence split across chunks is reassembled
intact, and U+2028/U+2029 inside JSON strings (which ``str.splitlines`` would treat as
line breaks) are ordinary characters. Each complete line is decoded as strict UTF-8.

Per the SSE specification an event is dispatched at a blank line; an event still open
when the stream ends is discarded (so a stream cut just after a terminal event's
``data:`` line, before its blank line, has not delivered that event).

``JsonEvents`` is what every streaming wire parser reads through: events whose data must
be a JSON object, where the first fault marks the stream malformed for good.

``decode_object`` is the one JSON decoder of the money path (every event and body a
wire parser reads). JSON leaves a repeated key undefined, and msgspec (like most
decoders) keeps the last one: ``{"usage": {...100...}, "usage": {...1...}}`` would read
as the cheaper usage. So a value in which *any* object repeats a key (after unescaping:
``"usag\u0065"`` is ``"usage"``), at any depth, is refused with ``DuplicateKey``: two
readings of one field, of which the parser cannot tell the billed one.
"""

from __future__ import annotations

import re
from typing import Any, Final, NamedTuple

import msgspec

_EOL: Final = re.compile(rb"\r\n|\r|\n")
_BOM: Final = b"\xef\xbb\xbf"
_JSON: Final = msgspec.json.Decoder()
# A JSON string token (escapes included), unrolled so long strings scan in C.
_STRING_TEXT: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_STRING_BYTES: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


class SseEvent(NamedTuple):
    event: str | None
    data: str


class SseError(ValueError):
    """The stream is not valid UTF-8 (a provider or transport fault)."""


class SseDecoder:
    def __init__(self) -> None:
        self._buf = bytearray()
        self._scanned = 0  # bytes of _buf already known to hold no line end
        self._skip_lf = False  # the previous chunk ended in "\r": drop one leading "\n"
        self._first_line = True
        self._event: str | None = None
        self._data: list[str] | None = None

    def feed(self, chunk: bytes) -> list[SseEvent]:
        if not chunk:
            return []  # an empty read must not forget a pending "\r"
        if self._skip_lf and chunk[:1] == b"\n":
            chunk = chunk[1:]
        self._skip_lf = False
        buf = self._buf
        buf += chunk
        events: list[SseEvent] = []
        pos = 0
        search_from = self._scanned
        end = len(buf)
        while True:
            match = _EOL.search(buf, search_from)
            if match is None:
                break
            self._line(bytes(buf[pos:match.start()]), events)
            if match.end() == end and match.group() == b"\r":
                self._skip_lf = True
            pos = search_from = match.end()
        del buf[:pos]
        self._scanned = len(buf)
        return events

    def _line(self, raw: bytes, events: list[SseEvent]) -> None:
        if self._first_line:
            self._first_line = False
            if raw.startswith(_BOM):
                raw = raw[len(_BOM):]
        if not raw:
            if self._data is not None:
                events.append(SseEvent(self._event, "\n".join(self._data)))
            self._event, self._data = None, None
            return
        if raw[:1] == b":":
            return  # comment / keep-alive
        field, sep, value = raw.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        try:
            name = field.decode("utf-8")
            text = value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SseError("invalid UTF-8 in event stream") from exc
        if name == "data":
            if self._data is None:
                self._data = []
            self._data.append(text)
        elif name == "event":
            self._event = text
        # "id", "retry" and unknown fields carry nothing the guard uses.


class DuplicateKey(ValueError):
    """An object of a decoded JSON value repeats a key (two readings of one field)."""


def _members(value: Any) -> int:
    """The number of members of every object in a decoded value (iteratively: the
    decoder has already bounded the depth, this walk must not recurse past it)."""
    count = 0
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            count += len(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return count


def _colons_outside_strings(data: str | bytes) -> int:
    if isinstance(data, str):
        return _STRING_TEXT.sub("", data).count(":")
    return _STRING_BYTES.sub(b"", data).count(b":")


def repeats_a_key(data: str | bytes, value: Any) -> bool:
    """Whether valid JSON ``data``, decoded as ``value``, repeats a key in some object.

    Outside strings a colon appears in JSON only between a member's key and its value,
    so the text's structural colons count every member written, while the decoded
    objects (one entry per distinct key) count each key once: they differ exactly when
    an object repeats a key. The text's colons are counted first with those inside
    strings (``count`` in C): when even that equals the members, there are none to
    strip and no repeat; only otherwise are the strings cut out and the colons counted
    again."""
    members = _members(value)
    if (data.count(":") if isinstance(data, str) else data.count(b":")) == members:
        return False
    return _colons_outside_strings(data) != members


def decode_object(data: str | bytes) -> dict[str, Any] | None:
    """``data`` as a JSON object; ``None`` if it does not decode (too deeply nested
    counts as undecodable) or is any other JSON value. Raises ``DuplicateKey`` when any
    object in it repeats a key (module docstring)."""
    try:
        value = _JSON.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    if repeats_a_key(data, value):
        raise DuplicateKey("an object repeats a key")
    return value


class JsonEvents:
    """SSE events whose data is a JSON object, from raw chunks. The first fault (invalid
    UTF-8, or an event whose data is not a JSON object) sets ``malformed``; from then on
    nothing more is read. An event that repeats a key also sets ``duplicate_key``."""

    def __init__(self) -> None:
        self._sse = SseDecoder()
        self.malformed = False
        self.duplicate_key = False  # sticky: an event repeated a key (implies malformed)

    def events(self, chunk: bytes) -> list[SseEvent]:
        """The events ``chunk`` completes (none once malformed)."""
        if self.malformed:
            return []
        try:
            return self._sse.feed(chunk)
        except SseError:
            self.malformed = True
            return []

    def decode(self, event: SseEvent) -> dict[str, Any] | None:
        """The event's data as a JSON object, or ``None`` (and ``malformed``): the caller
        stops reading the chunk there."""
        try:
            data = decode_object(event.data)
        except DuplicateKey:
            self.duplicate_key = True
            data = None
        if data is None:
            self.malformed = True
        return data
