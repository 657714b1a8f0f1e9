"""The transport seam under the guard: one send, authorised by a single-use ticket.

A ``Transport`` is constructed by trusted code (the worker) and handed to the guard;
callers of the guard never supply one. Every ``open`` must present a ``SendTicket``
that only the guard mints, one per permit, and that can be claimed exactly once:

- a transport called without a guard-minted ticket refuses (``lookup_unguarded_dispatch``);
- a second claim of the same ticket (a retry loop, a re-entrant call) refuses
  (``lookup_send_reentered``) *before* anything is sent.

The brand is module-private by convention only: it keeps honest code from sending
outside the guard; it is not a security boundary against code in the same process.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, Protocol

from efold.errors import Code
from efold.guard.errors import GuardError

_MINT = object()  # only the guard passes this; see module docstring

# Every transport honours this: an exchange ends (``OwnAbort`` with
# ``lookup_request_deadline``) no later than ``ABORT_BOUND_S`` after its
# ``WireRequest.deadline_s`` has passed, whatever the peer sends or withholds. The
# controller's watchdog margin over a request's deadline must exceed it, or the
# controller could give up on a child whose guard was about to settle in time.
ABORT_BOUND_S: Final = 1.0


class SendTicket:
    """Authorisation for exactly one send under one permit."""

    __slots__ = ("_claimed", "_lock", "permit_id")

    def __init__(self, mint: object, permit_id: str) -> None:
        if mint is not _MINT:
            raise GuardError(Code.LOOKUP_UNGUARDED_DISPATCH, "ticket not minted by the guard")
        self.permit_id = permit_id
        self._lock = threading.Lock()
        # Invariant: flips False -> True once, under the lock, before any byte is sent.
        self._claimed = False

    def claim(self) -> None:
        """Called by a transport first thing in ``open``."""
        with self._lock:
            if self._claimed:
                raise GuardError(Code.LOOKUP_SEND_REENTERED, "second send under one permit")
            self._claimed = True

    @property
    def claimed(self) -> bool:
        return self._claimed


def mint_ticket(permit_id: str) -> SendTicket:
    """The guard's way to mint a ticket (kept out of the package's public names)."""
    return SendTicket(_MINT, permit_id)


def require_ticket(ticket: object) -> SendTicket:
    """For transports: refuse anything but a guard-minted, unclaimed ticket, and claim it."""
    if not isinstance(ticket, SendTicket):
        raise GuardError(Code.LOOKUP_UNGUARDED_DISPATCH, "send without a guard ticket")
    ticket.claim()
    return ticket


# How a transport sends its credential: ``authorization: Bearer K`` or ``x-api-key: K``.
AUTH_SCHEMES: Final = frozenset({"bearer", "x-api-key"})
# Headers only a transport sets (framing, content negotiation, identity, credential).
# Invariant: a ``WireRequest`` naming one of them in ``headers`` cannot be constructed,
# so a wire format's extra headers can never override them.
RESERVED_HEADERS: Final = frozenset({
    "content-type", "content-length", "accept", "accept-encoding", "user-agent",
    "authorization", "x-api-key", "host", "connection", "transfer-encoding",
})
_HEADER_NAME: Final = re.compile(r"^[a-z0-9][a-z0-9-]*$")


@dataclass(frozen=True)
class WireRequest:
    """What the guard hands a transport: a path under the route, the exact body
    (already digest-checked), whether to stream, the guard's deadline, the wire
    format's non-secret headers and how the credential is sent (``AUTH_SCHEMES``).

    ``headers`` are lower-case names with printable values, none of them reserved
    (``RESERVED_HEADERS``): construction refuses anything else (``ValueError``, a bug
    in a wire format, never a caller's input)."""

    path: str  # e.g. "/responses"
    body: bytes
    stream: bool
    deadline_s: float  # seconds the whole exchange may take from ``open``
    headers: tuple[tuple[str, str], ...] = ()
    auth: str = "bearer"

    def __post_init__(self) -> None:
        if self.auth not in AUTH_SCHEMES:
            raise ValueError(f"unknown auth scheme {self.auth!r}")
        names: set[str] = set()
        for name, value in self.headers:
            if not _HEADER_NAME.match(name) or name in RESERVED_HEADERS or name in names:
                raise ValueError(f"header {name!r} is reserved, malformed or repeated")
            if not value.isprintable() or not value.isascii():
                raise ValueError(f"header {name!r} has a non-printable value")
            names.add(name)


class WireResponse(Protocol):
    status: int

    def chunks(self) -> Iterator[bytes]:
        """The body, as it arrives. Raises ``StreamLost`` / ``OwnAbort``."""
        ...

    def close(self) -> None: ...


class Transport(Protocol):
    route: str  # the base URL it sends to; must equal the contract's

    def open(self, ticket: SendTicket, request: WireRequest) -> WireResponse:
        """Send once. Raises ``SendFailed`` (not sent), ``StreamLost`` or ``OwnAbort``."""
        ...
