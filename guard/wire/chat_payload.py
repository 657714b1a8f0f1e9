"""The OpenAI Chat Completions payload allowlist, and the shape H is computed from.

Top-level keys: ``model``, ``messages``, ``tools``, ``tool_choice``,
``parallel_tool_calls``, ``stream``, ``stream_options``, ``max_completion_tokens``,
``max_tokens`` (the older name some servers read), ``reasoning_effort``,
``prompt_cache_key``, ``store``; anything else refuses as a
forbidden option. ``stream`` must match the contract; a streaming payload must ask for
usage (``stream_options == {"include_usage": true}``), a non-streaming one may not
carry ``stream_options``.

Messages (each one an input item for H):

- ``system``/``developer``/``user``: ``content`` a string or ``text`` parts;
- ``assistant``: ``content`` (string, null or text/refusal parts), ``tool_calls``
  (replayed calls: any well-formed function name, as in the Responses format; only the
  offered ``tools`` must be registered history tools), ``refusal``;
- ``tool``: ``tool_call_id`` and string/text-part ``content``.

Image, audio and file parts refuse. Tools: ``type: "function"`` only, registered names.
Chat has no instructions key and no reasoning items.
"""

from __future__ import annotations

from typing import Any, Final

from efold.errors import Code
from efold.guard.accounting import PayloadShape
from efold.guard.contract import Contract
from efold.guard.errors import PolicyViolation
from efold.guard.wire import rules

TOP_LEVEL_KEYS: Final = frozenset({
    "model", "messages", "tools", "tool_choice", "parallel_tool_calls", "stream",
    "stream_options", "max_completion_tokens", "max_tokens", "reasoning_effort",
    "prompt_cache_key", "store",
})
MESSAGE_KEYS: Final = {
    "system": frozenset({"role", "content"}),
    "developer": frozenset({"role", "content"}),
    "user": frozenset({"role", "content"}),
    "assistant": frozenset({"role", "content", "tool_calls", "refusal"}),
    "tool": frozenset({"role", "content", "tool_call_id"}),
}
TOOL_KEYS: Final = frozenset({"type", "function"})
FUNCTION_KEYS: Final = frozenset({"name", "description", "parameters", "strict"})


def check_chat_payload(payload: Any, contract: Contract, *, first_request: bool) -> PayloadShape:
    """Enforce the allowlists; return the counts H is computed from.
    (``first_request`` is accepted for symmetry: chat has no reasoning items.)"""
    del first_request
    body = rules.require_dict(payload, "payload")
    rules.check_keys(body, TOP_LEVEL_KEYS, "payload", Code.LOOKUP_OPTION_FORBIDDEN)
    rules.check_model(body, contract)
    stream = body.get("stream", False)
    if stream is not contract.stream:
        raise PolicyViolation(Code.LOOKUP_ROUTE_MISMATCH, "stream differs from the contract")
    if stream and body.get("stream_options") != {"include_usage": True}:
        raise PolicyViolation(Code.LOOKUP_ROUTE_MISMATCH, "streaming must include usage")
    if not stream and "stream_options" in body:
        raise PolicyViolation(Code.LOOKUP_OPTION_FORBIDDEN, "stream_options without stream")
    rules.check_store(body)
    rules.check_bool(body, "parallel_tool_calls")
    rules.check_prompt_cache_key(body, contract)
    rules.check_max_output(body.get("max_completion_tokens"), contract, "max_completion_tokens")
    rules.check_max_output(body.get("max_tokens"), contract, "max_tokens")
    rules.check_effort(body.get("reasoning_effort"), contract)
    offered, properties = _check_tools(body.get("tools"), contract)
    rules.check_tool_choice(body.get("tool_choice"), offered, nested_function=True)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, "messages must be a non-empty list")
    for raw in messages:
        _check_message(rules.require_dict(raw, "message"), contract)
    return PayloadShape(
        input_items=len(messages),
        reasoning_items=0,
        tools=len(offered),
        schema_properties=properties,
        has_instructions=False,
    )


def _function(tool: dict[str, Any]) -> dict[str, Any]:
    fn = tool.get("function")
    if not isinstance(fn, dict):
        raise PolicyViolation(Code.LOOKUP_TOOLS_FORBIDDEN, "tool.function")
    rules.check_keys(fn, FUNCTION_KEYS, "tool.function", Code.LOOKUP_TOOLS_FORBIDDEN)
    return fn


def _check_tools(tools: Any, contract: Contract) -> tuple[list[str], int]:
    return rules.check_function_tools(tools, contract, TOOL_KEYS, _function)


def _check_message(message: dict[str, Any], contract: Contract) -> None:
    role = message.get("role")
    allowed = MESSAGE_KEYS.get(role) if isinstance(role, str) else None
    if allowed is None:
        raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, "message role")
    rules.check_keys(message, allowed, f"{role} message")
    content = message.get("content")
    if role == "assistant":
        if content is not None:
            _check_content(content, allow_refusal=True)
        if message.get("refusal") is not None:
            rules.require_str(message["refusal"], "refusal")
        _check_tool_calls(message.get("tool_calls"), contract)
        return
    _check_content(content, allow_refusal=False)
    if role == "tool":
        rules.require_str(message.get("tool_call_id"), "tool_call_id")


def _check_content(content: Any, *, allow_refusal: bool) -> None:
    for part in rules.content_parts(content):
        kind = part.get("type")
        if kind == "text":
            rules.check_keys(part, ("type", "text"), "text part")
            rules.require_str(part.get("text"), "text")
        elif kind == "refusal" and allow_refusal:
            rules.check_keys(part, ("type", "refusal"), "refusal part")
            rules.require_str(part.get("refusal"), "refusal")
        else:
            # image_url / input_audio / file: images and remote content.
            raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, "content part type")


def _check_tool_calls(calls: Any, contract: Contract) -> None:
    if calls is None:
        return
    if not isinstance(calls, list):
        raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, "tool_calls")
    for raw in calls:
        call = rules.require_dict(raw, "tool call")
        rules.check_keys(call, ("id", "type", "function"), "tool call")
        if call.get("type") != "function":
            raise PolicyViolation(Code.LOOKUP_TOOLS_FORBIDDEN, "only function tool calls")
        rules.require_str(call.get("id"), "tool call id")
        fn = rules.require_dict(call.get("function"), "tool call function")
        rules.check_keys(fn, ("name", "arguments"), "tool call function")
        # A replayed call (the conversation's own history), as in the Responses format:
        # any well-formed name; what the reader may call now is ``tools``.
        rules.check_replayed_call_name(fn.get("name"))
        rules.require_str(fn.get("arguments"), "tool call arguments")
