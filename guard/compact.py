"""The guard for a provider-compaction request: the same ``Guard``, another wire format.

A compaction fold's request is an auxiliary, paid request like a summary: it goes
through the guard (allowlist, U_k, admit before send, one send, settle) under the cap.
Only the wire format differs, picked by the contract's API (two providers):

- OpenAI Responses: ``compact_openai.COMPACT`` (path ``/responses/compact``, its own
  allowlist, a JSON body parser);
- Anthropic Messages: ``compact_anthropic.COMPACT_MESSAGES`` (on-demand compaction on
  ``/messages``: the beta header, a top-level ``compaction``, a JSON body parser that
  requires ``usage.iterations``).

Any other API refuses (``lookup_route_mismatch``). Both formats are never streamed, so
the HTTP transport asks for ``accept: application/json`` whatever the route's
``stream``. Every money rule stays the guard's own.

# Invariant: a ``CompactGuard`` differs from a ``Guard`` in its wire format only.
``Guard`` picks its format from the contract's API and has no parameter for another
one, so this subclass replaces it right after construction (the one private attribute
it touches; a ``wire=`` keyword on ``Guard`` would make this subclass unnecessary).
"""

from __future__ import annotations

from efold.errors import Code
from efold.guard.catalog import CatalogEntry
from efold.guard.contract import Contract, WireApi
from efold.guard.errors import GuardError
from efold.guard.permits import PermitSource
from efold.guard.request import DEFAULT_DEADLINE_S, Guard
from efold.guard.transport import Transport
from efold.guard.wire.compact_anthropic import COMPACT_MESSAGES
from efold.guard.wire.compact_openai import COMPACT
from efold.guard.wire.formats import WireFormat

COMPACT_FORMATS: dict[WireApi, WireFormat] = {
    WireApi.OPENAI_RESPONSES: COMPACT,
    WireApi.ANTHROPIC_MESSAGES: COMPACT_MESSAGES,
}


class CompactGuard(Guard):
    """A guard whose requests go to its provider's compaction request."""

    def __init__(self, contract: Contract, catalog_entry: CatalogEntry,
                 permit_source: PermitSource, transport: Transport, *,
                 run_id: str | None = None, deadline_s: float = DEFAULT_DEADLINE_S) -> None:
        wire = COMPACT_FORMATS.get(contract.api)
        if wire is None:
            raise GuardError(Code.LOOKUP_ROUTE_MISMATCH,
                             "compaction is a Responses or Messages request")
        super().__init__(contract, catalog_entry, permit_source, transport, run_id=run_id,
                         deadline_s=deadline_s)
        self._wire = wire
