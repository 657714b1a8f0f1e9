"""Wire formats: for each API, its path, payload allowlist and response parser."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from efold.guard.accounting import PayloadShape
from efold.guard.contract import Contract, WireApi
from efold.guard.wire.chat_payload import check_chat_payload
from efold.guard.wire.chat_stream import ChatBodyParser, ChatStreamParser
from efold.guard.wire.outcome import WireParser
from efold.guard.wire.responses_payload import check_responses_payload
from efold.guard.wire.responses_stream import ResponsesStreamParser


@dataclass(frozen=True)
class WireFormat:
    api: WireApi
    path: str  # appended to the contract's base URL
    _check: Callable[..., PayloadShape]

    def check(self, payload: Any, contract: Contract, *, first_request: bool) -> PayloadShape:
        """Enforce the allowlists (raises ``PolicyViolation``); return the H counts."""
        return self._check(payload, contract, first_request=first_request)

    def parser(self, stream: bool) -> WireParser:
        if self.api is WireApi.OPENAI_RESPONSES:
            return ResponsesStreamParser()
        return ChatStreamParser() if stream else ChatBodyParser()


RESPONSES = WireFormat(WireApi.OPENAI_RESPONSES, "/responses", check_responses_payload)
CHAT = WireFormat(WireApi.OPENAI_CHAT, "/chat/completions", check_chat_payload)


def wire_format(api: WireApi) -> WireFormat:
    return RESPONSES if api is WireApi.OPENAI_RESPONSES else CHAT
