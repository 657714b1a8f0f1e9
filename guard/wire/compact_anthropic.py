"""Anthropic's on-demand compaction: its payload allowlist and its reply parser.

What the provider documents (Anthropic docs, "On-demand compaction", beta
``compact-2026-09-04``; looked up for this module, run only against loopback servers
reproducing these shapes, never against the live service):

* The same ``POST {base}/messages`` with ``anthropic-beta: compact-2026-09-04``: an
  ordinary Messages body plus a top-level ``compaction: {"type": "summarize",
  "instructions"?: str (at most 16,384 characters)}``, not streamed. It may not be
  combined with ``context_management``, ``stop_sequences`` or ``tool_choice``.
* The reply is a message with ``stop_reason: "compaction"`` whose ``content`` is one
  ``{"type": "compaction", "content": "<readable summary>", "signature": "<opaque>"}``
  block, and whose ``usage`` reports zero top-level ``input_tokens``/``output_tokens``:
  the cost is in ``usage.iterations`` (``[{"type": "compaction", "input_tokens",
  "output_tokens"}]``), whose sums are what is billed.
* The caller then sends ``{"role": "assistant", "content": [<that block, as received>]}``
  first in the ``messages`` of later requests, in place of the summarized messages,
  with the same beta header (``messages_payload.messages_headers`` adds it).

What efold sends (``check_compact_messages_payload``): the Messages allowlist, applied
to the body minus ``compaction`` (one rule, not a copy), which must be exactly
``{"type": "summarize"}`` plus an optional ``instructions`` string within the limit;
``stream`` absent or false whatever the route's (the request has one answer shape); no
``tools`` or ``tool_choice`` (nothing may be called while summarizing).

What efold reads (``CompactMessagesBodyParser``), strictly: one JSON message,
``stop_reason`` exactly ``compaction``, ``content`` exactly one compaction block
(``compaction_block``: only the documented keys, ``content`` a non-empty string,
``signature`` a string when present); anything else is a malformed body (settled as
lost); an error body fails. Usage follows ``messages_stream.read_messages_usage`` with
one more rule: ``iterations`` is *required*. A compaction reply whose usage has none
reads as missing usage (the hold is kept as lost): its top-level zeros must never
settle as a free request. Model and tier are read as on any Messages reply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from efold.errors import Code
from efold.guard.accounting import PayloadShape
from efold.guard.contract import Contract, WireApi
from efold.guard.errors import PolicyViolation
from efold.guard.wire import rules
from efold.guard.wire.formats import Headers, WireFormat
from efold.guard.wire.messages_payload import ANTHROPIC_COMPACT_BETA as ANTHROPIC_COMPACT_BETA
from efold.guard.wire.messages_payload import ANTHROPIC_VERSION, check_messages_payload
from efold.guard.wire.messages_stream import (
    read_messages_tier,
    read_messages_usage,
)
from efold.guard.wire.outcome import (
    BufferedBody,
    ModelReading,
    StreamEnd,
    WireOutcome,
    WireParser,
    duplicate_key_outcome,
)
from efold.guard.wire.sse import DuplicateKey, decode_object

COMPACT_MESSAGES_PATH: Final = "/messages"
COMPACTION_KEYS: Final = frozenset({"type", "instructions"})
COMPACTION_BLOCK_KEYS: Final = frozenset({"type", "content", "signature"})
MAX_INSTRUCTIONS_CHARS: Final = 16_384
COMPACTION_STOP_REASON: Final = "compaction"


def check_compact_messages_payload(payload: Any, contract: Contract, *, first_request: bool
                                   ) -> PayloadShape:
    """Enforce the compaction allowlist (``PolicyViolation``); return the H counts."""
    body = rules.require_dict(payload, "payload")
    _check_compaction(body.get("compaction"))
    if body.get("stream", False) is not False:
        raise PolicyViolation(Code.LOOKUP_OPTION_FORBIDDEN, "a compaction request does not stream")
    for key in ("tools", "tool_choice"):
        if key in body:
            raise PolicyViolation(Code.LOOKUP_TOOLS_FORBIDDEN, f"{key} in a compaction request")
    # The rest is an ordinary Messages body: checked by that allowlist, as the request
    # on the route's own stream setting it would be (one rule, not a copy).
    as_messages = {key: value for key, value in body.items() if key != "compaction"}
    as_messages["stream"] = contract.stream
    return check_messages_payload(as_messages, contract, first_request=first_request)


def _check_compaction(compaction: Any) -> None:
    if compaction is None:
        raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, "no compaction request")
    option = rules.require_dict(compaction, "compaction")
    rules.check_keys(option, COMPACTION_KEYS, "compaction", Code.LOOKUP_OPTION_FORBIDDEN)
    if option.get("type") != "summarize":
        raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, "compaction.type")
    if "instructions" in option:
        instructions = rules.require_str(option["instructions"], "compaction.instructions")
        if len(instructions) > MAX_INSTRUCTIONS_CHARS:
            raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, "compaction.instructions")


def compact_messages_payload(model: str, messages: list[dict[str, Any]], max_tokens: int,
                             system: str | None = None, instructions: str | None = None,
                             effort: str | None = None) -> dict[str, Any]:
    """The request body asking to compact ``messages`` (not streamed, nothing offered;
    the route's ``effort``, when it has one, as every request on it carries it)."""
    compaction: dict[str, Any] = {"type": "summarize"}
    if instructions is not None:
        compaction["instructions"] = instructions
    payload: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "messages": messages}
    if system is not None:
        payload["system"] = system
    if effort is not None:
        payload["output_config"] = {"effort": effort}
    payload["compaction"] = compaction
    return payload


