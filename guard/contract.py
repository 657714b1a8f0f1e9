"""The frozen request contract one probe run is held to.

A contract names the route (provider, model, API, base URL, effort) and carries the
registered limits: the input envelope I = 272,000, the maximum output O = 128,000 and
at most 10 requests per probe run. The limits are fields (so a contract describes
itself and its digest binds them) but they must equal the registered values, except
that a model's context window may tighten I (``CatalogEntry.input_envelope``): a
contract with any other limit is refused at construction.
"""

from __future__ import annotations

import enum
import hashlib
from typing import Final

import msgspec

from efold.errors import Code
from efold.guard.errors import GuardError

CONTRACT_VERSION: Final = "efold-guard-contract-v1"
INPUT_ENVELOPE: Final = 272_000  # I: tokens, compared with U_k (strictly: U_k > I refuses)
MAX_OUTPUT: Final = 128_000  # O: reported output above this falsifies the catalog bound
MAX_REQUESTS: Final = 10  # per probe run; request 11 refuses before any hold
HISTORY_TOOLS: Final = ("history_search", "history_get")
FAUX_BASE_URL: Final = "faux://local"


class WireApi(enum.StrEnum):
    """Wire formats the guard can speak."""

    OPENAI_RESPONSES = "openai-responses"  # streaming SSE only
    OPENAI_CHAT = "openai-chat"  # streaming with include_usage, or non-streaming
    ANTHROPIC_MESSAGES = "anthropic-messages"  # streaming SSE, or non-streaming


class Contract(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The route and limits of one probe run.

    - ``effort``: the reasoning effort every payload must carry (``None``: payloads may
      not set one).
    - ``stream``: Responses always streams; Chat Completions and Anthropic Messages may
      be non-streaming.
    - ``tools``: the only function tool names a payload may offer or call.
    - ``prompt_cache_key``: when set, every payload must carry exactly this key; when
      ``None``, payloads may not carry one. Anthropic Messages has no such key: a
      contract of that API with one refuses every payload.
    """

    provider: str
    model: str
    api: WireApi
    base_url: str
    effort: str | None
    stream: bool = True
    tools: tuple[str, ...] = HISTORY_TOOLS
    prompt_cache_key: str | None = None
    input_envelope: int = INPUT_ENVELOPE
    max_output: int = MAX_OUTPUT
    max_requests: int = MAX_REQUESTS
    version: str = CONTRACT_VERSION

    def __post_init__(self) -> None:
        if (self.max_output, self.max_requests) != (MAX_OUTPUT, MAX_REQUESTS) \
                or not 1 <= self.input_envelope <= INPUT_ENVELOPE:
            raise GuardError(Code.LOOKUP_ROUTE_MISMATCH,
                             "contract limits differ from I/O/10 (I may only be tightened)")
        if self.version != CONTRACT_VERSION:
            raise GuardError(Code.LOOKUP_ROUTE_MISMATCH, "unknown contract version")
        if self.api is WireApi.OPENAI_RESPONSES and not self.stream:
            raise GuardError(Code.LOOKUP_ROUTE_MISMATCH, "responses route must stream (SSE)")
        if not self.provider or not self.model or not self.base_url:
            raise GuardError(Code.LOOKUP_ROUTE_MISMATCH, "provider, model, base URL required")
        if len(set(self.tools)) != len(self.tools):
            raise GuardError(Code.LOOKUP_ROUTE_MISMATCH, "duplicate tool names")
        if self.prompt_cache_key is not None and not self.prompt_cache_key:
            raise GuardError(Code.LOOKUP_ROUTE_MISMATCH, "empty prompt cache key")

    def digest(self) -> str:
        return hashlib.sha256(msgspec.json.encode(self)).hexdigest()
