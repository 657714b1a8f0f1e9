"""The OpenAI Responses payload allowlist, and the shape H is computed from.

Top-level keys a reader may send (anything else refuses): ``model``, ``instructions``,
``input``, ``tools``, ``tool_choice``, ``parallel_tool_calls``, ``stream``, ``store``,
``reasoning``, ``max_output_tokens``, ``prompt_cache_key``, ``include``, ``text``.
Stored-input expansion (``conversation``, ``prompt``, ``background``, ``truncation``,
``previous_response_id``) refuses as a forbidden payload; every other unknown key
(``service_tier``, ``metadata``, ``temperature``...) as a forbidden option.

Input items and their keys:

- ``message`` (``type`` may be omitted): role user/assistant/system/developer; content
  a string or parts ``input_text``, ``output_text`` (annotations must be empty),
  ``refusal``. Images, files and audio refuse.
- ``function_call``: a replayed call, any well-formed function name (only the offered
  ``tools`` must be registered history tools); ``arguments`` a string.
- ``function_call_output``: ``output`` a string (list outputs could carry images).
- ``reasoning``: summary of ``summary_text`` parts, ``encrypted_content`` string or
  null, ``content`` absent/null/empty/one ``reasoning_text``; never in request 1.

Tools: ``type: "function"`` only, named as a registered history tool, each once.
"""

from __future__ import annotations

from typing import Any, Final

from efold.errors import Code
from efold.guard.accounting import PayloadShape
from efold.guard.contract import Contract
from efold.guard.errors import PolicyViolation
from efold.guard.wire import rules

TOP_LEVEL_KEYS: Final = frozenset({
    "model", "instructions", "input", "tools", "tool_choice", "parallel_tool_calls",
    "stream", "store", "reasoning", "max_output_tokens", "prompt_cache_key", "include",
    "text",
})
STORED_INPUT_KEYS: Final = frozenset({
    "conversation", "prompt", "background", "truncation", "previous_response_id",
})
INCLUDE_VALUES: Final = frozenset({"reasoning.encrypted_content"})
ROLES: Final = frozenset({"user", "assistant", "system", "developer"})

ITEM_KEYS: Final = {
    "message": frozenset({"type", "role", "content", "id", "status"}),
    "function_call": frozenset({"type", "call_id", "name", "arguments", "id", "status"}),
    "function_call_output": frozenset({"type", "call_id", "output", "id", "status"}),
    "reasoning": frozenset({"type", "id", "summary", "encrypted_content", "content", "status"}),
    # A provider compaction's opaque item (``compact_openai``), replayed as it came.
    "compaction": frozenset({"type", "id", "encrypted_content"}),
}
PART_KEYS: Final = {
    "input_text": frozenset({"type", "text"}),
    "output_text": frozenset({"type", "text", "annotations", "logprobs"}),
    "refusal": frozenset({"type", "refusal"}),
}
TOOL_KEYS: Final = frozenset({"type", "name", "description", "parameters", "strict"})


def check_responses_payload(
    payload: Any, contract: Contract, *, first_request: bool
) -> PayloadShape:
    """Enforce the allowlists; return the counts H is computed from."""
    body = rules.require_dict(payload, "payload")
    for key in body:
        if key in STORED_INPUT_KEYS:
            raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, f"stored-input key {key!r}")
    rules.check_keys(body, TOP_LEVEL_KEYS, "payload", Code.LOOKUP_OPTION_FORBIDDEN)
    rules.check_model(body, contract)
    if body.get("stream") is not True:
        raise PolicyViolation(Code.LOOKUP_ROUTE_MISMATCH, "responses payload must stream")
    rules.check_store(body)
    rules.check_bool(body, "parallel_tool_calls")
    rules.check_prompt_cache_key(body, contract)
    rules.check_max_output(body.get("max_output_tokens"), contract, "max_output_tokens")
    _check_reasoning_option(body.get("reasoning"), contract)
    _check_include(body.get("include"))
    _check_text(body.get("text"))
    instructions = body.get("instructions")
    if instructions is not None:
        rules.require_str(instructions, "instructions")
    offered, properties = _check_tools(body.get("tools"), contract)
    rules.check_tool_choice(body.get("tool_choice"), offered, nested_function=False)
    items, reasoning = _check_input(body.get("input"), contract, first_request=first_request)
    return PayloadShape(
        input_items=items,
        reasoning_items=reasoning,
        tools=len(offered),
        schema_properties=properties,
        has_instructions=instructions is not None,
    )


