"""The real HTTP transport (httpx, imported lazily so the faux path never loads it).

One POST per guard-minted ticket, streamed, with:

- ``follow_redirects=False`` (a 3xx comes back as a status; the guard stops on it),
- zero retries (``HTTPTransport(retries=0)``), no connection re-attempts, and no
  keep-alive: every send opens its own connection (a pooled one could be stale, and
  the deadline watchdog must see the socket from the start, see ``_Watchdog``),
- ``trust_env=False``: no proxy, netrc or certificate settings from the environment,
- headers built here: content type, accept (``text/event-stream`` when the request
  streams, else ``application/json``), ``accept-encoding: identity``, user agent and the
  credential, sent as the request's ``auth`` says (``authorization: Bearer K`` or
  ``x-api-key: K``; never logged, never in ``repr``, never in a record). The wire
  format's own non-secret headers (``WireRequest.headers``: an API version, a beta
  flag) are added; they cannot name any of these (``RESERVED_HEADERS``: refused when the
  request is built, and the transport's own are set last regardless).

The deadline is a hard one: the exchange ends no later than ``ABORT_BOUND_S`` after it
(``efold.guard.transport``). httpx's timeouts alone cannot promise that: they bound each
read, and a peer that sends a byte before every read timeout (late data, a trickled
head, a chunk line that never ends) keeps them alive for ever. So a watchdog shuts the
connection down at the deadline, and whatever the blocked read then reports (an error,
or the end of a close-delimited body) is read as the deadline abort.

A child pays for this module at every send, so two costs are cut (benchmarks/
bench_concurrency.py): httpx's command-line client (``httpx._main``, which imports rich
and click when they are installed) is never imported, and a plain ``http://`` route
(a local server) never loads the CA bundle: its client gets a TLS context that trusts
nothing, which no connection of that route uses (redirects are not followed) and which
would fail any certificate if one did. An ``https://`` route verifies as httpx does.

Failures are mapped once, here: nothing left (connect failed) → ``SendFailed``; the
guard's deadline passed or the response grew past its limit → ``OwnAbort``; anything
else after the request went out → ``StreamLost``. Name resolution is not covered by
the watchdog (no socket exists yet): routes are expected to resolve promptly.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

from efold.errors import Code
from efold.guard.errors import OwnAbort, SendFailed, StreamLost
from efold.guard.transport import SendTicket, WireRequest, WireResponse, require_ticket

if TYPE_CHECKING:
    import ssl

    import httpx

MAX_RESPONSE_BYTES: Final = 64 * 1024 * 1024
# httpcore's trace event once the TCP connection exists (the httpx ``trace`` extension).
_CONNECTED: Final = "connection.connect_tcp.complete"


# What httpx would load for nothing in a sync client: its command-line client (rich,
# click) and httpcore's async backends (trio, anyio), ~250 ms a child. Absent while
# httpx and httpcore's sync transport are imported (``preload``); a later import of any
# of them works.
_NOT_FOR_A_SYNC_CLIENT: Final = ("httpx._main", "trio", "anyio")
# Invariant: built at most once per process, and only from httpx's own defaults
# (``preload``); holds a CA store, nothing secret. A fork-server template builds it
# before forking, so its workers share the loaded store instead of each loading it.
_https_context: ssl.SSLContext | None = None


def preload(*, https: bool = True) -> None:
    """Import what a send needs, without what a sync client needs not (above); with
    ``https``, build the verified TLS context an https route uses (httpx's default,
    ~200 ms: the CA bundle). Idempotent. A ``None`` in ``sys.modules`` makes that
    module's import fail; httpx and httpcore both take that as the optional dependency
    being absent (a stub ``main``, no async backend). Starts no thread."""
    global _https_context
    blocked = [name for name in _NOT_FOR_A_SYNC_CLIENT if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]  # the import system's own rule
    try:
        import httpcore._sync.connection_pool  # noqa: F401  (httpx imports it lazily)
        import httpx
    finally:
        for name in blocked:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
    if https and _https_context is None:
        _https_context = httpx.create_ssl_context()  # verifies, with certifi's CA store


def _sync_client(route: str) -> httpx.Client:
    """The one-shot client of ``route`` (see the module docstring). Its TLS context: for
    https, the verified default (``preload``); for plain http, one with an empty trust
    store, which no connection of the route uses (no TLS is made, redirects are not
    followed) and which no certificate could pass."""
    import ssl

    https = route.startswith("https://")
    preload(https=https)
    import httpx

    verify = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies, with nothing to trust
    if https:
        assert _https_context is not None  # preload built it
        verify = _https_context
    return httpx.Client(
        follow_redirects=False,
        trust_env=False,
        transport=httpx.HTTPTransport(
            verify=verify, retries=0, trust_env=False,
            limits=httpx.Limits(max_keepalive_connections=0)),
    )


def _deadline_abort(why: str) -> OwnAbort:
    return OwnAbort(Code.LOOKUP_REQUEST_DEADLINE, why)


class _Watchdog:
    """Shuts one exchange's connection down when its deadline passes.

    It holds its own duplicate of the connection's socket: shutting that down ends the
    connection for every descriptor of it (TLS included, even mid-handshake, when the
    original socket object has been wrapped), and, being ours until ``close``, the
    descriptor cannot be reused by an unrelated socket before the timer fires.
    """

    def __init__(self, seconds: float) -> None:
        self._lock = threading.Lock()
        # Invariants, all under the lock: ``expired`` and ``closed`` flip to True once;
        # after ``expired``, any socket held or handed over is shut down; after
        # ``closed``, no socket is held and the timer does nothing.
        self._expired = False
        self._closed = False
        self._sock: socket.socket | None = None
        self._timer = threading.Timer(max(0.0, seconds), self._fire)
        self._timer.daemon = True
        self._timer.start()

    @property
    def expired(self) -> bool:
        return self._expired

    def trace(self, event: str, info: dict[str, Any]) -> None:
        """The httpx ``trace`` extension: picks up the socket as soon as it connects."""
        if event == _CONNECTED:
            self.watch(info.get("return_value"))

    def watch(self, stream: Any) -> None:
        """Watch the socket of an httpcore network stream (the first one seen)."""
        get_extra_info = getattr(stream, "get_extra_info", None)
        sock = get_extra_info("socket") if callable(get_extra_info) else None
        if not isinstance(sock, socket.socket):
            return
        with self._lock:
            if self._closed or self._sock is not None:
                return
            try:
                self._sock = sock.dup()
            except OSError:
                return
            if self._expired:
                _shut(self._sock)

    def _fire(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._expired = True
            if self._sock is not None:
                _shut(self._sock)

    def close(self) -> None:
        self._timer.cancel()
        with self._lock:
            self._closed = True
            if self._sock is not None:
                self._sock.close()
                self._sock = None


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # already gone: nothing left to stop
        pass


class HttpTransport:
    """Sends to ``base_url`` (e.g. ``https://api.openai.com/v1``)."""

    def __init__(
        self,
        base_url: str,
        *,
        credential: str | None = None,
        connect_timeout_s: float = 10.0,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        user_agent: str = "efold-guard/1",
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError("base_url must be http(s)")
        self.route = base_url
        self._credential = credential
        self._connect_timeout_s = connect_timeout_s
        self._max_response_bytes = max_response_bytes
        self._user_agent = user_agent
        self._client: httpx.Client | None = None

    def __repr__(self) -> str:
        return f"HttpTransport(route={self.route!r})"

    def _http(self) -> httpx.Client:
        if self._client is None:
            self._client = _sync_client(self.route)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def open(self, ticket: SendTicket, request: WireRequest) -> WireResponse:
        require_ticket(ticket)
        started = time.monotonic()  # the deadline counts from open, setup included
        client = self._http()  # first: it imports httpx (``_sync_client``)
        import httpx

        headers = dict(request.headers)  # none reserved (WireRequest); ours set after
        headers.update({
            "content-type": "application/json",
            "accept": "text/event-stream" if request.stream else "application/json",
            "accept-encoding": "identity",
            "user-agent": self._user_agent,
        })
        if self._credential is not None:
            if request.auth == "x-api-key":
                headers["x-api-key"] = self._credential
            else:
                headers["authorization"] = f"Bearer {self._credential}"
        deadline = request.deadline_s
        # Per-operation backstops; the watchdog is what bounds the whole exchange.
        timeout = httpx.Timeout(connect=min(self._connect_timeout_s, deadline), read=deadline,
                                write=deadline, pool=deadline)
        watchdog = _Watchdog(started + deadline - time.monotonic())
        built = client.build_request("POST", self.route.rstrip("/") + request.path,
                                     content=request.body, headers=headers, timeout=timeout,
                                     extensions={"trace": watchdog.trace})
        try:
            response = client.send(built, stream=True, follow_redirects=False)
        except httpx.HTTPError as exc:
            watchdog.close()
            raise _open_failure(exc, expired=watchdog.expired) from exc
        except BaseException:
            watchdog.close()
            raise
        # Only if the connect event was somehow missed (it fires for every new
        # connection, and keep-alive is off): the head has then come unguarded.
        watchdog.watch(response.extensions.get("network_stream"))
        return _HttpResponse(response, started + deadline, self._max_response_bytes, watchdog)


def _open_failure(exc: Exception, *, expired: bool) -> Exception:
    import httpx

    if expired:  # whatever broke, the watchdog broke it: the deadline passed
        return _deadline_abort("no response head in time")
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)):
        return SendFailed(type(exc).__name__)
    if isinstance(exc, httpx.ReadTimeout):
        return _deadline_abort("no response head in time")
    return StreamLost(type(exc).__name__)