def compaction_block(raw: Any) -> dict[str, Any] | None:
    """``raw`` as a compaction block (only the documented keys, ``content`` a non-empty
    string, ``signature`` a string when present), or None when it is not one."""
    if not isinstance(raw, dict) or raw.get("type") != "compaction":
        return None
    if any(key not in COMPACTION_BLOCK_KEYS for key in raw):
        return None
    content = raw.get("content")
    if not isinstance(content, str) or not content:
        return None
    if "signature" in raw and not isinstance(raw["signature"], str):
        return None
    return raw


def reader_messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The compaction reply's block(s) as the first message of a later request: one
    assistant message holding them as received (the reader side of the fold)."""
    return [{"role": "assistant", "content": [*items]}]


class CompactMessagesBodyParser(BufferedBody):
    """One JSON message: buffered until ``finish`` (the request does not stream)."""

    def finish(self) -> WireOutcome:
        try:
            reply = decode_object(bytes(self._body))
        except DuplicateKey:
            return duplicate_key_outcome()
        if reply is None:
            return WireOutcome(terminal=StreamEnd.NONE, malformed=True)
        if reply.get("type") == "error":
            return WireOutcome(terminal=StreamEnd.FAILED)
        block = _reply_block(reply)
        if block is None:
            return WireOutcome(terminal=StreamEnd.NONE, malformed=True)
        raw_usage = reply.get("usage")
        usage, invalid = read_messages_usage(raw_usage)
        if not invalid and (not isinstance(raw_usage, dict)
                            or raw_usage.get("iterations") is None):
            usage = None  # no iterations: the billed counts were never reported
        reading = ModelReading()
        reading.see(reply)
        return WireOutcome(terminal=StreamEnd.COMPLETED, usage=usage, usage_invalid=invalid,
                           tier=read_messages_tier(raw_usage), output_items=[block],
                           model=reading.model, model_conflict=reading.conflict)


def _reply_block(reply: dict[str, Any]) -> dict[str, Any] | None:
    if reply.get("type") != "message" or reply.get("stop_reason") != COMPACTION_STOP_REASON:
        return None
    content = reply.get("content")
    if not isinstance(content, list) or len(content) != 1:
        return None
    return compaction_block(content[0])


@dataclass(frozen=True)
class CompactMessagesWireFormat(WireFormat):
    """On-demand compaction as a wire format: the Messages path and credential, the
    version and beta headers always, never streamed, its own allowlist and parser."""

    def headers(self, payload: Any) -> Headers:
        del payload
        return (("anthropic-version", ANTHROPIC_VERSION),
                ("anthropic-beta", ANTHROPIC_COMPACT_BETA))

    def streams(self, contract: Contract) -> bool:
        del contract
        return False

    def parser(self, stream: bool) -> WireParser:
        return CompactMessagesBodyParser()


COMPACT_MESSAGES = CompactMessagesWireFormat(
    WireApi.ANTHROPIC_MESSAGES, COMPACT_MESSAGES_PATH, check_compact_messages_payload,
    auth="x-api-key")
