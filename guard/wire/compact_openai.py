"""The OpenAI Responses compaction endpoint: its payload allowlist and its reply parser.

What the provider documents (looked up for this module; not yet run against the live
service, only against loopback servers reproducing these shapes):

* ``POST {base}/responses/compact`` ("Compact a response", OpenAI API reference,
  https://platform.openai.com/docs/api-reference/responses/compact; a copy of the page
  in trevor-nichols/openai-agents-saas-starter,
  docs/integrations/openai-responses-api/responses/compact_a_response.md). Request
  body: ``model`` (required), ``input`` (string or array of Responses input items,
  optional), ``instructions`` (optional, applies to the compaction request only),
  ``previous_response_id`` (optional, stored state). A plain JSON request and reply:
  no ``stream``.
* The reply is a "compacted response object": ``{"id", "object":
  "response.compaction", "created_at", "output": [...], "usage": {input_tokens,
  input_tokens_details.cached_tokens, output_tokens,
  output_tokens_details.reasoning_tokens, total_tokens}}``. ``output`` keeps the user
  messages verbatim (``message`` items) and replaces everything else by one
  ``{"type": "compaction", "id", "encrypted_content"}`` item (openai-client-base
  ``CompactionBody``: ``created_by`` optional). The caller passes ``output`` as the
  input of its next ``/responses`` request (``CompactionSummaryItemParam``: ``type``,
  ``encrypted_content``, optional ``id``).

What efold sends (``check_compact_payload``): ``model``, ``input`` (a list of the same
items the Responses allowlist accepts, checked by that allowlist: one rule) and
``instructions``. ``previous_response_id`` (stored server state) refuses as a forbidden
payload, like every stored-input key on ``/responses``; anything else as a forbidden
option. The endpoint takes no reasoning effort, so a compaction request carries none
whatever the route's (``reasoning`` is not an allowed key): the route's effort binds
the requests that take one.

What efold reads (``CompactBodyParser``), strictly: one JSON object, ``object`` exactly
``response.compaction``, ``output`` a list whose items are ``message`` items or
``compaction`` items (``encrypted_content`` a non-empty string); anything else is a
malformed body (settled as lost). Usage follows ``outcome.read_usage``: missing usage is
not zero usage (the hold is kept as lost), malformed usage is an integrity stop. The
reported ``model`` and ``service_tier`` are read as on ``/responses``. The request is not
streamed whatever the route (``CompactWireFormat.streams``): it asks for
``accept: application/json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from efold.errors import Code
from efold.guard.accounting import PayloadShape
from efold.guard.contract import Contract, WireApi
from efold.guard.errors import PolicyViolation
from efold.guard.wire import rules
from efold.guard.wire.formats import WireFormat
from efold.guard.wire.outcome import (
    BufferedBody,
    ModelReading,
    StreamEnd,
    WireOutcome,
    WireParser,
    duplicate_key_outcome,
    read_tier,
    read_usage,
)
from efold.guard.wire.responses_payload import check_responses_payload
from efold.guard.wire.sse import DuplicateKey, decode_object

COMPACT_PATH: Final = "/responses/compact"
COMPACT_OBJECT: Final = "response.compaction"
TOP_LEVEL_KEYS: Final = frozenset({"model", "input", "instructions"})
STORED_INPUT_KEYS: Final = frozenset({"previous_response_id", "conversation"})
COMPACTION_ITEM_KEYS: Final = frozenset({"type", "id", "encrypted_content", "created_by"})
# The reply item kinds efold keeps: what the provider documents, nothing else.
REPLY_ITEM_KINDS: Final = frozenset({"message", "compaction"})


def check_compact_payload(payload: Any, contract: Contract, *, first_request: bool
                          ) -> PayloadShape:
    """Enforce the compaction allowlist (``PolicyViolation``); return the H counts."""
    body = rules.require_dict(payload, "payload")
    for key in body:
        if key in STORED_INPUT_KEYS:
            raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, f"stored-input key {key!r}")
    rules.check_keys(body, TOP_LEVEL_KEYS, "payload", Code.LOOKUP_OPTION_FORBIDDEN)
    if not isinstance(body.get("input"), list):
        raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, "input must be a list of items")
    # The items, model and instructions are the Responses allowlist's: checked by it,
    # as the streaming request with the route's effort it would be (one rule, not a copy).
    as_responses: dict[str, Any] = {**body, "stream": True}
    if contract.effort is not None:
        as_responses["reasoning"] = {"effort": contract.effort}
    return check_responses_payload(as_responses, contract, first_request=first_request)


def compact_payload(model: str, items: list[dict[str, Any]], instructions: str | None = None
                    ) -> dict[str, Any]:
    """The request body asking to compact ``items`` (nothing stored, no stored input)."""
    payload: dict[str, Any] = {"model": model, "input": items}
    if instructions is not None:
        payload["instructions"] = instructions
    return payload


def compaction_item(raw: Any) -> dict[str, Any] | None:
    """``raw`` as a compaction item (only the documented keys, ``encrypted_content`` a
    non-empty string), or None when it is not one."""
    if not isinstance(raw, dict) or raw.get("type") != "compaction":
        return None
    if any(key not in COMPACTION_ITEM_KEYS for key in raw):
        return None
    content = raw.get("encrypted_content")
    if not isinstance(content, str) or not content:
        return None
    if "id" in raw and not isinstance(raw["id"], str):
        return None
    return raw


def reader_input_items(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The compaction reply's items as the input of a later ``/responses`` request, in
    order: a compaction item as ``{"type", "encrypted_content"}`` (plus ``id`` when it
    had one; ``created_by`` is output-only), every other item as it came. The reader
    side of the fold: the items a same-provider reader's first request starts with."""
    out: list[dict[str, Any]] = []
    for item in items:
        if item.get("type") == "compaction":
            kept = {"type": "compaction", "encrypted_content": item["encrypted_content"]}
            if "id" in item:
                kept["id"] = item["id"]
            out.append(kept)
        else:
            out.append(item)
    return out