class _HttpResponse:
    def __init__(self, response: Any, deadline_at: float, max_bytes: int,
                 watchdog: _Watchdog) -> None:
        self._response = response
        self.status: int = response.status_code
        self._deadline_at = deadline_at
        self._max_bytes = max_bytes
        self._watchdog = watchdog

    def _past_deadline(self) -> bool:
        return self._watchdog.expired or time.monotonic() > self._deadline_at

    def chunks(self) -> Iterator[bytes]:
        import httpx

        seen = 0
        try:
            for chunk in self._response.iter_bytes():
                seen += len(chunk)
                if seen > self._max_bytes:
                    raise OwnAbort(Code.LOOKUP_RESPONSE_TOO_LARGE, "response above limit")
                if self._past_deadline():
                    raise _deadline_abort("response past deadline")
                yield chunk
        except httpx.ReadTimeout as exc:
            raise _deadline_abort("response stalled") from exc
        except (httpx.HTTPError, httpx.StreamError) as exc:
            if self._watchdog.expired:
                raise _deadline_abort("response cut at the deadline") from exc
            raise StreamLost(type(exc).__name__) from exc
        if self._watchdog.expired:
            # A close-delimited body "ends" when the watchdog shuts the socket: that end
            # is ours, not the provider's.
            raise _deadline_abort("response cut at the deadline")

    def close(self) -> None:
        try:
            self._response.close()
        finally:
            self._watchdog.close()
