"""Checks shared by the per-wire payload allowlists: keys, route identity, tools.

Every check raises ``PolicyViolation`` with the fixed code of the rule it enforces.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

from efold.errors import Code
from efold.guard.accounting import count_schema_properties
from efold.guard.contract import Contract
from efold.guard.errors import PolicyViolation

TEXT_VERBOSITY = frozenset({"low", "medium", "high"})


def require_dict(obj: Any, what: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, f"{what} must be an object")
    return obj


def require_str(obj: Any, what: str) -> str:
    if not isinstance(obj, str):
        raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, f"{what} must be a string")
    return obj


def content_parts(content: Any) -> Iterator[dict[str, Any]]:
    """A message's content parts, in either wire format: none for a string; each part of
    a list, as it is reached, refused unless it is an object. Any other content refuses
    at once. What a part may be is each format's own rule."""
    if isinstance(content, str):
        return iter(())
    if not isinstance(content, list):
        raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, "message content")
    return (require_dict(raw, "content part") for raw in content)


def check_keys(obj: Mapping[str, Any], allowed: Collection[str], what: str,
               code: Code = Code.LOOKUP_PAYLOAD_FORBIDDEN) -> None:
    extra = [k for k in obj if k not in allowed]
    if extra:
        raise PolicyViolation(code, f"{what}: key not allowed: {sorted(extra)[0]!r}")


def check_model(payload: Mapping[str, Any], contract: Contract) -> None:
    model = payload.get("model")
    if not isinstance(model, str):
        raise PolicyViolation(Code.LOOKUP_ROUTE_MISMATCH, "payload names no model")
    if model != contract.model:
        raise PolicyViolation(Code.LOOKUP_MODEL_SWITCH_FORBIDDEN, "payload model differs")


def check_effort(effort: Any, contract: Contract) -> None:
    """``effort`` is what the payload asks for (``None`` when it sets none)."""
    if effort != contract.effort:
        raise PolicyViolation(Code.LOOKUP_ROUTE_MISMATCH, "reasoning effort differs")


def check_max_output(value: Any, contract: Contract, what: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not (
        1 <= value <= contract.max_output
    ):
        raise PolicyViolation(Code.LOOKUP_ROUTE_MISMATCH, f"{what} outside 1..O")


def check_prompt_cache_key(payload: Mapping[str, Any], contract: Contract) -> None:
    if contract.prompt_cache_key is None:
        if "prompt_cache_key" in payload:
            raise PolicyViolation(Code.LOOKUP_PROMPT_CACHE_KEY_FORBIDDEN, "undeclared cache key")
        return
    if payload.get("prompt_cache_key") != contract.prompt_cache_key:
        raise PolicyViolation(Code.LOOKUP_PROMPT_CACHE_KEY_FORBIDDEN, "cache key missing/differs")


def check_store(payload: Mapping[str, Any]) -> None:
    if "store" in payload and payload["store"] is not False:
        raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, "store must be false")


def check_bool(payload: Mapping[str, Any], key: str) -> None:
    if key in payload and not isinstance(payload[key], bool):
        raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, f"{key} must be a boolean")


def check_tool_name(name: Any, contract: Contract) -> str:
    if not isinstance(name, str) or name not in contract.tools:
        raise PolicyViolation(Code.LOOKUP_TOOLS_FORBIDDEN, "tool is not a registered history tool")
    return name


_FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def check_replayed_call_name(name: Any) -> str:
    """A ``function_call`` replayed from the transcript names the tool the *original*
    agent called (``email_read``...): a well-formed function name, not necessarily one
    offered now. Only offered tools (``check_tool_name``) can be called by the reader,
    and the reader loop executes nothing but the history tools."""
    if not isinstance(name, str) or not _FUNCTION_NAME.match(name):
        raise PolicyViolation(Code.LOOKUP_TOOLS_FORBIDDEN, "malformed function name")
    return name


def check_function_tools(
    tools: Any, contract: Contract, tool_keys: Collection[str],
    function_of: Callable[[dict[str, Any]], dict[str, Any]],
) -> tuple[list[str], int]:
    """The offered tools, in either wire format: a list of distinct function tools named
    in the contract. ``function_of`` returns the dict holding a tool's ``name`` and
    ``parameters`` (the tool itself, or its nested ``function``). Returns the names and
    the schema property count (for H)."""
    if tools is None:
        return [], 0
    if not isinstance(tools, list):
        raise PolicyViolation(Code.LOOKUP_TOOLS_FORBIDDEN, "tools must be a list")
    names: list[str] = []
    properties = 0
    for tool in tools:
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise PolicyViolation(Code.LOOKUP_TOOLS_FORBIDDEN, "only function tools")
        check_keys(tool, tool_keys, "tool", Code.LOOKUP_TOOLS_FORBIDDEN)
        fn = function_of(tool)
        name = check_tool_name(fn.get("name"), contract)
        if name in names:
            raise PolicyViolation(Code.LOOKUP_TOOLS_FORBIDDEN, "tool offered twice")
        names.append(name)
        properties += check_function_schema(fn.get("parameters"), "tool")
    return names, properties


def check_function_schema(parameters: Any, what: str) -> int:
    """A tool's parameter schema: an object (or absent). Returns its property count."""
    if parameters is None:
        return 0
    if not isinstance(parameters, dict):
        raise PolicyViolation(Code.LOOKUP_TOOLS_FORBIDDEN, f"{what} parameters must be an object")
    return count_schema_properties(parameters)


def check_tool_choice(choice: Any, offered: Collection[str], *, nested_function: bool) -> None:
    """``auto``/``none``/``required`` or a named offered function. Chat nests the name
    under ``function``; Responses puts it at the top."""
    if choice is None or choice in ("auto", "none", "required"):
        return
    if isinstance(choice, dict) and choice.get("type") == "function":
        if nested_function:
            check_keys(choice, ("type", "function"), "tool_choice", Code.LOOKUP_TOOLS_FORBIDDEN)
            fn = choice.get("function")
            name = fn.get("name") if isinstance(fn, dict) and set(fn) == {"name"} else None
        else:
            check_keys(choice, ("type", "name"), "tool_choice", Code.LOOKUP_TOOLS_FORBIDDEN)
            name = choice.get("name")
        if isinstance(name, str) and name in offered:
            return
    raise PolicyViolation(Code.LOOKUP_TOOLS_FORBIDDEN, "tool_choice is not an offered function")
