"""The Anthropic Messages payload allowlist, its request headers, and the shape H is
computed from.

What the provider documents (Anthropic API reference, "Messages", ``POST /v1/messages``;
looked up for this module, run only against loopback servers reproducing these shapes,
never against the live service): ``x-api-key`` carries the key (not ``authorization``),
``anthropic-version: 2023-06-01`` is required, and a request that replays a compaction
block needs ``anthropic-beta: compact-2026-09-04`` (``messages_headers``).

Top-level keys a reader may send: ``model``, ``max_tokens`` (required, in 1..O),
``messages``, ``system``, ``stream``, ``tools``, ``tool_choice``, ``output_config``.
Server-side state and remote execution (``context_management``, ``container``,
``mcp_servers``) and the top-level ``compaction`` request (``compact_anthropic``'s own
format only) refuse as a forbidden payload; every other key (``metadata``,
``temperature``, ``stop_sequences``, ``thinking``, ``service_tier``...) as a forbidden
option. ``stream`` must equal the contract's (absent reads as false). The effort rides
in ``output_config == {"effort": E}``, present exactly when the contract sets one.
Messages has no prompt cache key: a contract carrying one refuses every payload.

Messages (each one an input item for H; a ``system`` prompt counts as instructions):
role ``user`` or ``assistant``, ``content`` a string or a list of blocks:

- ``text`` (either role): ``{type, text}``;
- ``tool_use`` (assistant): a replayed call, ``id``, any well-formed function ``name``
  (only the offered ``tools`` must be registered history tools), ``input`` an object;
- ``tool_result`` (user): ``tool_use_id``, ``content`` a string or ``text`` blocks,
  optional ``is_error`` boolean;
- ``compaction`` (``type``, ``content`` string, optional opaque ``signature`` string):
  only as the sole block of ``messages[0]``, role assistant, where a later request
  puts the block an on-demand compaction returned.

Images, documents, thinking and every other block kind refuse as a forbidden payload.
Tools: ``{name, description, input_schema}`` (schema an object), registered names, each
once; ``tool_choice`` only ``{"type": "auto"}``, optionally with a boolean
``disable_parallel_tool_use`` (one call at a time, as the reader loop runs them).
"""

from __future__ import annotations

from typing import Any, Final

from efold.errors import Code
from efold.guard.accounting import PayloadShape
from efold.guard.contract import Contract
from efold.guard.errors import PolicyViolation
from efold.guard.wire import rules

ANTHROPIC_VERSION: Final = "2023-06-01"
ANTHROPIC_COMPACT_BETA: Final = "compact-2026-09-04"

TOP_LEVEL_KEYS: Final = frozenset({
    "model", "max_tokens", "messages", "system", "stream", "tools", "tool_choice",
    "output_config",
})
# Server-side state, remote execution, and the compaction request itself.
SERVER_SIDE_KEYS: Final = frozenset({
    "context_management", "container", "mcp_servers", "compaction",
})
MESSAGE_KEYS: Final = {
    "user": frozenset({"role", "content"}),
    "assistant": frozenset({"role", "content"}),
}
BLOCK_KEYS: Final = {
    "text": frozenset({"type", "text"}),
    "tool_use": frozenset({"type", "id", "name", "input"}),
    "tool_result": frozenset({"type", "tool_use_id", "content", "is_error"}),
    "compaction": frozenset({"type", "content", "signature"}),
}
# The block kinds each role may send (``compaction`` has its own, narrower rule).
ROLE_BLOCKS: Final = {
    "user": frozenset({"text", "tool_result"}),
    "assistant": frozenset({"text", "tool_use"}),
}
TOOL_KEYS: Final = frozenset({"name", "description", "input_schema"})
TOOL_CHOICE_KEYS: Final = frozenset({"type", "disable_parallel_tool_use"})
SYSTEM_BLOCK_KEYS: Final = BLOCK_KEYS["text"]


def check_messages_payload(payload: Any, contract: Contract, *, first_request: bool
                           ) -> PayloadShape:
    """Enforce the allowlists; return the counts H is computed from.
    (``first_request`` is accepted for symmetry: Messages replays no reasoning items.)"""
    del first_request
    body = rules.require_dict(payload, "payload")
    if contract.prompt_cache_key is not None:
        raise PolicyViolation(Code.LOOKUP_PROMPT_CACHE_KEY_FORBIDDEN,
                              "the Messages API takes no prompt cache key")
    rules.check_prompt_cache_key(body, contract)
    for key in body:
        if key in SERVER_SIDE_KEYS:
            raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, f"server-side key {key!r}")
    rules.check_keys(body, TOP_LEVEL_KEYS, "payload", Code.LOOKUP_OPTION_FORBIDDEN)
    rules.check_model(body, contract)
    rules.check_bool(body, "stream")
    if body.get("stream", False) is not contract.stream:
        raise PolicyViolation(Code.LOOKUP_ROUTE_MISMATCH, "stream differs from the contract")
    if body.get("max_tokens") is None:
        raise PolicyViolation(Code.LOOKUP_ROUTE_MISMATCH, "max_tokens is required")
    rules.check_max_output(body["max_tokens"], contract, "max_tokens")
    _check_output_config(body, contract)
    has_system = _check_system(body.get("system"))
    offered, properties = _check_tools(body.get("tools"), contract)
    _check_tool_choice(body.get("tool_choice"))
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, "messages must be a non-empty list")
    for index, raw in enumerate(messages):
        _check_message(rules.require_dict(raw, "message"), first=index == 0)
    return PayloadShape(
        input_items=len(messages),
        reasoning_items=0,
        tools=len(offered),
        schema_properties=properties,
        has_instructions=has_system,
    )


