"""checkpoint_to_chat_request: the first Chat Completions payload of a probe, accepted
by the guard's chat allowlist for every reference arm, streamed or not."""

from __future__ import annotations

import pytest

from efold.folds.arms import NativeFold, StoreFold
from efold.folds.registry import BUILTIN_ARMS
from efold.folds.request import checkpoint_to_chat_request
from efold.guard import Contract, WireApi
from efold.guard.wire.chat_payload import check_chat_payload

QUESTION = "What is the account reference? Reply with the value only."


def test_native_messages_keep_calls_and_results_in_session_order(email_round):
    checkpoint = NativeFold().build(email_round.prefix())
    payload = checkpoint_to_chat_request(checkpoint, QUESTION, model="m", instructions="sys",
                                         stream=False)
    roles = [m["role"] for m in payload["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "user", "assistant", "user"]
    system, _, call, result, *_ , question = payload["messages"]
    assert system == {"role": "system", "content": "sys"}
    assert call["content"] == ""  # a string: llama.cpp's server refuses null
    [tool_call] = call["tool_calls"]
    assert tool_call["type"] == "function" and tool_call["function"]["name"] == "email_read"
    assert result == {"role": "tool", "tool_call_id": tool_call["id"],
                      "content": "Account reference: ACC-7F3K-219"}
    assert question == {"role": "user", "content": QUESTION}
    assert payload["stream"] is False and "stream_options" not in payload
    assert "tools" not in payload


def test_a_streamed_payload_asks_for_usage_and_a_store_arm_offers_nested_tools(email_round):
    checkpoint = StoreFold().build(email_round.prefix())
    payload = checkpoint_to_chat_request(checkpoint, QUESTION, model="m", instructions="",
                                         stream=True)
    assert payload["stream_options"] == {"include_usage": True}
    assert [t["function"]["name"] for t in payload["tools"]] == ["history_search",
                                                                 "history_get"]
    assert all(set(t) == {"type", "function"} for t in payload["tools"])
    assert payload["tool_choice"] == "auto" and payload["parallel_tool_calls"] is False


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("arm", sorted(BUILTIN_ARMS))
def test_every_arm_passes_the_chat_allowlist(email_round, arm, stream):
    t = email_round
    for day in range(3):
        t.owner(f"Day {day}: note the parcel number P-{day:04d}.")
        t.tool(f"Parcel number: P-{day:04d}")
        t.reply("Noted.")
    checkpoint = BUILTIN_ARMS[arm]().build(t.prefix())
    contract = Contract(provider="local", model="m", api=WireApi.OPENAI_CHAT,
                        base_url="http://127.0.0.1:1/v1", effort=None, stream=stream)
    payload = checkpoint_to_chat_request(checkpoint, QUESTION, model="m", instructions="sys",
                                         stream=stream)
    shape = check_chat_payload(payload, contract, first_request=True)
    assert shape is not None
