"""Payload allowlists per wire format, and the framing allowance H."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import efold_guard_kit as kit
import pytest

from efold.errors import Code
from efold.guard import PolicyViolation, WireApi, count_schema_properties
from efold.guard.wire import CHAT, RESPONSES

Edit = Callable[[dict[str, Any]], None]
P = Code.LOOKUP_PAYLOAD_FORBIDDEN
OPT = Code.LOOKUP_OPTION_FORBIDDEN
T = Code.LOOKUP_TOOLS_FORBIDDEN
ROUTE = Code.LOOKUP_ROUTE_MISMATCH

REASONING_ITEM = {"type": "reasoning", "id": "rs_1",
                  "summary": [{"type": "summary_text", "text": "thinking"}],
                  "encrypted_content": "gAAAA-opaque"}
CALL_ITEM = {"type": "function_call", "call_id": "c1", "name": "history_get",
             "arguments": '{"id": "r1"}', "id": "fc_1", "status": "completed"}
OUTPUT_ITEM = {"type": "function_call_output", "call_id": "c1", "output": "record text"}
ASSISTANT_ITEM = {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
                  "content": [{"type": "output_text", "text": "ok", "annotations": [],
                               "logprobs": []}]}


def _set(key: str, value: Any) -> Edit:
    return lambda p: p.__setitem__(key, value)


def _del(key: str) -> Edit:
    return lambda p: p.__delitem__(key)


def _add_input(item: Any) -> Edit:
    return lambda p: p["input"].append(item)


def _first_part(**part: Any) -> Edit:
    return lambda p: p["input"][0].__setitem__("content", [part])


def _tool(**tool: Any) -> Edit:
    return lambda p: p["tools"].append(tool)


RESPONSES_REFUSALS: list[tuple[str, Edit, Code]] = [
    ("conversation", _set("conversation", "conv_1"), P),
    ("prompt", _set("prompt", {"id": "pmpt_1"}), P),
    ("background", _set("background", True), P),
    ("truncation", _set("truncation", "auto"), P),
    ("previous_response_id", _set("previous_response_id", "resp_0"), P),
    ("service_tier", _set("service_tier", "priority"), OPT),
    ("metadata", _set("metadata", {}), OPT),
    ("temperature", _set("temperature", 0), OPT),
    ("extra_headers", _set("extra_headers", {"x": "1"}), OPT),
    ("model switch", _set("model", "gpt-5-mini"), Code.LOOKUP_MODEL_SWITCH_FORBIDDEN),
    ("no model", _del("model"), ROUTE),
    ("not streaming", _set("stream", False), ROUTE),
    ("stream absent", _del("stream"), ROUTE),
    ("store true", _set("store", True), P),
    ("effort differs", _set("reasoning", {"effort": "high"}), ROUTE),
    ("effort absent", _del("reasoning"), ROUTE),
    ("reasoning extra", _set("reasoning", {"effort": "low", "generate_summary": "x"}), OPT),
    ("max output above O", _set("max_output_tokens", 128_001), ROUTE),
    ("max output zero", _set("max_output_tokens", 0), ROUTE),
    ("cache key undeclared", _set("prompt_cache_key", "k"), Code.LOOKUP_PROMPT_CACHE_KEY_FORBIDDEN),
    ("include other", _set("include", ["file_search_call.results"]), P),
    ("output schema", _set("text", {"format": {"type": "json_schema", "name": "x",
                                               "schema": {}}}),
     Code.LOOKUP_AUXILIARY_CALLERS_FORBIDDEN),
    ("text extra", _set("text", {"stop": "x"}), OPT),
    ("instructions list", _set("instructions", [{"role": "system"}]), P),
    ("input empty", _set("input", []), P),
    ("input missing", _del("input"), P),
    ("image part", _first_part(type="input_image", image_url="https://x/y.png"), P),
    ("file part", _first_part(type="input_file", file_url="https://x/y.pdf"), P),
    ("unknown part key", _first_part(type="input_text", text="hi", cache_control={}), P),
    ("annotations", _add_input({**ASSISTANT_ITEM, "content": [
        {"type": "output_text", "text": "x",
         "annotations": [{"type": "url_citation", "url": "https://x"}]}]}), P),
    ("bad role", _add_input({"type": "message", "role": "tool", "content": "x"}), P),
    ("item_reference", _add_input({"type": "item_reference", "id": "msg_0"}), P),
    ("web search call", _add_input({"type": "web_search_call", "id": "ws_1"}), P),
    ("typeless non-message", _add_input({"call_id": "c1"}), P),
    ("item extra key", _add_input({**CALL_ITEM, "extra": 1}), P),
    ("replayed call with a malformed name", _add_input({**CALL_ITEM, "name": "a b/c"}), T),
    ("output not string", _add_input({**OUTPUT_ITEM, "output": [{"type": "input_image"}]}), P),
    ("reasoning content two parts", _add_input({**REASONING_ITEM, "content": [
        {"type": "reasoning_text", "text": "a"}, {"type": "reasoning_text", "text": "b"}]}), P),
    ("non-function tool", _tool(type="web_search"), T),
    ("mcp tool", _tool(type="mcp", server_label="x", server_url="https://x"), T),
    ("unregistered function", _tool(type="function", name="shell", parameters={}), T),
    ("tool twice", _tool(**kit.HISTORY_GET), T),
    ("tool extra key", lambda p: p["tools"][0].__setitem__("cache_control", {}), T),
    ("tool_choice not offered", _set("tool_choice", {"type": "function", "name": "shell"}), T),
    ("tool_choice hosted", _set("tool_choice", {"type": "web_search_preview"}), T),
    ("parallel not bool", _set("parallel_tool_calls", "yes"), P),
]


@pytest.mark.parametrize(("edit", "code"), [(e, c) for _, e, c in RESPONSES_REFUSALS],
                         ids=[n for n, _, _ in RESPONSES_REFUSALS])
def test_responses_refusals(edit: Edit, code: Code) -> None:
    payload = kit.responses_payload()
    edit(payload)
    with pytest.raises(PolicyViolation) as err:
        RESPONSES.check(payload, kit.faux_contract(), first_request=False)
    assert err.value.code is code


def test_responses_accepts_every_item_the_reader_sends() -> None:
    payload = kit.responses_payload(include=["reasoning.encrypted_content"],
                                    text={"format": {"type": "text"}, "verbosity": "low"},
                                    tool_choice={"type": "function", "name": "history_get"})
    payload["input"] += [
        {"role": "developer", "content": "typeless message"},
        {"type": "message", "role": "system",
         "content": [{"type": "input_text", "text": "s"}]},
        copy.deepcopy(ASSISTANT_ITEM),
        {**REASONING_ITEM, "content": [{"type": "reasoning_text", "text": "t"}]},
        {**REASONING_ITEM, "content": None, "encrypted_content": None},
        {**REASONING_ITEM, "content": []},
        copy.deepcopy(CALL_ITEM),
        copy.deepcopy(OUTPUT_ITEM),
    ]
    shape = RESPONSES.check(payload, kit.faux_contract(), first_request=False)
    assert (shape.input_items, shape.reasoning_items, shape.tools) == (9, 3, 2)
    assert shape.schema_properties == 5 and shape.has_instructions
    # H: 4096 + 9*256 + 3*1024 + 2*1024 + 5*256 + 4096
    assert shape.framing() == 4096 + 2304 + 3072 + 2048 + 1280 + 4096


def test_reasoning_items_are_refused_in_request_one() -> None:
    payload = kit.responses_payload()
    payload["input"].append(copy.deepcopy(REASONING_ITEM))
    with pytest.raises(PolicyViolation) as err:
        RESPONSES.check(payload, kit.faux_contract(), first_request=True)
    assert err.value.code is P
    RESPONSES.check(payload, kit.faux_contract(), first_request=False)


def test_prompt_cache_key_must_match_the_declared_key() -> None:
    contract = kit.faux_contract(prompt_cache_key="run-7f-slot-3")
    payload = kit.responses_payload()
    with pytest.raises(PolicyViolation) as missing:
        RESPONSES.check(payload, contract, first_request=True)
    assert missing.value.code is Code.LOOKUP_PROMPT_CACHE_KEY_FORBIDDEN
    payload["prompt_cache_key"] = "run-7f-slot-4"
    with pytest.raises(PolicyViolation):
        RESPONSES.check(payload, contract, first_request=True)
    payload["prompt_cache_key"] = "run-7f-slot-3"
    RESPONSES.check(payload, contract, first_request=True)


def test_string_input_is_one_item_and_no_instructions_slab() -> None:
    payload = {"model": kit.FAUX_MODEL, "input": "hello", "stream": True,
               "reasoning": {"effort": "low"}}
    shape = RESPONSES.check(payload, kit.faux_contract(), first_request=True)
    assert shape.framing() == 4096 + 256


def test_schema_properties_count_recursively() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "object", "properties": {"b": {"type": "string"},
                                                   "c": {"type": "string"}}},
            "d": {"type": "array", "items": {"type": "object", "properties": {"e": {}}}},
            "properties": {"type": "object", "properties": {"f": {}}},  # a field so named
        },
        "anyOf": [{"properties": {"g": {}}}],
        "$defs": {"X": {"properties": {"h": {}, "i": {}}}},
        "additionalProperties": {"properties": {"j": {}}},
    }
    # a, d, properties, b, c, e, f, g, h, i, j
    assert count_schema_properties(schema) == 11


CHAT_REFUSALS: list[tuple[str, Edit, Code]] = [
    ("unknown key", _set("temperature", 0), OPT),
    ("max_tokens above O", _set("max_tokens", 128_001), ROUTE),
    ("no usage in stream", _set("stream_options", {"include_usage": False}), ROUTE),
    ("stream options missing", _del("stream_options"), ROUTE),
    ("not streaming", _set("stream", False), ROUTE),
    ("effort differs", _set("reasoning_effort", "low"), ROUTE),
    ("model switch", _set("model", "gpt-5-mini"), Code.LOOKUP_MODEL_SWITCH_FORBIDDEN),
    ("image", lambda p: p["messages"].append({"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}), P),
    ("name key", lambda p: p["messages"].append({"role": "user", "content": "x", "name": "n"}), P),
    ("function role", lambda p: p["messages"].append({"role": "function", "content": "x"}), P),
    ("replayed call with a malformed name", lambda p: p["messages"].append(
        {"role": "assistant", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "a b/c", "arguments": "{}"}}]}),
     T),
    ("non-function tool", lambda p: p["tools"].append({"type": "custom", "custom": {}}), T),
    ("tool_choice", _set("tool_choice", {"type": "function", "function": {"name": "x"}}), T),
    ("store", _set("store", True), P),
    ("empty messages", _set("messages", []), P),
]


@pytest.mark.parametrize(("edit", "code"), [(e, c) for _, e, c in CHAT_REFUSALS],
                         ids=[n for n, _, _ in CHAT_REFUSALS])
def test_chat_refusals(edit: Edit, code: Code) -> None:
    payload = kit.chat_payload()
    edit(payload)
    with pytest.raises(PolicyViolation) as err:
        CHAT.check(payload, kit.http_contract("http://127.0.0.1:1/v1", WireApi.OPENAI_CHAT),
                   first_request=False)
    assert err.value.code is code


def test_chat_replays_the_original_agents_calls_but_offers_only_history_tools() -> None:
    """As in the Responses format: a replayed assistant call (``email_read``) is
    history and passes; offering that tool to the reader does not."""
    contract = kit.http_contract("http://127.0.0.1:1/v1", WireApi.OPENAI_CHAT)
    payload = kit.chat_payload()
    payload["messages"].append({"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "email_read", "arguments": "{}"}}]})
    CHAT.check(payload, contract, first_request=False)  # no refusal
    offered = kit.chat_payload()
    offered["tools"].append({"type": "function", "function": {
        "name": "email_read", "parameters": {"type": "object"}}})
    with pytest.raises(PolicyViolation) as err:
        CHAT.check(offered, contract, first_request=False)
    assert err.value.code is Code.LOOKUP_TOOLS_FORBIDDEN


def test_chat_accepts_a_tool_round_and_non_streaming() -> None:
    contract = kit.http_contract("http://127.0.0.1:1/v1", WireApi.OPENAI_CHAT)
    payload = kit.chat_payload(tool_choice={"type": "function",
                                            "function": {"name": "history_get"}})
    payload["messages"] += [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "history_get", "arguments": '{"id": "r"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "record"},
        {"role": "developer", "content": [{"type": "text", "text": "d"}]},
    ]
    shape = CHAT.check(payload, contract, first_request=True)
    assert (shape.input_items, shape.tools, shape.schema_properties) == (5, 1, 2)
    assert not shape.has_instructions
    plain = kit.http_contract("http://127.0.0.1:1/v1", WireApi.OPENAI_CHAT, stream=False)
    CHAT.check(kit.chat_payload(stream=False), plain, first_request=True)
    with pytest.raises(PolicyViolation):
        CHAT.check({**kit.chat_payload(stream=False), "stream_options": {"include_usage": True}},
                   plain, first_request=True)



def test_replayed_calls_may_name_the_original_agents_tools() -> None:
    """A native transcript replays the original agent's calls (``email_read``): they are
    history, not tools offered to the reader, so they pass; offering one does not."""
    payload = kit.responses_payload()
    _add_input({**CALL_ITEM, "name": "email_read"})(payload)
    RESPONSES.check(payload, kit.faux_contract(), first_request=False)  # no refusal
    offered = kit.responses_payload()
    _tool(type="function", name="email_read", parameters={"type": "object"})(offered)
    with pytest.raises(PolicyViolation) as err:
        RESPONSES.check(offered, kit.faux_contract(), first_request=False)
    assert err.value.code is Code.LOOKUP_TOOLS_FORBIDDEN
