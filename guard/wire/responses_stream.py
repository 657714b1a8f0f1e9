"""Incremental parser of an OpenAI Responses SSE stream (also the faux transport's).

Events used (the event type is the JSON ``type``, falling back to the SSE ``event:``):

- ``response.output_item.done``: a finished output item (message, function_call,
  reasoning), kept verbatim for the reader to act on and replay;
- ``response.completed`` / ``response.incomplete``: terminal; ``response.usage`` and
  ``response.service_tier`` are read here only (``response.created`` may carry the
  *requested* tier, e.g. ``auto``, which is not what was billed);
- ``response.failed`` and ``error``: terminal failure (usage/tier still read);
- every event carrying a ``response`` object (``created``, ``in_progress``, the
  terminals...): its ``model`` is read (see ``ModelReading``);
- anything else (deltas...) is parsed and ignored.

The first terminal decides the outcome and sets ``done`` (the guard stops reading
there). Events after it in data already fed are still scanned: a second terminal event
makes the usage invalid (two terminal readings, of which the parser cannot tell the
true one), and their models are read; nothing else of them counts. An undecodable
event marks the stream malformed and stops parsing (after a terminal: stops scanning).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from efold.guard.wire.outcome import (
    ModelReading,
    StreamEnd,
    WireOutcome,
    duplicate_key_outcome,
    read_tier,
    read_usage,
)
from efold.guard.wire.sse import JsonEvents

_TERMINALS = {
    "response.completed": StreamEnd.COMPLETED,
    "response.incomplete": StreamEnd.INCOMPLETE,
    "response.failed": StreamEnd.FAILED,
    "error": StreamEnd.FAILED,
}


class ResponsesStreamParser:
    def __init__(self) -> None:
        self._stream = JsonEvents()  # malformed: before a terminal, a lost stream; after, stop
        self._items: list[dict[str, Any]] = []
        self._model = ModelReading()
        # Invariant: set once, at the first terminal event; never replaced.
        self._outcome: WireOutcome | None = None
        self._duplicate_terminal = False

    @property
    def done(self) -> bool:
        return self._outcome is not None

    def feed(self, chunk: bytes) -> None:
        for event in self._stream.events(chunk):
            data = self._stream.decode(event)
            if data is None:
                return
            kind = data.get("type", event.event)
            # A type that is not a string is no event this parser knows (and a list or
            # object could not even be looked up among the terminals).
            self._event(kind if isinstance(kind, str) else None, data)

    def _event(self, kind: str | None, data: dict[str, Any]) -> None:
        self._model.see(data.get("response"))
        if self._outcome is not None:
            if kind in _TERMINALS:
                self._duplicate_terminal = True
            return
        if kind == "response.output_item.done":
            item = data.get("item")
            if isinstance(item, dict):
                self._items.append(item)
        elif kind in _TERMINALS:
            self._outcome = self._terminal(_TERMINALS[kind], data)

    def _terminal(self, terminal: StreamEnd, data: dict[str, Any]) -> WireOutcome:
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
        if self._stream.duplicate_key:
            return duplicate_key_outcome()
        if self._outcome is None:
            outcome = WireOutcome(terminal=StreamEnd.NONE, output_items=self._items,
                                  malformed=self._stream.malformed)
        elif self._duplicate_terminal:
            outcome = replace(self._outcome, usage=None, usage_invalid=True)
        else:
            outcome = self._outcome
        return replace(outcome, model=self._model.model, model_conflict=self._model.conflict)
