"""Fixtures for folds/ tests: a tiny synthetic trace builder, the original suite and one
hard trace (generated once per session)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from efold.corpus.model import Event, FunctionCall, SuiteItem, ToolCall, ToolSource
from efold.folds.fold import TracePrefix

_SOURCES = {
    "email_read": ToolSource.EMAIL,
    "web_fetch": ToolSource.WEB,
    "document_read": ToolSource.DOCUMENT,
    "chat_read": ToolSource.CHAT,
}


class SyntheticTrace:
    """Builds small traces in the FORMS.md shapes (ids e0001.., call ids call_0001..)."""

    def __init__(self, trace_id: str = "synthetic") -> None:
        self.trace_id = trace_id
        self.events: list[Event] = []
        self.session = 1
        self.day = 1
        self.calls = 0

    def _add(self, role: str, content: str, **extra: object) -> Event:
        event = Event(
            id=f"e{len(self.events) + 1:04d}",
            session=self.session,
            day=self.day,
            role=role,  # type: ignore[arg-type]
            content=content,
            **extra,  # type: ignore[arg-type]
        )
        self.events.append(event)
        return event

    def next_day(self) -> None:
        self.session += 1
        self.day += 1

    def owner(self, text: str) -> Event:
        return self._add("user", text)

    def reply(self, text: str) -> Event:
        return self._add("assistant", text)

    def tool(self, content: str, *, name: str = "email_read", steer: str | None = None) -> Event:
        self.calls += 1
        call_id = f"call_{self.calls:04d}"
        call = ToolCall(id=call_id, function=FunctionCall(name=name, arguments=json.dumps({"q": "x"})))
        self._add("assistant", "", tool_calls=[call])
        if steer is not None:
            self._add("user", "Steer: " + steer, steer=True)
        return self._add("tool", content, tool_call_id=call_id, name=name, source=_SOURCES[name])

    def prefix(self) -> TracePrefix:
        return TracePrefix(trace_id=self.trace_id, events=list(self.events))


@pytest.fixture
def synthetic() -> Callable[[str], SyntheticTrace]:
    return SyntheticTrace


@pytest.fixture
def email_round() -> SyntheticTrace:
    """One tool round: the owner asks, an email is read (a steer arrives while the call is
    in flight), the assistant replies. The request-conversion tests fold it."""
    t = SyntheticTrace()
    t.owner("Read the vendor email.")
    t.tool("Account reference: ACC-7F3K-219", steer="and the parcel too")
    t.reply("The reference is in the email.")
    return t


def filler(size: int, seed: str = "a") -> str:
    """Neutral prose lines of about ``size`` characters (no fact forms)."""
    line = f"Routine logistics note {seed}: pallets, crates and vendor schedules were reviewed."
    lines = []
    total = 0
    while total < size:
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines)[:size]


@pytest.fixture
def make_filler() -> Callable[..., str]:
    return filler



@pytest.fixture(scope="session")
def hard_prefix(hard_item: SuiteItem) -> TracePrefix:
    return TracePrefix.of(hard_item.trace)
