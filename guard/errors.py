"""Errors of the guard: the one path to a model.

Tree (whose fault it was)::

    GuardError                 a guard rule refused; ``code`` says which
    ├── CatalogError           the price catalog (the operator's file) is invalid
    ├── PolicyViolation        the caller's payload or options break the request contract
    └── TransportFailure       the single send went wrong; the subclass says how far it got
        ├── SendFailed         nothing (or not all of the body) reached the provider
        ├── StreamLost         the response broke off or could not be read
        └── OwnAbort           the guard itself gave up after sending (deadline, size)

A ``GuardError`` raised by a permit source (the durable one lives on the far side of
IPC) propagates with its own code; the guard maps it to an outcome where the outcome
table says so.
"""

from __future__ import annotations

from efold.errors import Code, EfoldError


class GuardError(EfoldError):
    """A refusal or stop on the guarded path."""


class CatalogError(GuardError):
    """The price catalog is malformed, has a float/negative rate, or lacks a model."""


class PolicyViolation(GuardError):
    """The caller built a payload (or passed options) the contract forbids. Raised
    before any hold exists; the guard turns it into a sticky stop."""


class TransportFailure(GuardError):
    """The one send failed. The subclass decides the outcome kind."""


class SendFailed(TransportFailure):
    """The request did not (completely) leave: connect refused, write failed."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(Code.LOOKUP_SEND_FAILED, detail)


class StreamLost(TransportFailure):
    """The response broke off or was unreadable after the request was sent."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(Code.LOOKUP_STREAM_LOST, detail)


class OwnAbort(TransportFailure):
    """The guard aborted a sent request on its own rule (deadline, response size)."""
