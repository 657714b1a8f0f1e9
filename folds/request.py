"""From a checkpoint and a probe question to the first OpenAI Responses request.

``checkpoint_to_request`` is pure: the reader loop sends its result as round 1 and
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
"""

from __future__ import annotations

from typing import Any

from efold.folds.checkpoint import Checkpoint, ReaderMessage
from efold.folds.lookup import lookup_tool_schemas


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
        payload["tools"] = lookup_tool_schemas()
        payload["tool_choice"] = "auto"
        payload["parallel_tool_calls"] = False
    return payload
