"""The guard for a provider-compaction request: the same ``Guard``, another endpoint.

A compaction fold's request is an auxiliary, paid request like a summary: it goes
through the guard (allowlist, U_k, admit before send, one send, settle) under the cap.
Only the wire format differs: ``compact_openai.COMPACT`` (path ``/responses/compact``,
its own allowlist, a JSON body parser). Every money rule stays the guard's own.

# Invariant: a ``CompactGuard`` differs from a ``Guard`` in its wire format only.
``Guard`` picks its format from the contract's API and has no parameter for another
one, so this subclass replaces it right after construction (the one private attribute
it touches; a ``wire=`` keyword on ``Guard`` would make this subclass unnecessary).

Known gap: a Responses contract always streams, so the HTTP transport sends ``accept:
text/event-stream`` with this request too. The endpoint is documented to answer JSON;
whether the live service minds the header is unverified (loopback servers do not).
"""

from __future__ import annotations

from efold.errors import Code
from efold.guard.catalog import CatalogEntry
from efold.guard.contract import Contract, WireApi
from efold.guard.errors import GuardError
from efold.guard.permits import PermitSource
from efold.guard.request import DEFAULT_DEADLINE_S, Guard
from efold.guard.transport import Transport
from efold.guard.wire.compact_openai import COMPACT


class CompactGuard(Guard):
    """A guard whose requests go to the Responses compaction endpoint."""

    def __init__(self, contract: Contract, catalog_entry: CatalogEntry,
                 permit_source: PermitSource, transport: Transport, *,
                 run_id: str | None = None, deadline_s: float = DEFAULT_DEADLINE_S) -> None:
        if contract.api is not WireApi.OPENAI_RESPONSES:
            raise GuardError(Code.LOOKUP_ROUTE_MISMATCH, "compaction is a Responses endpoint")
        super().__init__(contract, catalog_entry, permit_source, transport, run_id=run_id,
                         deadline_s=deadline_s)
        self._wire = COMPACT
