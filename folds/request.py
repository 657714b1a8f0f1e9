"""From a checkpoint and a probe question to the first request, in either wire format.

``checkpoint_to_request`` (OpenAI Responses) and ``checkpoint_to_chat_request`` (Chat
Completions) are pure: the reader loop sends its result as round 1 and
only appends ``function_call`` / ``function_call_output`` items between rounds.

Item shapes (the guard's allowlist for the Responses wire format):

* owner or injected block -> ``{"type": "message", "role": "user",
  "content": [{"type": "input_text", "text": ...}]}``
* assistant text -> ``{"type": "message", "role": "assistant",
  "content": [{"type": "output_text", "text": ...}]}`` (omitted when empty)
* assistant tool call -> ``{"type": "function_call", "call_id", "name", "arguments"}``
* tool result -> ``{"type": "function_call_output", "call_id", "output"}``
* the probe question last, as a user message.

Top-level keys: ``model``, ``instructions``, ``input``, ``stream`` (true: the guard
requires SSE), ``store`` (false: nothing is kept server-side) and, only when the arm
offers the lookup tools, ``tools`` (function tools), ``tool_choice`` "auto" and
``parallel_tool_calls`` false (the loop and the meter are sequential).

Chat Completions (the guard's chat allowlist): the instructions become the first
``system`` message; owner text ``{"role": "user", "content"}``; assistant text and tool
calls one ``assistant`` message (``content`` "" when it only calls tools, ``tool_calls``
of ``{"id", "type": "function", "function": {"name", "arguments"}}``); a tool result
``{"role": "tool", "tool_call_id", "content"}``; the question last. A streaming payload
asks for usage (``stream_options.include_usage``); tools are the same two lookup
functions in the chat shape.

Anthropic Messages (the guard's Messages allowlist): the instructions are ``system``;
owner text a ``user`` message of one ``text`` block; assistant text and tool calls one
``assistant`` message (a ``text`` block when there is text, then one ``tool_use`` block
per call, its ``input`` the decoded arguments); consecutive tool results one ``user``
message of ``tool_result`` blocks (the API wants every result of a turn in the next user
message); the question last. The API refuses an empty text block, so empty text is left
out (a message that holds nothing else is then left out whole: it carried nothing).
Tools are the lookup functions as ``{name, description, input_schema}``, with
``tool_choice`` auto and parallel use off (the loop and the meter are sequential). The
route's options (``stream``, the required ``max_tokens``) are the caller's
(``worker.route.route_options``).
"""

from __future__ import annotations

import json
from typing import Any, Final

from efold.folds.checkpoint import Checkpoint, ReaderMessage
from efold.folds.lookup import lookup_tool_schemas


def opaque_items(checkpoint: Checkpoint, kind: str) -> list[dict[str, Any]]:
    """The checkpoint's opaque items, digest-checked, when they are of ``kind`` (the one
    this wire format can send back); else ``inventory_opaque_reader``. The plan never
    sends such a slot: this is the request builder's own guard against it."""
    from efold.errors import Code
    from efold.folds.errors import FoldError
    from efold.folds.opaque import verify_opaque

    assert checkpoint.opaque is not None
    opaque = verify_opaque(checkpoint.opaque)
    if opaque.kind != kind:
        raise FoldError(Code.INVENTORY_OPAQUE_READER,
                        f"{opaque.kind} items cannot be sent in this wire format")
    return opaque.items


def _user_item(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def message_items(message: ReaderMessage) -> list[dict[str, Any]]:
    """The Responses input items one checkpoint message becomes (in order)."""
    if message.role == "tool":
        return [{"type": "function_call_output", "call_id": message.tool_call_id, "output": message.content}]
    if message.role == "user":
        return [_user_item(message.content)]
    items: list[dict[str, Any]] = []
    if message.content:
        items.append(
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": message.content}],
            }
        )
    for call in message.tool_calls or ():
        items.append(
            {
                "type": "function_call",
                "call_id": call.id,
                "name": call.function.name,
                "arguments": call.function.arguments,
            }
        )
    return items


def checkpoint_to_request(
    checkpoint: Checkpoint, question: str, *, model: str, instructions: str
) -> dict[str, Any]:
    """The first Responses payload of a probe: the checkpoint, then the question."""
    items: list[dict[str, Any]] = []
    if checkpoint.opaque is not None:
        from efold.folds.opaque import OPENAI_COMPACT_KIND
        from efold.guard.wire.compact_openai import reader_input_items

        items.extend(reader_input_items(opaque_items(checkpoint, OPENAI_COMPACT_KIND)))
    for message in checkpoint.messages:
        items.extend(message_items(message))
    items.append(_user_item(question))
    payload: dict[str, Any] = {
        "model": model,
        "instructions": instructions,
        "input": items,
        "stream": True,
        "store": False,
    }
    if checkpoint.tools:
        payload.update(offer_tools(lookup_tool_schemas(), RESPONSES_API))
    return payload