def holds_compaction(payload: Any) -> bool:
    """Whether any message of ``payload`` holds a ``compaction`` block."""
    messages = payload.get("messages") if isinstance(payload, dict) else None
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else ():
            if isinstance(block, dict) and block.get("type") == "compaction":
                return True
    return False


def messages_headers(payload: Any) -> tuple[tuple[str, str], ...]:
    """The documented headers: the API version, and the compaction beta flag when the
    payload replays a compaction block."""
    headers = [("anthropic-version", ANTHROPIC_VERSION)]
    if holds_compaction(payload):
        headers.append(("anthropic-beta", ANTHROPIC_COMPACT_BETA))
    return tuple(headers)


def _check_output_config(body: dict[str, Any], contract: Contract) -> None:
    if "output_config" not in body:
        rules.check_effort(None, contract)
        return
    option = rules.require_dict(body["output_config"], "output_config")
    rules.check_keys(option, ("effort",), "output_config", Code.LOOKUP_OPTION_FORBIDDEN)
    effort = option.get("effort")
    if effort is None:
        raise PolicyViolation(Code.LOOKUP_ROUTE_MISMATCH, "output_config without an effort")
    rules.check_effort(effort, contract)


def _check_system(system: Any) -> bool:
    if system is None:
        return False
    if isinstance(system, str):
        return True
    if not isinstance(system, list):
        raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, "system must be text")
    for raw in system:
        block = rules.require_dict(raw, "system block")
        if block.get("type") != "text":
            raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, "system block type")
        rules.check_keys(block, SYSTEM_BLOCK_KEYS, "system block")
        rules.require_str(block.get("text"), "system text")
    return True


def _check_tools(tools: Any, contract: Contract) -> tuple[list[str], int]:
    """``rules.check_function_tools`` for tools that carry no ``type``: a list of
    distinct tools named in the contract, each with an object ``input_schema``."""
    if tools is None:
        return [], 0
    if not isinstance(tools, list):
        raise PolicyViolation(Code.LOOKUP_TOOLS_FORBIDDEN, "tools must be a list")
    names: list[str] = []
    properties = 0
    for raw in tools:
        if not isinstance(raw, dict):
            raise PolicyViolation(Code.LOOKUP_TOOLS_FORBIDDEN, "tool must be an object")
        rules.check_keys(raw, TOOL_KEYS, "tool", Code.LOOKUP_TOOLS_FORBIDDEN)
        name = rules.check_tool_name(raw.get("name"), contract)
        if name in names:
            raise PolicyViolation(Code.LOOKUP_TOOLS_FORBIDDEN, "tool offered twice")
        names.append(name)
        if "description" in raw and not isinstance(raw["description"], str):
            raise PolicyViolation(Code.LOOKUP_TOOLS_FORBIDDEN, "tool description")
        if not isinstance(raw.get("input_schema"), dict):
            raise PolicyViolation(Code.LOOKUP_TOOLS_FORBIDDEN, "tool input_schema")
        properties += rules.check_function_schema(raw["input_schema"], "tool")
    return names, properties


def _check_tool_choice(choice: Any) -> None:
    if choice is None:
        return
    if not isinstance(choice, dict) or choice.get("type") != "auto":
        raise PolicyViolation(Code.LOOKUP_TOOLS_FORBIDDEN, "tool_choice other than auto")
    rules.check_keys(choice, TOOL_CHOICE_KEYS, "tool_choice", Code.LOOKUP_TOOLS_FORBIDDEN)
    rules.check_bool(choice, "disable_parallel_tool_use")


def _check_message(message: dict[str, Any], *, first: bool) -> None:
    role = message.get("role")
    if not isinstance(role, str) or role not in MESSAGE_KEYS:
        raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, "message role")
    allowed = MESSAGE_KEYS[role]
    rules.check_keys(message, allowed, f"{role} message")
    content = message.get("content")
    if isinstance(content, list) and any(
            isinstance(block, dict) and block.get("type") == "compaction" for block in content):
        if not (first and role == "assistant" and len(content) == 1):
            raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN,
                                  "a compaction block only as the sole content of message 1")
        _check_compaction_block(content[0])
        return
    for block in rules.content_parts(content):
        kind = block.get("type")
        keys = BLOCK_KEYS.get(kind) if isinstance(kind, str) else None
        if keys is None or kind not in ROLE_BLOCKS[role]:
            # image / document / thinking / server tools: images and remote content.
            raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, "content block type")
        rules.check_keys(block, keys, f"{kind} block")
        if kind == "text":
            rules.require_str(block.get("text"), "text")
        elif kind == "tool_use":
            rules.require_str(block.get("id"), "tool_use.id")
            rules.check_replayed_call_name(block.get("name"))
            rules.require_dict(block.get("input"), "tool_use.input")
        else:
            _check_tool_result(block)


def _check_tool_result(block: dict[str, Any]) -> None:
    rules.require_str(block.get("tool_use_id"), "tool_result.tool_use_id")
    rules.check_bool(block, "is_error")
    content = block.get("content")
    if content is None:
        raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, "tool_result.content")
    for part in rules.content_parts(content):
        if part.get("type") != "text":
            raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, "tool_result block type")
        rules.check_keys(part, BLOCK_KEYS["text"], "tool_result text block")
        rules.require_str(part.get("text"), "tool_result text")


def _check_compaction_block(block: dict[str, Any]) -> None:
    rules.check_keys(block, BLOCK_KEYS["compaction"], "compaction block")
    rules.require_str(block.get("content"), "compaction.content")
    if "signature" in block:
        rules.require_str(block["signature"], "compaction.signature")
