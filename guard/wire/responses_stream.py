"""Incremental parser of an OpenAI Responses SSE stream (also the faux transport's).

Events used (the event type is the JSON ``type``, falling back to the SSE ``event:``):

- ``response.output_item.done``: a finished output item (message, function_call,
  reasoning), kept verbatim for the reader to act on and replay;
- ``response.completed`` / ``response.incomplete``: terminal; ``response.usage`` and
  ``response.service_tier`` are read here only (``response.created`` may carry the
  *requested* tier, e.g. ``auto``, which is not what was billed);
- ``response.failed`` and ``error``: terminal failure (usage/tier still read);
- anything else (deltas, ``created``, ``in_progress``...) is parsed and ignored.

Events after the first terminal are ignored. An undecodable event marks the stream
malformed and stops parsing.
"""

from __future__ import annotations

from typing import Any

import msgspec

from efold.guard.wire.outcome import Terminal, WireOutcome, read_tier, read_usage
from efold.guard.wire.sse import SseDecoder, SseError

_TERMINALS = {
    "response.completed": Terminal.COMPLETED,
    "response.incomplete": Terminal.INCOMPLETE,
    "response.failed": Terminal.FAILED,
    "error": Terminal.FAILED,
}


class ResponsesStreamParser:
    def __init__(self) -> None:
        self._sse = SseDecoder()
        self._decoder = msgspec.json.Decoder()
        self._items: list[dict[str, Any]] = []
        self._outcome: WireOutcome | None = None  # set at the first terminal event
        self._malformed = False

    def feed(self, chunk: bytes) -> None:
        if self._outcome is not None or self._malformed:
            return
        try:
            events = self._sse.feed(chunk)
        except SseError:
            self._malformed = True
            return
        for event in events:
            if self._outcome is not None:
                return
            try:
                data = self._decoder.decode(event.data)
            except msgspec.DecodeError:
                self._malformed = True
                return
            if not isinstance(data, dict):
                self._malformed = True
                return
            kind = data.get("type", event.event)
            if kind == "response.output_item.done":
                item = data.get("item")
                if isinstance(item, dict):
                    self._items.append(item)
            elif kind in _TERMINALS:
                self._outcome = self._terminal(_TERMINALS[kind], data)

    def _terminal(self, terminal: Terminal, data: dict[str, Any]) -> WireOutcome:
        response = data.get("response")
        if not isinstance(response, dict):
            response = {}
        usage, invalid = read_usage(response.get("usage"), chat=False)
        items = self._items
        if not items and isinstance(response.get("output"), list):
            items = [i for i in response["output"] if isinstance(i, dict)]
        return WireOutcome(
            terminal=terminal,
            usage=usage,
            usage_invalid=invalid,
            tier=read_tier(response),
            output_items=items,
        )

    def finish(self) -> WireOutcome:
        if self._outcome is not None:
            return self._outcome
        return WireOutcome(terminal=Terminal.NONE, output_items=self._items,
                           malformed=self._malformed)
