"""The faux provider on the Anthropic Messages API: the same extractive reader, another
wire format.

``FauxTransport`` serves ``POST /messages`` through this module: the payload's
``messages`` become the Responses-shaped input items the faux responder reads
(``as_items``: text blocks as ``message`` items, ``tool_use`` as ``function_call``,
``tool_result`` as ``function_call_output``; a ``compaction`` block stays a
``compaction`` item, which the reader cannot see into, as it cannot see into OpenAI's),
and the responder's reply is rendered as the documented Messages event stream
(``message_start`` … ``message_stop``) or, for a non-streaming request, one message
body, so the faux path runs through the same parser as a real Messages route.

Faux usage on this API follows the faux rule (``faux.faux_usage``: input ``max(1,
ceil(body bytes / 4))``, output ``ceil(bytes of the JSON output items / 4)``) in
Anthropic's fields: ``input_tokens`` (no cache fields: nothing is cached), the output
count in ``message_start`` as 1 and in ``message_delta`` as the total (cumulative, as
the API reports it), ``service_tier`` ``standard``.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from efold.guard.wire.faux_reply import FauxReply

# FauxReply.terminal -> the stop_reason that ends the message.
_STOP_REASONS = {"completed": "end_turn", "incomplete": "max_tokens"}


def as_items(payload: dict[str, Any]) -> dict[str, Any]:
    """The Messages ``payload`` as the Responses-shaped payload the responder reads
    (``input`` items and the offered tool names; nothing else is read)."""
    items: list[dict[str, Any]] = []
    for message in payload.get("messages", ()):
        role = message.get("role")
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for block in blocks or ():
            kind = block.get("type")
            if kind == "text":
                part = "output_text" if role == "assistant" else "input_text"
                items.append({"type": "message", "role": role,
                              "content": [{"type": part, "text": block.get("text", "")}]})
            elif kind == "tool_use":
                items.append({"type": "function_call", "call_id": block.get("id"),
                              "name": block.get("name"),
                              "arguments": json.dumps(block.get("input", {}))})
            elif kind == "tool_result":
                items.append({"type": "function_call_output", "call_id": block.get("tool_use_id"),
                              "output": _result_text(block.get("content"))})
            elif kind == "compaction":
                items.append({"type": "compaction"})
    tools = [{"type": "function", "name": t.get("name")} for t in payload.get("tools", ())
             if isinstance(t, dict)]
    return {"model": payload.get("model"), "input": items, "tools": tools}


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(str(b.get("text", "")) for b in content or () if isinstance(b, dict))


def as_blocks(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The responder's Responses-shaped output items as Messages content blocks."""
    blocks: list[dict[str, Any]] = []
    for item in items:
        if item.get("type") == "message":
            text = "".join(str(p.get("text", "")) for p in item.get("content", ()))
            blocks.append({"type": "text", "text": text})
        elif item.get("type") == "function_call":
            blocks.append({"type": "tool_use", "id": item.get("call_id"),
                           "name": item.get("name"),
                           "input": json.loads(str(item.get("arguments") or "{}"))})
    return blocks


def messages_usage(body: bytes, items: list[dict[str, Any]]) -> dict[str, Any]:
    """Faux usage in Anthropic's fields (module docstring)."""
    output_bytes = len(msgspec.json.encode(items))
    return {"input_tokens": max(1, -(-len(body) // 4)), "output_tokens": -(-output_bytes // 4),
            "service_tier": "standard"}


def _event(kind: str, **fields: Any) -> bytes:
    data = msgspec.json.encode({"type": kind, **fields})
    return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"


def render_messages(reply: FauxReply, usage: dict[str, Any] | None, *, model: str | None,
                    stream: bool) -> bytes:
    """A reply as a Messages event stream (``stream``) or one message body. ``usage``
    None sends none (missing usage); terminal ``cut`` ends the stream without
    ``message_stop``, ``error``/``failed`` with an ``error`` event (an error body when
    not streaming)."""
    blocks = as_blocks(reply.items)
    stop = _STOP_REASONS.get(reply.terminal)
    error = {"type": "error", "error": {"type": "api_error", "message": "faux error"}}
    reported = {} if model is None else {"model": model}
    if not stream:
        if stop is None:
            return msgspec.json.encode(error)
        body: dict[str, Any] = {"id": "msg_faux", "type": "message", "role": "assistant",
                                "content": blocks, "stop_reason": stop, **reported}
        if usage is not None:
            body["usage"] = usage
        return msgspec.json.encode(body)
    start_usage = None if usage is None else {**usage, "output_tokens": 1}
    message: dict[str, Any] = {"id": "msg_faux", "type": "message", "role": "assistant",
                               "content": [], "stop_reason": None, **reported}
    if start_usage is not None:
        message["usage"] = start_usage
    out = [_event("message_start", message=message)]
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            out.append(_event("content_block_start", index=index,
                              content_block={"type": "text", "text": ""}))
            text = block["text"]
            for piece in (text[:len(text) // 2], text[len(text) // 2:]):
                if piece:
                    out.append(_event("content_block_delta", index=index,
                                      delta={"type": "text_delta", "text": piece}))
        else:
            out.append(_event("content_block_start", index=index,
                              content_block={**block, "input": {}}))
            out.append(_event("content_block_delta", index=index, delta={
                "type": "input_json_delta", "partial_json": json.dumps(block["input"])}))
        out.append(_event("content_block_stop", index=index))
    if reply.terminal == "cut":
        return b"".join(out)
    if stop is None:
        out.append(_event("error", error=error["error"]))
        return b"".join(out)
    delta: dict[str, Any] = {"delta": {"stop_reason": stop, "stop_sequence": None}}
    if usage is not None:
        delta["usage"] = {"output_tokens": usage["output_tokens"]}
    out.append(_event("message_delta", **delta))
    out.append(_event("message_stop"))
    return b"".join(out)
