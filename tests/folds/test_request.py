"""checkpoint_to_request: the first Responses payload of a probe."""

from __future__ import annotations

from efold.folds.arms import ColdRebuildFold, NativeFold, StoreFold
from efold.folds.request import checkpoint_to_request

QUESTION = "What is the account reference? Reply with the value only."


def test_native_payload_keeps_calls_and_results_in_session_order(email_round):
    t = email_round
    payload = checkpoint_to_request(NativeFold().build(t.prefix()), QUESTION, model="m", instructions="sys")
    assert payload["model"] == "m" and payload["instructions"] == "sys"
    assert payload["stream"] is True and payload["store"] is False
    assert "tools" not in payload and "tool_choice" not in payload
    kinds = [(item["type"], item.get("role")) for item in payload["input"]]
    assert kinds == [
        ("message", "user"),
        ("function_call", None),
        ("function_call_output", None),
        ("message", "user"),  # the steer, delivered after the in-flight result
        ("message", "assistant"),
        ("message", "user"),  # the question, last
    ]
    call, output = payload["input"][1], payload["input"][2]
    assert call["call_id"] == output["call_id"] == "call_0001" and call["name"] == "email_read"
    assert output["output"] == "Account reference: ACC-7F3K-219"
    assert payload["input"][-1]["content"] == [{"type": "input_text", "text": QUESTION}]
    assert payload["input"][4]["content"] == [{"type": "output_text", "text": "The reference is in the email."}]
    assert set(payload["input"][1]) == {"type", "call_id", "name", "arguments"}


def test_cold_payload_has_no_function_items(email_round):
    payload = checkpoint_to_request(ColdRebuildFold().build(email_round.prefix()), QUESTION, model="m", instructions="")
    assert {item["type"] for item in payload["input"]} == {"message"}


def test_store_payload_offers_the_two_function_tools(email_round):
    payload = checkpoint_to_request(StoreFold().build(email_round.prefix()), QUESTION, model="m", instructions="")
    assert [tool["name"] for tool in payload["tools"]] == ["history_search", "history_get"]
    assert all(tool["type"] == "function" for tool in payload["tools"])
    assert payload["tool_choice"] == "auto" and payload["parallel_tool_calls"] is False


def test_the_conversion_is_pure(email_round):
    checkpoint = StoreFold().build(email_round.prefix())
    first = checkpoint_to_request(checkpoint, QUESTION, model="m", instructions="")
    first["input"].append({"type": "function_call_output", "call_id": "x", "output": "{}"})
    first["tools"][0]["name"] = "mutated"
    second = checkpoint_to_request(checkpoint, QUESTION, model="m", instructions="")
    assert second["tools"][0]["name"] == "history_search" and len(second["input"]) == len(first["input"]) - 1
