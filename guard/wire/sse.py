"""An incremental server-sent-events decoder over raw bytes.

Bytes arrive in arbitrary chunks. Lines end at ``\\n``, ``\\r\\n`` or ``\\r`` (a
``\\r\\n`` split across two chunks counts once). Lines are split on the *bytes*
0x0A/0x0D before decoding, so a UTF-8 sequence split across chunks is reassembled
intact, and U+2028/U+2029 inside JSON strings (which ``str.splitlines`` would treat as
line breaks) are ordinary characters. Each complete line is decoded as strict UTF-8.

Per the SSE specification an event is dispatched at a blank line; an event still open
when the stream ends is discarded (so a stream cut just after a terminal event's
``data:`` line, before its blank line, has not delivered that event).

``JsonEvents`` is what both streaming wire parsers read through: events whose data must
be a JSON object, where the first fault marks the stream malformed for good.
"""

from __future__ import annotations

import re
from typing import Any, Final, NamedTuple

import msgspec

_EOL: Final = re.compile(rb"\r\n|\r|\n")
_BOM: Final = b"\xef\xbb\xbf"
_JSON: Final = msgspec.json.Decoder()


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


def decode_object(data: str | bytes) -> dict[str, Any] | None:
    """``data`` as a JSON object; ``None`` if it does not decode (too deeply nested
    counts as undecodable) or is any other JSON value."""
    try:
        value = _JSON.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


class JsonEvents:
    """SSE events whose data is a JSON object, from raw chunks. The first fault (invalid
    UTF-8, or an event whose data is not a JSON object) sets ``malformed``; from then on
    nothing more is read."""

    def __init__(self) -> None:
        self._sse = SseDecoder()
        self.malformed = False

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
        data = decode_object(event.data)
        if data is None:
            self.malformed = True
        return data
