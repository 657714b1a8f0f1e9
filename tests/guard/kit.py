"""Builders shared by the guard tests: contracts, payloads, guards."""

from __future__ import annotations

import copy
from typing import Any

from efold.guard import (
    FAUX_BASE_URL,
    Contract,
    FauxTransport,
    Guard,
    HttpTransport,
    WireApi,
    bundled_catalog,
)
from efold.guard.testing import TestOnlyPermitSource
from efold.guard.wire.faux import Responder

FAUX_MODEL = "faux-extractive-v1"
REAL_MODEL = "gpt-5"
CREDENTIAL = "sk-test-CREDENTIAL-7f3a9c"  # fictional; searched for in records
QUESTION = "QUESTION-MARKER: when does the parcel ship?"

HISTORY_GET = {
    "type": "function", "name": "history_get", "description": "Fetch a record by id.",
    "parameters": {"type": "object", "properties": {
        "id": {"type": "string"}, "cursor": {"type": "string"}}, "required": ["id"]},
}
HISTORY_SEARCH = {
    "type": "function", "name": "history_search", "description": "Search the history.",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "limit": {"type": "integer"},
        "cursor": {"type": "string"}}, "required": ["query"]},
}


def faux_contract(**changes: Any) -> Contract:
    fields: dict[str, Any] = {"provider": "faux", "model": FAUX_MODEL,
                              "api": WireApi.OPENAI_RESPONSES, "base_url": FAUX_BASE_URL,
                              "effort": "low"}
    fields.update(changes)
    return Contract(**fields)


def http_contract(base_url: str, api: WireApi = WireApi.OPENAI_RESPONSES,
                  **changes: Any) -> Contract:
    fields: dict[str, Any] = {"provider": "openai", "model": REAL_MODEL, "api": api,
                              "base_url": base_url, "effort": "high"}
    fields.update(changes)
    return Contract(**fields)


def responses_payload(model: str = FAUX_MODEL, effort: str = "low", question: str = QUESTION,
                      **changes: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "model": model,
        "instructions": "Answer from the conversation; use the history tools if needed.",
        "input": [{"type": "message", "role": "user",
                   "content": [{"type": "input_text", "text": question}]}],
        "tools": [copy.deepcopy(HISTORY_SEARCH), copy.deepcopy(HISTORY_GET)],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "stream": True,
        "store": False,
        "reasoning": {"effort": effort},
        "max_output_tokens": 4096,
    }
    payload.update(changes)
    return payload


def chat_payload(stream: bool = True, question: str = QUESTION, **changes: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "model": REAL_MODEL,
        "messages": [{"role": "system", "content": "Answer briefly."},
                     {"role": "user", "content": question}],
        "tools": [{"type": "function", "function": {
            "name": "history_get", "parameters": HISTORY_GET["parameters"]}}],
        "stream": stream,
        "reasoning_effort": "high",
        "max_completion_tokens": 2048,
    }
    if stream:
        payload["stream_options"] = {"include_usage": True}
    payload.update(changes)
    return payload


ANSWER_ITEMS = [{"type": "message", "role": "assistant",
                 "content": [{"type": "output_text", "text": "ANSWER-MARKER: Tuesday"}]}]


def answer(payload: dict[str, Any]) -> list[dict[str, Any]]:
    return copy.deepcopy(ANSWER_ITEMS)


def faux_guard(responder: Responder = answer, source: TestOnlyPermitSource | None = None,
               **contract_changes: Any) -> tuple[Guard, TestOnlyPermitSource, FauxTransport]:
    source = source if source is not None else TestOnlyPermitSource()
    transport = FauxTransport(responder)
    entry = bundled_catalog().entry("faux", FAUX_MODEL)
    return Guard(faux_contract(**contract_changes), entry, source, transport), source, transport


def http_guard(base_url: str, api: WireApi = WireApi.OPENAI_RESPONSES,
               source: TestOnlyPermitSource | None = None, deadline_s: float = 10.0,
               **contract_changes: Any) -> tuple[Guard, TestOnlyPermitSource]:
    entry = bundled_catalog().entry("openai", REAL_MODEL)
    source = source if source is not None else TestOnlyPermitSource(entry=entry)
    transport = HttpTransport(base_url, credential=CREDENTIAL)
    contract = http_contract(base_url, api, **contract_changes)
    return Guard(contract, entry, source, transport, deadline_s=deadline_s), source