class CompactBodyParser(BufferedBody):
    """One JSON body: buffered until ``finish`` (the endpoint does not stream)."""

    def finish(self) -> WireOutcome:
        try:
            reply = decode_object(bytes(self._body))
        except DuplicateKey:
            return duplicate_key_outcome()
        if reply is None:
            return WireOutcome(terminal=StreamEnd.NONE, malformed=True)
        if "error" in reply and reply["error"] is not None:
            return WireOutcome(terminal=StreamEnd.FAILED)
        items = _reply_items(reply)
        if items is None:
            return WireOutcome(terminal=StreamEnd.NONE, malformed=True)
        usage, invalid = read_usage(reply.get("usage"), chat=False)
        reading = ModelReading()
        reading.see(reply)
        # The documented reply has no ``model``: read when present, not required.
        return WireOutcome(terminal=StreamEnd.COMPLETED, usage=usage, usage_invalid=invalid,
                           tier=read_tier(reply), output_items=items, model=reading.model,
                           model_conflict=reading.conflict, model_required=False)


def _reply_items(reply: dict[str, Any]) -> list[dict[str, Any]] | None:
    if reply.get("object") != COMPACT_OBJECT:
        return None
    output = reply.get("output")
    if not isinstance(output, list):
        return None
    items: list[dict[str, Any]] = []
    for raw in output:
        if not isinstance(raw, dict) or raw.get("type") not in REPLY_ITEM_KINDS:
            return None
        if raw["type"] == "compaction" and compaction_item(raw) is None:
            return None
        items.append(raw)
    return items


@dataclass(frozen=True)
class CompactWireFormat(WireFormat):
    """The compaction endpoint as a wire format: its own path, allowlist and parser,
    and never streamed (a Responses route streams; this endpoint answers JSON, so the
    request asks for ``application/json``)."""

    def streams(self, contract: Contract) -> bool:
        del contract
        return False

    def parser(self, stream: bool) -> WireParser:
        return CompactBodyParser()


COMPACT = CompactWireFormat(WireApi.OPENAI_RESPONSES, COMPACT_PATH, check_compact_payload)
