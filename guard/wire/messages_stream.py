"""Parsers of Anthropic Messages responses, streaming and non-streaming, and the usage
reader both share (and ``compact_anthropic`` too).

What the provider documents (Anthropic API reference, "Messages" and "Streaming
Messages"; looked up for this module, run only against loopback servers reproducing
these shapes, never against the live service):

- Streaming SSE events: ``message_start`` (a ``message`` object: ``id``, ``model``,
  ``usage``), ``content_block_start`` (``index``, a ``text`` or ``tool_use`` block, the
  latter with ``input: {}``), ``content_block_delta`` (``text_delta.text`` or
  ``input_json_delta.partial_json``), ``content_block_stop``, ``message_delta``
  (``delta.stop_reason``, a cumulative ``usage``), ``message_stop``, ``ping`` and
  ``error``. Non-streaming: one JSON message ``{id, type: "message", role, model,
  content: [blocks], stop_reason, usage}``, or an error body ``{"type": "error", ...}``.
- Usage: ``input_tokens`` *excludes* cache reads and writes, which come as
  ``cache_creation_input_tokens`` and ``cache_read_input_tokens``. ``usage.iterations``
  (compaction) lists ``{type: "compaction" | "message", input_tokens, output_tokens,
  cache counts}``: "the top-level input_tokens and output_tokens exclude compaction
  iteration usage ... to calculate total tokens consumed and billed, sum across all
  entries in usage.iterations". ``usage.service_tier`` is ``standard``, ``priority`` or
  ``batch``.

What efold reads (``read_messages_usage``), strictly, in efold's terms (``UsageRecord``
input *includes* cached input): ``input = input_tokens + cache_creation_input_tokens +
cache_read_input_tokens``, ``cache_write`` and ``cache_read`` the two cache counts (an
absent one stays ``None``, never 0, and adds 0), ``output = output_tokens``. With
``iterations`` present, it must be a list of well-formed entries and the billed counts
are the per-field sums over it; a top-level count above its sum is inconsistent usage
(invalid: the parser cannot tell which figure was billed). Without it, the top-level
counts are the billed ones. Missing usage is not zero usage; malformed usage is invalid.
The tier maps to efold's: standard → ``default``, priority → ``priority``, batch →
``flex``; any other string passes through (settlement stops on it as unknown), a
non-string is ``UNREADABLE_TIER``, absent is ``None`` (priced at the maximum).

Output is converted to Responses-shaped items so the reader loop sees one shape: each
non-empty ``text`` block → ``{"type": "message", "role": "assistant", "content":
[{"type": "output_text", "text"}]}``, each ``tool_use`` block → ``{"type":
"function_call", "call_id": id, "name", "arguments": the input as a JSON string}`` (an
input that is not a JSON object is a malformed response). Other block kinds (thinking)
carry no reader output and are read past (their tokens are in ``output_tokens``).

Stop reasons: ``max_tokens`` (and any undocumented or absent one) → incomplete;
``end_turn``, ``tool_use``, ``stop_sequence``, ``pause_turn``, ``refusal``,
``compaction`` → completed; an ``error`` event or body → failed; a stream without
``message_stop`` → none (lost).

Streaming readings: the usage of ``message_start`` and every ``message_delta`` is merged
count by count (the deltas are cumulative and may omit counts already sent); a count
that decreases, or two differing ``iterations`` lists, is a conflicting reading
(invalid), and the record uses the last (largest) values. The first ``message_stop`` or
``error`` is the terminal and sets ``done``; events after it in data already fed are
only scanned for a second ``message_start``, ``message_stop`` or ``error``, which makes
the usage invalid (a second reading the parser cannot rank); nothing else of them
counts. A delta for a block that was never started is a malformed stream. The model is
read from ``message_start.message`` (see ``ModelReading``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Final

import msgspec

from efold.guard.permits import UsageRecord
from efold.guard.usage import usage_count
from efold.guard.wire.outcome import (
    UNREADABLE_TIER,
    BufferedBody,
    ModelReading,
    StreamEnd,
    WireOutcome,
    duplicate_key_outcome,
)
from efold.guard.wire.sse import DuplicateKey, JsonEvents, decode_object

COUNT_KEYS: Final = ("input_tokens", "cache_creation_input_tokens",
                     "cache_read_input_tokens", "output_tokens")
ITERATION_KINDS: Final = frozenset({"compaction", "message"})
TIERS: Final = {"standard": "default", "priority": "priority", "batch": "flex"}
COMPLETED_REASONS: Final = frozenset({
    "end_turn", "tool_use", "stop_sequence", "pause_turn", "refusal", "compaction",
})
_STREAM_TERMINALS: Final = frozenset({"message_stop", "error"})
_REPEAT_INVALID: Final = frozenset({"message_start", "message_stop", "error"})


class _Invalid(Exception):
    pass


def _required(raw: dict[str, Any], key: str) -> int:
    count = usage_count(raw.get(key))
    if count is None:
        raise _Invalid
    return count


def _optional(raw: dict[str, Any], key: str) -> int | None:
    return None if raw.get(key) is None else _required(raw, key)


def _counts(raw: Any) -> tuple[int, int, int | None, int | None]:
    """``(input_tokens, output_tokens, cache_creation, cache_read)`` of a usage object
    or an iteration entry (both counts required, the cache counts optional)."""
    if not isinstance(raw, dict):
        raise _Invalid
    return (_required(raw, "input_tokens"), _required(raw, "output_tokens"),
            _optional(raw, "cache_creation_input_tokens"),
            _optional(raw, "cache_read_input_tokens"))


def _add(total: int | None, value: int | None) -> int | None:
    if value is None:
        return total
    return value if total is None else total + value


def _billed(raw: dict[str, Any]) -> tuple[int, int, int | None, int | None]:
    top = _counts(raw)
    iterations = raw.get("iterations")
    if iterations is None:
        return top
    if not isinstance(iterations, list):
        raise _Invalid
    inp = out = 0
    write: int | None = None
    read: int | None = None
    for entry in iterations:
        if not isinstance(entry, dict) or entry.get("type") not in ITERATION_KINDS:
            raise _Invalid
        e_in, e_out, e_write, e_read = _counts(entry)
        inp, out = inp + e_in, out + e_out
        write, read = _add(write, e_write), _add(read, e_read)
    summed = (inp, out, write, read)
    if any((t or 0) > (s or 0) for t, s in zip(top, summed, strict=True)):
        raise _Invalid  # a top-level count the iterations do not account for
    return summed


def read_messages_usage(raw: Any) -> tuple[UsageRecord | None, bool]:
    """``(usage, invalid)`` from a Messages usage object (module docstring)."""
    if raw is None:
        return None, False
    if not isinstance(raw, dict):
        return None, True
    try:
        inp, out, write, read = _billed(raw)
    except _Invalid:
        return None, True
    total = inp + (write or 0) + (read or 0)
    if usage_count(total) is None or usage_count(out) is None:
        return None, True  # sums past the count limit
    return UsageRecord(input=total, output=out, cache_read=read, cache_write=write), False


def read_messages_tier(usage: Any) -> str | None:
    """The reported ``usage.service_tier`` as an efold tier (module docstring)."""
    if not isinstance(usage, dict):
        return None
    tier = usage.get("service_tier")
    if tier is None:
        return None
    if not isinstance(tier, str):
        return UNREADABLE_TIER
    return TIERS.get(tier, tier)


def stop_terminal(reason: Any) -> StreamEnd:
    """How a message that stopped for ``reason`` ended."""
    if isinstance(reason, str) and reason in COMPLETED_REASONS:
        return StreamEnd.COMPLETED
    return StreamEnd.INCOMPLETE


def _text_item(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": text}]}


def _call_item(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


def _object_json(text: str) -> bool:
    try:
        return isinstance(decode_object(text), dict)
    except DuplicateKey:
        # Tool arguments are the model's output for the reader, not a provider reading
        # of money: a repeated key there is the reader's to decode, as it decodes it.
        return True


def body_items(content: Any) -> list[dict[str, Any]] | None:
    """The Responses-shaped items of a message's ``content`` blocks; ``None`` when a
    block is malformed."""
    if not isinstance(content, list):
        return None
    items: list[dict[str, Any]] = []
    for block in content:
        if not isinstance(block, dict):
            return None
        kind = block.get("type")
        if kind == "text":
            if not isinstance(block.get("text"), str):
                return None
            if block["text"]:
                items.append(_text_item(block["text"]))
        elif kind == "tool_use":
            call_id, name, args = block.get("id"), block.get("name"), block.get("input")
            if not (isinstance(call_id, str) and isinstance(name, str)
                    and isinstance(args, dict)):
                return None
            try:
                arguments = msgspec.json.encode(args).decode()
            except (msgspec.EncodeError, RecursionError):
                return None
            items.append(_call_item(call_id, name, arguments))
        elif not isinstance(kind, str):
            return None
    return items


class _Block:
    """One content block of a stream, as its deltas arrive."""

    def __init__(self, kind: str, call_id: str = "", name: str = "",
                 start_input: str = "") -> None:
        self.kind = kind  # "text", "tool_use", or another kind read past
        self.call_id = call_id
        self.name = name
        self.start_input = start_input  # the start's input, as JSON ("{}")
        self.parts: list[str] = []


class MessagesStreamParser:
    def __init__(self) -> None:
        self._stream = JsonEvents()
        self._blocks: dict[int, _Block] = {}
        self._started = False
        self._stop_reason: Any = None
        # Invariant: every count ever reported, each the last (and largest) reading.
        self._counts: dict[str, int] = {}
        self._iterations: Any = None  # the first iterations list reported, never replaced
        self._usage_seen = False  # some event carried a usage object
        self._usage_invalid = False  # malformed or conflicting: sticky
        self._tier: str | None = None
        self._model = ModelReading()
        self._malformed = False  # a structural fault the SSE layer cannot see
        # Invariant: set once, at the first message_stop or error; never replaced.
        self._terminal: StreamEnd | None = None
        self._repeat = False

    @property
    def done(self) -> bool:
        return self._terminal is not None

    def feed(self, chunk: bytes) -> None:
        for event in self._stream.events(chunk):
            data = self._stream.decode(event)
            if data is None:
                return
            kind = data.get("type", event.event)
            self._event(kind if isinstance(kind, str) else None, data)

    def _event(self, kind: str | None, data: dict[str, Any]) -> None:
        if self._terminal is not None:
            if kind in _REPEAT_INVALID:
                self._repeat = True
            return
        if kind == "message_start":
            self._message_start(data.get("message"))
        elif kind == "content_block_start":
            self._block_start(data)
        elif kind == "content_block_delta":
            self._block_delta(data)
        elif kind == "message_delta":
            delta = data.get("delta")
            if isinstance(delta, dict) and "stop_reason" in delta:
                self._stop_reason = delta["stop_reason"]
            self._usage(data.get("usage"))
        elif kind == "message_stop":
            self._terminal = stop_terminal(self._stop_reason)
        elif kind == "error":
            self._terminal = StreamEnd.FAILED
        # ping, content_block_stop and unknown events carry nothing used here.

    def _message_start(self, message: Any) -> None:
        if self._started:
            self._repeat = True
            return
        self._started = True
        if not isinstance(message, dict):
            self._malformed = True
            return
        self._model.see(message)
        self._usage(message.get("usage"))

    def _usage(self, raw: Any) -> None:
        if raw is None:
            return
        self._usage_seen = True
        if not isinstance(raw, dict):
            self._usage_invalid = True
            return
        for key in COUNT_KEYS:
            if raw.get(key) is None:
                continue  # not reported in this event: the earlier reading stands
            count = usage_count(raw[key])
            previous = self._counts.get(key)
            if count is None or (previous is not None and count < previous):
                self._usage_invalid = True
                continue
            self._counts[key] = count
        if raw.get("iterations") is not None:
            if self._iterations is None:
                self._iterations = raw["iterations"]
            elif self._iterations != raw["iterations"]:
                self._usage_invalid = True
        tier = read_messages_tier(raw)
        if tier is not None:
            if self._tier is not None and tier != self._tier:
                tier = UNREADABLE_TIER  # two differing readings: neither can be priced
            self._tier = tier

    def _block_start(self, data: dict[str, Any]) -> None:
        index, block = data.get("index"), data.get("content_block")
        if not isinstance(index, int) or index in self._blocks or not isinstance(block, dict):
            self._malformed = True
            return
        kind = block.get("type")
        if kind == "text":
            started = _Block("text")
            if not isinstance(block.get("text", ""), str):
                self._malformed = True
                return
            started.parts.append(block.get("text", ""))
        elif kind == "tool_use":
            call_id, name, args = block.get("id"), block.get("name"), block.get("input", {})
            if not (isinstance(call_id, str) and isinstance(name, str)
                    and isinstance(args, dict)):
                self._malformed = True
                return
            try:
                start_input = msgspec.json.encode(args).decode()
            except (msgspec.EncodeError, RecursionError):
                self._malformed = True
                return
            started = _Block("tool_use", call_id, name, start_input)
        else:
            started = _Block(kind if isinstance(kind, str) else "?")
        self._blocks[index] = started

    def _block_delta(self, data: dict[str, Any]) -> None:
        block = self._blocks.get(data["index"]) if isinstance(data.get("index"), int) else None
        delta = data.get("delta")
        if block is None or not isinstance(delta, dict):
            self._malformed = True
            return
        kind = delta.get("type")
        if kind == "text_delta" and block.kind == "text":
            piece = delta.get("text")
        elif kind == "input_json_delta" and block.kind == "tool_use":
            piece = delta.get("partial_json")
        elif block.kind not in ("text", "tool_use"):
            return  # a delta of a block read past (thinking, signature)
        else:
            self._malformed = True
            return
        if not isinstance(piece, str):
            self._malformed = True
            return
        block.parts.append(piece)

    def _items(self) -> list[dict[str, Any]] | None:
        items: list[dict[str, Any]] = []
        for index in sorted(self._blocks):
            block = self._blocks[index]
            if block.kind == "text":
                text = "".join(block.parts)
                if text:
                    items.append(_text_item(text))
            elif block.kind == "tool_use":
                arguments = "".join(block.parts) or block.start_input
                if not _object_json(arguments):
                    return None
                items.append(_call_item(block.call_id, block.name, arguments))
        return items

    def _read_usage(self) -> tuple[UsageRecord | None, bool]:
        if self._usage_invalid or self._repeat:
            return None, True
        if not self._usage_seen:
            return None, False
        raw: dict[str, Any] = dict(self._counts)
        if self._iterations is not None:
            raw["iterations"] = self._iterations
        return read_messages_usage(raw)

    def finish(self) -> WireOutcome:
        if self._stream.duplicate_key:
            return duplicate_key_outcome()
        usage, invalid = self._read_usage()
        items = self._items()
        malformed = self._stream.malformed or self._malformed or items is None
        terminal = self._terminal or StreamEnd.NONE
        if malformed and terminal is not StreamEnd.FAILED:
            terminal = StreamEnd.NONE
        return WireOutcome(terminal=terminal, usage=usage, usage_invalid=invalid,
                           tier=self._tier, output_items=items or [], malformed=malformed,
                           model=self._model.model, model_conflict=self._model.conflict)


class MessagesBodyParser(BufferedBody):
    """Non-streaming: buffer the JSON body, decode it at the end (never ``done``
    before: only the end of the body completes it)."""

    def finish(self) -> WireOutcome:
        try:
            data = decode_object(bytes(self._body))
        except DuplicateKey:
            return duplicate_key_outcome()
        if data is None:
            return WireOutcome(terminal=StreamEnd.NONE, malformed=True)
        model = ModelReading()
        model.see(data)
        return replace(message_outcome(data), model=model.model, model_conflict=model.conflict)


def message_outcome(data: dict[str, Any]) -> WireOutcome:
    """A decoded non-streaming reply (its model aside): an error body fails, a message
    settles by its stop reason, anything else is malformed."""
    if data.get("type") == "error":
        return WireOutcome(terminal=StreamEnd.FAILED)
    if data.get("type") != "message":
        return WireOutcome(terminal=StreamEnd.NONE, malformed=True)
    usage, invalid = read_messages_usage(data.get("usage"))
    tier = read_messages_tier(data.get("usage"))
    items = body_items(data.get("content"))
    if items is None:
        return WireOutcome(terminal=StreamEnd.NONE, usage=usage, usage_invalid=invalid,
                           tier=tier, malformed=True)
    return WireOutcome(terminal=stop_terminal(data.get("stop_reason")), usage=usage,
                       usage_invalid=invalid, tier=tier, output_items=items)
