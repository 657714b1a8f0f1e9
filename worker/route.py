"""A child's one way to a model: the guard for a frozen ``Route``.

Every request a child sends (the reader's rounds, a summariser's summaries) goes through
a ``Guard`` built here from the route its task names: the catalog entry that prices the
model (the bundled catalog, or the operator catalog file checked against the digest the
registration bound), the contract (the route, the input envelope tightened by the
model's context window, the slot's cache key on the Responses API), and the transport
(the faux extractive reader offline, else HTTP to the route's base URL with the
credential the controller passed on the child's own descriptor, if any).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from efold.errors import Code
from efold.input_files import CATALOG_LIMIT, InputFileError, read_input
from efold.protocol.tasks import Route
from efold.worker.errors import WorkerError

if TYPE_CHECKING:
    from efold.guard.catalog import CatalogEntry
    from efold.guard.contract import Contract
    from efold.guard.request import Guard
    from efold.guard.wire.faux import Responder

FAUX_PROVIDER = "faux"


def route_entry(route: Route) -> CatalogEntry:
    """The route's model in the catalog the registration bound (digest checked first:
    a catalog edited since refuses with ``worker_digest_mismatch``)."""
    from efold.guard.catalog import bundled_catalog, parse_catalog

    if route.catalog_file is None:
        catalog = bundled_catalog()
    else:
        try:
            data = read_input(route.catalog_file, what="catalog", limit=CATALOG_LIMIT)
        except InputFileError as exc:  # it was a readable regular file at registration
            raise WorkerError(Code.WORKER_DIGEST_MISMATCH, "catalog unreadable") from exc
        if hashlib.sha256(data).hexdigest() != route.catalog_sha256:
            raise WorkerError(Code.WORKER_DIGEST_MISMATCH, "catalog changed since registration")
        catalog = parse_catalog(data)
    if catalog.digest != route.catalog_sha256:
        raise WorkerError(Code.WORKER_DIGEST_MISMATCH, "catalog differs from the registered one")
    return catalog.entry(route.provider, route.model)


def route_contract(route: Route, entry: CatalogEntry, *, cache_key: str | None,
                   tools: Sequence[str]) -> Contract:
    """The frozen contract of the route. The cache key rides on the Responses API only
    (Chat Completions servers differ on it; the slot's key still binds its IPC)."""
    from efold.guard import INPUT_ENVELOPE, Contract, WireApi

    api = WireApi(route.api)
    return Contract(
        provider=route.provider, model=route.model, api=api, base_url=route.base_url,
        effort=route.effort, stream=route.stream, tools=tuple(tools),
        prompt_cache_key=cache_key if api is WireApi.OPENAI_RESPONSES else None,
        input_envelope=entry.input_envelope(INPUT_ENVELOPE),
    )


def route_options(route: Route) -> dict[str, Any]:
    """The options every request on ``route`` carries, in its wire format: streaming
    (Chat Completions asks for usage when it streams), the reasoning effort, and the
    reply limit (Responses ``max_output_tokens``; Chat Completions the route's field;
    Messages ``max_tokens``, which that API requires: profiles refuse a Messages route
    without one)."""
    if route.api == "anthropic-messages":
        options: dict[str, Any] = {"stream": route.stream, "max_tokens": route.max_output_tokens}
        if route.effort is not None:
            options["output_config"] = {"effort": route.effort}
        return options
    chat = route.api == "openai-chat"
    options = {"stream": route.stream if chat else True}
    if chat and route.stream:
        options["stream_options"] = {"include_usage": True}
    if route.effort is not None:
        options["reasoning_effort" if chat else "reasoning"] = (
            route.effort if chat else {"effort": route.effort})
    if route.max_output_tokens is not None:
        field = route.max_tokens_field if chat else "max_output_tokens"
        options[field] = route.max_output_tokens
    return options


def reply_text(items: list[dict[str, Any]]) -> str:
    """The text of a settled reply's output items (Responses-shaped, whichever wire
    format it came in): the reader's answer, a summariser's summary."""
    return "".join(
        part.get("text", "")
        for item in items if item.get("type") == "message"
        for part in item.get("content", ()) if part.get("type") == "output_text"
    ).strip()


def route_transport(route: Route, credential: str | None,
                    responder: Responder | None = None) -> Any:
    """The faux provider offline (answering with ``responder``; None: the extractive
    reader), else HTTP (no credential: a local server)."""
    if route.provider == FAUX_PROVIDER:
        from efold.guard.wire.faux import FauxTransport
        from efold.worker.faux_reader import respond

        return FauxTransport(responder or respond)
    from efold.guard.wire.http import HttpTransport

    return HttpTransport(route.base_url, credential=credential)


def route_guard(route: Route, source: object, *, run_id: str, deadline_s: float,
                cache_key: str | None, credential: str | None,
                tools: Sequence[str] = (), responder: Responder | None = None) -> Guard:
    """The guard every request of this child goes through, and only with a real permit
    source (the test-only one is refused). ``responder``: who plays the model on the
    faux route (a boundary case's faux agent); ignored on a real one."""
    from efold.guard import Guard, assert_real_source

    assert_real_source(source)
    entry = route_entry(route)
    contract = route_contract(route, entry, cache_key=cache_key, tools=tools)
    return Guard(contract, entry, source, route_transport(route, credential, responder),  # type: ignore[arg-type]
                 run_id=run_id, deadline_s=deadline_s)
