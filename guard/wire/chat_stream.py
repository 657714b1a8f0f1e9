"""Parsers of OpenAI Chat Completions responses: streaming and non-streaming.

Output is converted to Responses-shaped items so the reader loop sees one shape:
``{"type": "message", "role": "assistant", "content": [{"type": "output_text",
"text": ...}]}`` and ``{"type": "function_call", "call_id", "name", "arguments"}``.

Streaming: ``data: {chunk}`` events, ``data: [DONE]`` terminal (``done`` from then on;
anything after it is not read). Content and tool-call deltas are accumulated (tool
calls by ``index``). With ``stream_options.include_usage`` the last chunk carries
``usage`` (every earlier chunk has ``usage: null``); a stream whose usage never arrives
(several local OpenAI-compatible servers) reads as **missing usage**, never zero. Two
non-null usage objects that differ (as JSON values, or in how they read) make the usage
invalid: the parser cannot tell which one was billed, and must not pick the cheaper;
an identical repeat is one reading. ``finish_reason`` ``length``/``content_filter``
reads as incomplete. A chunk with an ``error`` object is a failure. No ``[DONE]``: lost.
The top-level ``model`` of every chunk is read (see ``ModelReading``).

Non-streaming: the body is buffered and decoded once at the end (never ``done``
before: only the end of the body completes it); its ``model`` is read.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from efold.guard.wire.outcome import (
    BufferedBody,
    ModelReading,
    StreamEnd,
    WireOutcome,
    duplicate_key_outcome,
    read_tier,
    read_usage,
)
from efold.guard.wire.sse import DuplicateKey, JsonEvents, decode_object

_INCOMPLETE_REASONS = frozenset({"length", "content_filter"})


def _items(text: str, calls: list[dict[str, str]]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if text:
        items.append({"type": "message", "role": "assistant",
                      "content": [{"type": "output_text", "text": text}]})
    for call in calls:
        items.append({"type": "function_call", "call_id": call["id"], "name": call["name"],
                      "arguments": call["arguments"]})
    return items


def _same_usage(first: Any, second: Any) -> bool:
    """One reading: equal as JSON values *and* read alike (``50 == 50.0`` in Python, but
    only one of them is a count). Values too deeply nested to compare are not one
    reading: the conservative side."""
    try:
        equal = bool(first == second)
    except RecursionError:
        return False
    return equal and read_usage(first, chat=True) == read_usage(second, chat=True)


class ChatStreamParser:
    def __init__(self) -> None:
        self._stream = JsonEvents()
        self._text: list[str] = []
        self._calls: dict[int, dict[str, str]] = {}
        self._finish_reason: str | None = None
        self._usage: Any = None  # Invariant: the first non-null usage; never replaced
        self._usage_conflict = False  # a later non-null usage differed from it
        self._model = ModelReading()
        self._tier: str | None = None
        self._failed = False
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def feed(self, chunk: bytes) -> None:
        if self._done:
            return
        for event in self._stream.events(chunk):
            if event.data.strip() == "[DONE]":
                self._done = True
                return
            data = self._stream.decode(event)
            if data is None:
                return
            self._chunk(data)

    def _chunk(self, data: dict[str, Any]) -> None:
        if data.get("error") is not None:
            self._failed = True
        usage = data.get("usage")
        if usage is not None:
            if self._usage is None:
                self._usage = usage
            elif not _same_usage(self._usage, usage):
                self._usage_conflict = True
        self._model.see(data)
        tier = read_tier(data)
        if tier is not None:
            self._tier = tier
        choices = data.get("choices")
        if not isinstance(choices, list):
            return
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            if isinstance(choice.get("finish_reason"), str):
                self._finish_reason = choice["finish_reason"]
            delta = choice.get("delta")
            if isinstance(delta, dict):
                self._delta(delta)

    def _delta(self, delta: dict[str, Any]) -> None:
        if isinstance(delta.get("content"), str):
            self._text.append(delta["content"])
        calls = delta.get("tool_calls")
        if not isinstance(calls, list):
            return
        for call in calls:
            if not isinstance(call, dict) or not isinstance(call.get("index"), int):
                continue
            acc = self._calls.setdefault(call["index"], {"id": "", "name": "", "arguments": ""})
            if isinstance(call.get("id"), str):
                acc["id"] = call["id"]
            fn = call.get("function")
            if isinstance(fn, dict):
                if isinstance(fn.get("name"), str):
                    acc["name"] += fn["name"]
                if isinstance(fn.get("arguments"), str):
                    acc["arguments"] += fn["arguments"]

    def finish(self) -> WireOutcome:
        if self._stream.duplicate_key:
            return duplicate_key_outcome()
        usage, invalid = read_usage(self._usage, chat=True)
        if self._usage_conflict:
            usage, invalid = None, True
        items = _items("".join(self._text), [self._calls[i] for i in sorted(self._calls)])
        if self._failed:
            terminal = StreamEnd.FAILED
        elif not self._done or self._stream.malformed:
            terminal = StreamEnd.NONE
        elif self._finish_reason in _INCOMPLETE_REASONS:
            terminal = StreamEnd.INCOMPLETE
        else:
            terminal = StreamEnd.COMPLETED
        return WireOutcome(terminal=terminal, usage=usage, usage_invalid=invalid,
                           tier=self._tier, output_items=items,
                           malformed=self._stream.malformed,
                           model=self._model.model, model_conflict=self._model.conflict)


class ChatBodyParser(BufferedBody):
    """Non-streaming: buffer the JSON body, decode it at the end."""

    def finish(self) -> WireOutcome:
        try:
            data = decode_object(bytes(self._body))
        except DuplicateKey:
            return duplicate_key_outcome()
        if data is None:
            return WireOutcome(terminal=StreamEnd.NONE, malformed=True)
        model = ModelReading()
        model.see(data)
        return replace(self._outcome(data), model=model.model, model_conflict=model.conflict)

    @staticmethod
    def _outcome(data: dict[str, Any]) -> WireOutcome:
        usage, invalid = read_usage(data.get("usage"), chat=True)
        tier = read_tier(data)
        if data.get("error") is not None:
            return WireOutcome(terminal=StreamEnd.FAILED, usage=usage, usage_invalid=invalid,
                               tier=tier)
        choices = data.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
            return WireOutcome(terminal=StreamEnd.NONE, malformed=True)
        message = choice["message"]
        text = message.get("content") if isinstance(message.get("content"), str) else ""
        calls = []
        raw_calls = message.get("tool_calls")
        for call in raw_calls if isinstance(raw_calls, list) else []:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict):
                calls.append({"id": str(call.get("id", "")), "name": str(fn.get("name", "")),
                              "arguments": str(fn.get("arguments", ""))})
        reason = choice.get("finish_reason")
        terminal = (StreamEnd.INCOMPLETE if isinstance(reason, str) and reason in _INCOMPLETE_REASONS
                    else StreamEnd.COMPLETED)
        return WireOutcome(terminal=terminal, usage=usage, usage_invalid=invalid, tier=tier,
                           output_items=_items(text or "", calls))