def _check_reasoning_option(reasoning: Any, contract: Contract) -> None:
    if reasoning is None:
        rules.check_effort(None, contract)
        return
    option = rules.require_dict(reasoning, "reasoning")
    rules.check_keys(option, ("effort", "summary"), "reasoning", Code.LOOKUP_OPTION_FORBIDDEN)
    rules.check_effort(option.get("effort"), contract)
    if option.get("summary") not in (None, "auto", "concise", "detailed"):
        raise PolicyViolation(Code.LOOKUP_OPTION_FORBIDDEN, "reasoning.summary")


def _check_include(include: Any) -> None:
    if include is None:
        return
    if not isinstance(include, list) or not all(v in INCLUDE_VALUES for v in include):
        raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, "include value not allowed")


def _check_text(text: Any) -> None:
    if text is None:
        return
    option = rules.require_dict(text, "text")
    rules.check_keys(option, ("format", "verbosity"), "text", Code.LOOKUP_OPTION_FORBIDDEN)
    fmt = option.get("format")
    if fmt is not None and fmt != {"type": "text"}:
        # An output schema is a structured-repair caller: refused like the others.
        raise PolicyViolation(Code.LOOKUP_AUXILIARY_CALLERS_FORBIDDEN, "output schema")
    if "verbosity" in option and option["verbosity"] not in rules.TEXT_VERBOSITY:
        raise PolicyViolation(Code.LOOKUP_OPTION_FORBIDDEN, "text.verbosity")


def _check_tools(tools: Any, contract: Contract) -> tuple[list[str], int]:
    # A Responses tool carries its name and parameters itself.
    return rules.check_function_tools(tools, contract, TOOL_KEYS, lambda tool: tool)


def _check_input(items: Any, contract: Contract, *, first_request: bool) -> tuple[int, int]:
    if isinstance(items, str):
        return 1, 0
    if not isinstance(items, list) or not items:
        raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, "input must be a non-empty list")
    reasoning = 0
    for raw in items:
        item = rules.require_dict(raw, "input item")
        kind = item.get("type", "message" if "role" in item else None)
        allowed = ITEM_KEYS.get(kind) if isinstance(kind, str) else None
        if allowed is None:
            raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, "unsupported input item")
        rules.check_keys(item, allowed, f"{kind} item")
        if kind == "message":
            _check_message(item)
        elif kind == "function_call":
            rules.check_replayed_call_name(item.get("name"))
            rules.require_str(item.get("call_id"), "function_call.call_id")
            rules.require_str(item.get("arguments"), "function_call.arguments")
        elif kind == "function_call_output":
            rules.require_str(item.get("call_id"), "function_call_output.call_id")
            rules.require_str(item.get("output"), "function_call_output.output")
        elif kind == "compaction":
            rules.require_str(item.get("encrypted_content"), "compaction.encrypted_content")
        else:
            if first_request:
                raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, "reasoning in request 1")
            _check_reasoning_item(item)
            reasoning += 1
    return len(items), reasoning


def _check_message(item: dict[str, Any]) -> None:
    if item.get("role") not in ROLES:
        raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, "message role")
    for part in rules.content_parts(item.get("content")):
        kind = part.get("type")
        allowed = PART_KEYS.get(kind) if isinstance(kind, str) else None
        if allowed is None:
            # input_image / input_file / input_audio: images and remote content.
            raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, "content part type")
        rules.check_keys(part, allowed, f"{kind} part")
        rules.require_str(part.get("refusal" if kind == "refusal" else "text"), f"{kind} text")
        if part.get("annotations") not in (None, []):
            raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, "annotations (remote content)")
        if "logprobs" in part and not isinstance(part["logprobs"], list):
            raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, "logprobs")


def _check_reasoning_item(item: dict[str, Any]) -> None:
    summary = item.get("summary", [])
    if not isinstance(summary, list):
        raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, "reasoning.summary")
    for raw in summary:
        part = rules.require_dict(raw, "summary part")
        if part.get("type") != "summary_text":
            raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, "summary part type")
        rules.check_keys(part, ("type", "text"), "summary part")
        rules.require_str(part.get("text"), "summary text")
    encrypted = item.get("encrypted_content")
    if encrypted is not None:
        rules.require_str(encrypted, "encrypted_content")
    content = item.get("content")
    if content is None or content == []:
        return
    if not isinstance(content, list) or len(content) != 1:
        raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, "reasoning.content")
    part = rules.require_dict(content[0], "reasoning content")
    if part.get("type") != "reasoning_text":
        raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, "reasoning content type")
    rules.check_keys(part, ("type", "text"), "reasoning content")
    rules.require_str(part.get("text"), "reasoning text")
