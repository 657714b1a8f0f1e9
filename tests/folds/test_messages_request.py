"""checkpoint_to_messages_request: the first Anthropic Messages payload of a probe,
accepted by the guard's Messages allowlist for every built-in arm, streamed or not."""

from __future__ import annotations

import pytest

from efold.corpus.model import FunctionCall, ToolCall
from efold.folds.arms import NativeFold, StoreFold
from efold.folds.checkpoint import ReaderMessage
from efold.folds.registry import BUILTIN_ARMS
from efold.folds.request import checkpoint_to_messages_request, messages_conversation, tool_input
from efold.guard import Contract, WireApi
from efold.guard.wire.messages_payload import check_messages_payload

QUESTION = "What is the account reference? Reply with the value only."
OPTIONS = {"stream": False, "max_tokens": 256}


def test_native_messages_keep_calls_and_results_in_session_order(email_round):
    checkpoint = NativeFold().build(email_round.prefix())
    payload = checkpoint_to_messages_request(checkpoint, QUESTION, model="m",
                                             instructions="sys")
    assert payload["system"] == "sys"
    messages = payload["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "user",
                                             "assistant", "user"]
    call = messages[1]["content"]
    [use] = [b for b in call if b["type"] == "tool_use"]
    assert use["name"] == "email_read" and isinstance(use["input"], dict)
    assert messages[2] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": use["id"],
         "content": "Account reference: ACC-7F3K-219"}]}
    assert messages[-1] == {"role": "user", "content": [{"type": "text", "text": QUESTION}]}
    assert "tools" not in payload and "tool_choice" not in payload


def test_a_store_arm_offers_the_lookup_tools_one_call_at_a_time(email_round):
    checkpoint = StoreFold().build(email_round.prefix())
    payload = checkpoint_to_messages_request(checkpoint, QUESTION, model="m", instructions="")
    assert [t["name"] for t in payload["tools"]] == ["history_search", "history_get"]
    assert all(set(t) == {"name", "description", "input_schema"} for t in payload["tools"])
    assert payload["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}


def test_results_of_one_turn_share_a_user_message_and_empty_text_is_left_out():
    def call(n: int) -> ToolCall:
        return ToolCall(id=f"c{n}", function=FunctionCall(name="web_read", arguments="{}"))

    messages = [
        ReaderMessage(role="user", content="go"),
        ReaderMessage(role="assistant", content="", tool_calls=[call(1), call(2)]),
        ReaderMessage(role="tool", content="one", tool_call_id="c1"),
        ReaderMessage(role="tool", content="two", tool_call_id="c2"),
        ReaderMessage(role="assistant", content=""),
        ReaderMessage(role="user", content="next"),
    ]
    out = messages_conversation(messages)
    assert [m["role"] for m in out] == ["user", "assistant", "user", "user"]
    assert [b["type"] for b in out[1]["content"]] == ["tool_use", "tool_use"]
    assert [b["tool_use_id"] for b in out[2]["content"]] == ["c1", "c2"]


def test_arguments_that_are_not_an_object_stay_visible():
    assert tool_input('{"q": "x"}') == {"q": "x"}
    assert tool_input("not json") == {"arguments": "not json"}
    assert tool_input("[1, 2]") == {"arguments": "[1, 2]"}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("arm", sorted(BUILTIN_ARMS))
def test_every_arm_passes_the_messages_allowlist(email_round, arm, stream):
    t = email_round
    for day in range(3):
        t.owner(f"Day {day}: note the parcel number P-{day:04d}.")
        t.tool(f"Parcel number: P-{day:04d}")
        t.reply("Noted.")
    checkpoint = BUILTIN_ARMS[arm]().build(t.prefix())
    contract = Contract(provider="anthropic", model="m", api=WireApi.ANTHROPIC_MESSAGES,
                        base_url="http://127.0.0.1:1/v1", effort=None, stream=stream,
                        tools=("history_search", "history_get") if checkpoint.tools else ())
    payload = {**checkpoint_to_messages_request(checkpoint, QUESTION, model="m",
                                                instructions="sys"),
               **OPTIONS, "stream": stream}
    shape = check_messages_payload(payload, contract, first_request=True)
    assert shape.input_items == len(payload["messages"])
