"""A prep child's way to a provider's compaction endpoint (``folds.provider_compact``).

The same route machinery as a summary request (``worker.prep._SummaryRoute``): the
route's catalog entry and contract (no cache key, no tools), its transport (HTTP with
the credential the controller passed on this child's descriptor, or the faux provider
offline, which then plays the compaction endpoint with ``faux_compaction``), under the
child's permit session on its checkpoint key, held to the summariser's terms. Only the
guard differs: a ``CompactGuard`` (OpenAI: ``POST /responses/compact``; Anthropic: an
on-demand compaction ``POST /messages``, its reply limit the route's
``max_output_tokens``). It is built at the first request, so a build that never
reaches the trigger sends nothing.

A compaction request that is refused, lost or stopped fails the prep with its code
(``WorkerError``), the permit source's stop code first, as a summary request does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from efold.errors import Code
from efold.protocol.tasks import Route
from efold.worker.errors import WorkerError
from efold.worker.session import PermitSession

if TYPE_CHECKING:
    from efold.guard.compact import CompactGuard
    from efold.worker.permit_client import SessionPermitSource


class CompactRoute:
    """One prep child's compaction requests on ``route`` through ``session``."""

    def __init__(self, route: Route, session: PermitSession) -> None:
        self._route = route
        self._session = session
        self._guard: CompactGuard | None = None
        self._source: SessionPermitSource | None = None

    def compact(self, head: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Send ``head`` (in the route's wire shape) as one compaction request; the
        settled reply's output items."""
        guard, source = self._open()
        result = guard.request(compact_request(self._route, head))
        if not result.ok:
            code = source.stop_code or result.code or Code.LOOKUP_STOPPED
            raise WorkerError(code, f"compaction request {result.outcome.value}")
        return list(result.output_items)

    def _open(self) -> tuple[CompactGuard, SessionPermitSource]:
        if self._guard is None or self._source is None:
            from efold.guard import assert_real_source
            from efold.guard.compact import CompactGuard
            from efold.worker.credential import credential
            from efold.worker.permit_client import SessionPermitSource
            from efold.worker.route import route_contract, route_entry

            route, session = self._route, self._session
            source = SessionPermitSource(session)
            assert_real_source(source)
            entry = route_entry(route)
            contract = route_contract(route, entry, cache_key=None, tools=())
            self._guard = CompactGuard(contract, entry, source,
                                       compact_transport(route, credential()),
                                       run_id=session.assignment.slot,
                                       deadline_s=session.welcome.deadlines.run_ms / 1000)
            self._source = source
        return self._guard, self._source


def compact_request(route: Route, head: list[dict[str, Any]]) -> dict[str, Any]:
    """The compaction request body for ``head`` on ``route``'s API."""
    if route.api == "anthropic-messages":
        from efold.guard.wire.compact_anthropic import compact_messages_payload

        if route.max_output_tokens is None:  # profiles refuse such a Messages route
            raise WorkerError(Code.WORKER_USAGE, "a Messages route without max_output_tokens")
        return compact_messages_payload(route.model, head, route.max_output_tokens,
                                        effort=route.effort)
    from efold.guard.wire.compact_openai import compact_payload

    return compact_payload(route.model, head)


def compact_transport(route: Route, credential: str | None) -> Any:
    """HTTP to the route's base URL, or the faux provider playing the endpoint."""
    from efold.worker.route import FAUX_PROVIDER, route_transport

    if route.provider == FAUX_PROVIDER:
        from efold.guard.wire.faux import FauxTransport, faux_compaction
        from efold.worker.faux_reader import respond

        return FauxTransport(respond, compactor=faux_compaction)
    return route_transport(route, credential)
