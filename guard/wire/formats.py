"""Wire formats: for each API, its path, payload allowlist, request headers and parser.

A format also says how the transport sends the credential (``auth``: ``bearer`` or
``x-api-key``), which non-secret headers the request carries (``headers(payload)``,
from the admitted payload; none may be a header the transport sets itself) and whether
the request streams (``streams(contract)``: the contract's ``stream`` unless the
endpoint has one answer shape, as the compaction endpoints do). The guard builds every
``WireRequest`` from these and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from efold.guard.accounting import PayloadShape
from efold.guard.contract import Contract, WireApi
from efold.guard.wire.chat_payload import check_chat_payload
from efold.guard.wire.chat_stream import ChatBodyParser, ChatStreamParser
from efold.guard.wire.messages_payload import check_messages_payload, messages_headers
from efold.guard.wire.messages_stream import MessagesBodyParser, MessagesStreamParser
from efold.guard.wire.outcome import WireParser
from efold.guard.wire.responses_payload import check_responses_payload
from efold.guard.wire.responses_stream import ResponsesStreamParser

Headers = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class WireFormat:
    api: WireApi
    path: str  # appended to the contract's base URL
    _check: Callable[..., PayloadShape]
    auth: str = "bearer"  # how the transport sends the credential (``AUTH_SCHEMES``)

    def check(self, payload: Any, contract: Contract, *, first_request: bool) -> PayloadShape:
        """Enforce the allowlists (raises ``PolicyViolation``); return the H counts."""
        return self._check(payload, contract, first_request=first_request)

    def headers(self, payload: Any) -> Headers:
        """The non-secret headers a request with this (admitted) payload carries."""
        del payload
        return ()

    def streams(self, contract: Contract) -> bool:
        """Whether a request of this format under ``contract`` streams."""
        return contract.stream

    def parser(self, stream: bool) -> WireParser:
        if self.api is WireApi.OPENAI_RESPONSES:
            return ResponsesStreamParser()
        if self.api is WireApi.ANTHROPIC_MESSAGES:
            return MessagesStreamParser() if stream else MessagesBodyParser()
        return ChatStreamParser() if stream else ChatBodyParser()


@dataclass(frozen=True)
class MessagesWireFormat(WireFormat):
    """Anthropic Messages: ``anthropic-version`` always, the compaction beta flag when
    the payload replays a compaction block (``messages_payload.messages_headers``)."""

    def headers(self, payload: Any) -> Headers:
        return messages_headers(payload)


# The headers that carry a Responses request's cache-affinity key beside its payload's
# ``prompt_cache_key`` (the reference route's three places for one key).
CACHE_KEY_HEADERS: Final = ("session-id", "x-client-request-id")


@dataclass(frozen=True)
class ResponsesWireFormat(WireFormat):
    """OpenAI Responses: a payload with a ``prompt_cache_key`` (the slot's own key, the
    contract's: ``rules.check_prompt_cache_key``) sends it in ``CACHE_KEY_HEADERS`` too,
    so the provider routes the slot's requests to one cache whichever it reads."""

    def headers(self, payload: Any) -> Headers:
        key = payload.get("prompt_cache_key") if isinstance(payload, dict) else None
        return tuple((name, key) for name in CACHE_KEY_HEADERS) if isinstance(key, str) \
            else ()


RESPONSES = ResponsesWireFormat(WireApi.OPENAI_RESPONSES, "/responses",
                                check_responses_payload)
CHAT = WireFormat(WireApi.OPENAI_CHAT, "/chat/completions", check_chat_payload)
MESSAGES = MessagesWireFormat(WireApi.ANTHROPIC_MESSAGES, "/messages", check_messages_payload,
                              auth="x-api-key")
_FORMATS = {fmt.api: fmt for fmt in (RESPONSES, CHAT, MESSAGES)}


def wire_format(api: WireApi) -> WireFormat:
    return _FORMATS[api]
