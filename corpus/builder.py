"""Assemble a trace event by event, with stable ids and well-formed tool exchanges.

The hard generator (and the script that wrote the original-suite data files) use this
so that every trace has the same message shapes (FORMS.md §1): a tool call is an
assistant message with empty content and one call, its result follows, and a steer
can only be placed between the two.
"""

from __future__ import annotations

import json
from typing import Literal

from efold.corpus.forms import STEER_PREFIX, TOOL_SOURCES
from efold.corpus.model import Event, FunctionCall, ToolCall, Trace, TraceHeader


class TraceBuilder:
    """Appends events in conversation order.

    Invariant: events are appended only through the methods below, so ids are dense
    (``e0001``...), every tool call is followed by exactly one result (optionally with
    one steer in between), and ``session``/``day`` never decrease.
    """

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._session = 1
        self._day = 1
        self._calls = 0

    @property
    def session_number(self) -> int:
        return self._session

    def start_session(self, session: int, day: int) -> None:
        if session < self._session or day < self._day:
            raise ValueError("sessions and days never go backwards")
        self._session, self._day = session, day

    def _append(
        self,
        role: Literal["user", "assistant", "tool"],
        content: str,
        *,
        tool_calls: list[ToolCall] | None = None,
        tool_call_id: str | None = None,
        name: str | None = None,
        steer: bool = False,
    ) -> Event:
        event = Event(
            id=f"e{len(self.events) + 1:04d}", session=self._session, day=self._day,
            role=role, content=content, tool_calls=tool_calls, tool_call_id=tool_call_id,
            name=name, source=TOOL_SOURCES[name] if name is not None else None, steer=steer,
        )
        self.events.append(event)
        return event

    def owner(self, text: str) -> Event:
        return self._append("user", text)

    def reply(self, text: str) -> Event:
        return self._append("assistant", text)

    def tool(
        self, name: str, arguments: dict[str, str], content: str, *, steer: str | None = None
    ) -> Event:
        """One tool exchange: the call, an optional mid-turn steer, the result."""
        self._calls += 1
        call_id = f"call_{self._calls:04d}"
        call = ToolCall(
            id=call_id,
            function=FunctionCall(name=name, arguments=json.dumps(arguments, sort_keys=True)),
        )
        self._append("assistant", "", tool_calls=[call])
        if steer is not None:
            text = steer if steer.startswith(STEER_PREFIX) else STEER_PREFIX + steer
            self._append("user", text, steer=True)
        return self._append("tool", content, tool_call_id=call_id, name=name)

    def build(self, header: TraceHeader) -> Trace:
        return Trace(header=header, events=list(self.events))
