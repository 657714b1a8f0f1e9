"""The real HTTP transport (httpx, imported lazily so the faux path never loads it).

One POST per guard-minted ticket, streamed, with:

- ``follow_redirects=False`` (a 3xx comes back as a status; the guard stops on it),
- zero retries (``HTTPTransport(retries=0)``), no connection re-attempts,
- ``trust_env=False``: no proxy, netrc or certificate settings from the environment,
- headers built here only: content type, accept, ``accept-encoding: identity``, user
  agent and the bearer credential (never logged, never in ``repr``, never in a record).

Failures are mapped once, here: nothing left (connect failed) → ``SendFailed``; the
guard's deadline passed or the response grew past its limit → ``OwnAbort``; anything
else after the request went out → ``StreamLost``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

from efold.errors import Code
from efold.guard.errors import OwnAbort, SendFailed, StreamLost
from efold.guard.transport import SendTicket, WireRequest, WireResponse, require_ticket

if TYPE_CHECKING:
    import httpx

MAX_RESPONSE_BYTES: Final = 64 * 1024 * 1024


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
            import httpx

            self._client = httpx.Client(
                follow_redirects=False,
                trust_env=False,
                transport=httpx.HTTPTransport(retries=0, trust_env=False),
            )
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def open(self, ticket: SendTicket, request: WireRequest) -> WireResponse:
        require_ticket(ticket)
        import httpx

        client = self._http()
        headers = {
            "content-type": "application/json",
            "accept": "text/event-stream" if request.stream else "application/json",
            "accept-encoding": "identity",
            "user-agent": self._user_agent,
        }
        if self._credential is not None:
            headers["authorization"] = f"Bearer {self._credential}"
        deadline = request.deadline_s
        timeout = httpx.Timeout(connect=min(self._connect_timeout_s, deadline), read=deadline,
                                write=deadline, pool=deadline)
        started = time.monotonic()
        built = client.build_request("POST", self.route.rstrip("/") + request.path,
                                     content=request.body, headers=headers, timeout=timeout)
        try:
            response = client.send(built, stream=True, follow_redirects=False)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            raise SendFailed(type(exc).__name__) from exc
        except httpx.ReadTimeout as exc:
            raise OwnAbort(Code.LOOKUP_REQUEST_DEADLINE, "no response head in time") from exc
        except httpx.HTTPError as exc:
            raise StreamLost(type(exc).__name__) from exc
        return _HttpResponse(response, started + deadline, self._max_response_bytes)


class _HttpResponse:
    def __init__(self, response: Any, deadline_at: float, max_bytes: int) -> None:
        self._response = response
        self.status: int = response.status_code
        self._deadline_at = deadline_at
        self._max_bytes = max_bytes

    def chunks(self) -> Iterator[bytes]:
        import httpx

        seen = 0
        try:
            for chunk in self._response.iter_bytes():
                seen += len(chunk)
                if seen > self._max_bytes:
                    raise OwnAbort(Code.LOOKUP_RESPONSE_TOO_LARGE, "response above limit")
                if time.monotonic() > self._deadline_at:
                    raise OwnAbort(Code.LOOKUP_REQUEST_DEADLINE, "response past deadline")
                yield chunk
        except httpx.ReadTimeout as exc:
            raise OwnAbort(Code.LOOKUP_REQUEST_DEADLINE, "response stalled") from exc
        except (httpx.HTTPError, httpx.StreamError) as exc:
            raise StreamLost(type(exc).__name__) from exc

    def close(self) -> None:
        self._response.close()