def chat_message(message: ReaderMessage) -> dict[str, Any]:
    """The Chat Completions message one checkpoint message becomes."""
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    if message.role == "user":
        return {"role": "user", "content": message.content}
    # Content is a string even beside tool calls: OpenAI accepts null there, but
    # llama.cpp's server refuses it (HTTP 500), and "" means the same to both.
    chat: dict[str, Any] = {"role": "assistant", "content": message.content}
    if message.tool_calls:
        chat["tool_calls"] = [
            {"id": call.id, "type": "function",
             "function": {"name": call.function.name, "arguments": call.function.arguments}}
            for call in message.tool_calls
        ]
    return chat


RESPONSES_API: Final = "openai-responses"
CHAT_API: Final = "openai-chat"
MESSAGES_API: Final = "anthropic-messages"


def offer_tools(tools: list[dict[str, Any]], api: str) -> dict[str, Any]:
    """The payload keys that offer ``tools`` (Responses-shaped function tools) on the
    wire API ``api``, one call per reply: Responses as they are; Chat Completions with
    the function nested; Messages with ``parameters`` as ``input_schema``."""
    if api == MESSAGES_API:
        return {"tools": [{"name": t["name"], "description": t["description"],
                           "input_schema": t["parameters"]} for t in tools],
                "tool_choice": {"type": "auto", "disable_parallel_tool_use": True}}
    shaped = tools if api != CHAT_API else [
        {"type": "function", "function": {k: v for k, v in t.items() if k != "type"}}
        for t in tools]
    return {"tools": shaped, "tool_choice": "auto", "parallel_tool_calls": False}


def checkpoint_to_chat_request(
    checkpoint: Checkpoint, question: str, *, model: str, instructions: str, stream: bool
) -> dict[str, Any]:
    """The first Chat Completions payload of a probe: the instructions, the checkpoint,
    then the question. Chat Completions can send back no provider's opaque items: a
    checkpoint holding some refuses (``inventory_opaque_reader``), never drops them."""
    if checkpoint.opaque is not None:
        opaque_items(checkpoint, kind="")  # no kind is this format's: always refuses
    messages: list[dict[str, Any]] = [{"role": "system", "content": instructions}]
    messages.extend(chat_message(m) for m in checkpoint.messages)
    messages.append({"role": "user", "content": question})
    payload: dict[str, Any] = {"model": model, "messages": messages, "stream": stream,
                               "store": False}
    if stream:
        payload["stream_options"] = {"include_usage": True}
    if checkpoint.tools:
        payload.update(offer_tools(lookup_tool_schemas(), CHAT_API))
    return payload


def tool_input(arguments: str) -> dict[str, Any]:
    """A call's arguments as a ``tool_use`` input: the decoded JSON object, or, when the
    history holds arguments that are not one, ``{"arguments": <the text>}`` (kept
    visible, never dropped)."""
    try:
        decoded = json.loads(arguments)
    except ValueError:
        decoded = None
    return decoded if isinstance(decoded, dict) else {"arguments": arguments}


def messages_conversation(messages: list[ReaderMessage]) -> list[dict[str, Any]]:
    """The Messages ``messages`` a run of checkpoint messages becomes (in order)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "tool":
            block = {"type": "tool_result", "tool_use_id": message.tool_call_id,
                     "content": message.content}
            last = out[-1] if out else None
            if last is not None and last["role"] == "user" \
                    and all(b["type"] == "tool_result" for b in last["content"]):
                last["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
            continue
        blocks: list[dict[str, Any]] = []
        if message.content:
            blocks.append({"type": "text", "text": message.content})
        for call in message.tool_calls or ():
            blocks.append({"type": "tool_use", "id": call.id, "name": call.function.name,
                           "input": tool_input(call.function.arguments)})
        if blocks:
            out.append({"role": message.role, "content": blocks})
    return out


def checkpoint_to_messages_request(
    checkpoint: Checkpoint, question: str, *, model: str, instructions: str
) -> dict[str, Any]:
    """The first Messages payload of a probe: the opaque compaction block first when the
    checkpoint holds one (``compact_anthropic.reader_messages``), the checkpoint, then
    the question. Without the route's options (the caller adds them)."""
    messages: list[dict[str, Any]] = []
    if checkpoint.opaque is not None:
        from efold.folds.opaque import ANTHROPIC_COMPACT_KIND
        from efold.guard.wire.compact_anthropic import reader_messages

        messages.extend(reader_messages(opaque_items(checkpoint, ANTHROPIC_COMPACT_KIND)))
    messages.extend(messages_conversation(checkpoint.messages))
    messages.append({"role": "user", "content": [{"type": "text", "text": question}]})
    payload: dict[str, Any] = {"model": model, "system": instructions, "messages": messages}
    if checkpoint.tools:
        payload.update(offer_tools(lookup_tool_schemas(), MESSAGES_API))
    return payload
