"""Errors of the lockstep IPC channel.

Every violation has its own class and fixed code, so a caller can tell *whose fault* it
was without parsing text::

    IpcError                     (efold.errors.EfoldError)
    ├── IpcPeerError             the other side broke the protocol or went away
    │   ├── IpcEof               clean end of stream at a frame boundary (peer closed/died)
    │   ├── IpcTruncatedFrame    end of stream inside a frame
    │   ├── IpcFrameTooLarge     declared length above the maximum (refused before reading)
    │   ├── IpcBadMac            HMAC tag does not verify
    │   ├── IpcBadMessage        body is not one of the direction's messages (strict decode)
    │   ├── IpcBindingMismatch   epoch / slot / worker identity differ from the channel's
    │   ├── IpcSeqMismatch       replayed or skipped sequence number
    │   ├── IpcOutOfOrder        a kind the lockstep state does not allow next
    │   └── IpcTimeout           no complete frame within the exchange deadline
    ├── IpcCancelled             this side abandoned an exchange half-way (cancellation)
    ├── IpcLocalMisuse           this side tried to send a kind its state does not allow
    └── IpcPoisoned              a call on a channel that already failed; ``cause`` is the
                                 code of the first failure

After any of them the channel is poisoned: every later call raises ``IpcPoisoned``.
"""

from __future__ import annotations

from typing import ClassVar

from efold.errors import Code, EfoldError


class IpcError(EfoldError):
    """A framing or lockstep failure. ``code`` names the rule that was broken."""

    CODE: ClassVar[Code]

    def __init__(self, detail: str = "") -> None:
        super().__init__(self.CODE, detail)

    def __reduce__(self) -> tuple[type[IpcError], tuple[str]]:  # type: ignore[override]
        return type(self), (self.detail,)


class IpcPeerError(IpcError):
    """The peer broke the protocol, sent garbage, or went away: its fault, not ours."""


class IpcEof(IpcPeerError):
    CODE = Code.IPC_EOF


class IpcTruncatedFrame(IpcPeerError):
    CODE = Code.IPC_TRUNCATED_FRAME


class IpcFrameTooLarge(IpcPeerError):
    CODE = Code.IPC_FRAME_TOO_LARGE


class IpcBadMac(IpcPeerError):
    CODE = Code.IPC_BAD_MAC


class IpcBadMessage(IpcPeerError):
    CODE = Code.IPC_BAD_MESSAGE


class IpcBindingMismatch(IpcPeerError):
    CODE = Code.IPC_BINDING_MISMATCH


class IpcSeqMismatch(IpcPeerError):
    CODE = Code.IPC_SEQ_MISMATCH


class IpcOutOfOrder(IpcPeerError):
    CODE = Code.IPC_OUT_OF_ORDER


class IpcTimeout(IpcPeerError):
    CODE = Code.IPC_TIMEOUT


class IpcCancelled(IpcError):
    """This side abandoned an exchange (a cancelled or interrupted send/receive): the
    stream may hold half a frame, so the channel can never be trusted again."""

    CODE = Code.IPC_CANCELLED


class IpcLocalMisuse(IpcError):
    """This side asked to send a kind the lockstep state does not allow: a bug here,
    reported with the same fixed code as the peer's version of the mistake."""

    CODE = Code.IPC_OUT_OF_ORDER


class IpcPoisoned(IpcError):
    """The channel already failed; ``cause`` is the code of that first failure."""

    CODE = Code.IPC_POISONED

    def __init__(self, cause: Code) -> None:
        super().__init__(cause.value)
        self.cause = cause
