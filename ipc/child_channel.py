"""The child's side of the lockstep channel: plain blocking sockets, no event loop.

A thin shell over ``LockstepCore``: it writes the frames the core builds and feeds the
core what it reads. The child always speaks first and then waits for exactly one reply,
so its API is ``request`` (send one message, return the controller's reply), plus
``send`` for the one message nobody answers (``Ready``).

Imports stay lean on purpose (the child pays for every import at each launch): no
anyio, trio or anything the controller side needs.
"""

from __future__ import annotations

import socket

from efold.ipc.errors import (
    IpcCancelled,
    IpcEof,
    IpcError,
    IpcLocalMisuse,
    IpcTimeout,
)
from efold.ipc.framing import DEFAULT_MAX_FRAME
from efold.ipc.lockstep import child_core
from efold.ipc.messages import Binding, ChildMessage, ControllerMessage, ProtocolName


class ChildChannel:
    """Blocking lockstep channel over an inherited, connected stream socket.

    ``exchange_timeout`` (seconds, or None for none) bounds each wait for a reply; a
    timeout poisons the channel (``ipc_timeout``) like any other violation.
    """

    def __init__(
        self,
        sock: socket.socket,
        *,
        protocol: ProtocolName,
        binding: Binding,
        key: bytes,
        exchange_timeout: float | None = None,
        max_frame: int = DEFAULT_MAX_FRAME,
    ) -> None:
        self._sock = sock
        self._core = child_core(protocol=protocol, binding=binding, key=key, max_frame=max_frame)
        sock.setblocking(True)
        sock.settimeout(exchange_timeout)

    @property
    def phase(self) -> str:
        return self._core.phase.value

    @property
    def poisoned(self) -> bool:
        return self._core.poisoned is not None

    def set_exchange_timeout(self, seconds: float | None) -> None:
        self._sock.settimeout(seconds)

    def request(self, msg: ChildMessage) -> ControllerMessage:
        """Send ``msg`` and block for the controller's one reply (checked against the
        lockstep state, binding and seq). Any failure poisons the channel."""
        core = self._core
        frame = core.outgoing(msg)
        if core.my_turn():
            raise core.fail(IpcLocalMisuse(f"{type(msg).__name__} has no reply; use send"))
        return self._io(frame, expect_reply=True)  # type: ignore[return-value]

    def send(self, msg: ChildMessage) -> None:
        """Send a message the controller does not answer (``Ready``: the next message
        is ours again)."""
        core = self._core
        frame = core.outgoing(msg)
        if not core.my_turn():
            raise core.fail(IpcLocalMisuse(f"{type(msg).__name__} expects a reply; use request"))
        self._io(frame, expect_reply=False)

    def _io(self, frame: bytes, *, expect_reply: bool) -> ControllerMessage | None:
        core = self._core
        try:
            self._sock.sendall(frame)
            if not expect_reply:
                return None
            while True:
                data = self._sock.recv(core.want())
                if not data:
                    raise core.end_of_stream()
                reply = core.feed(data)
                if reply is not None:
                    return reply
        except IpcError:
            raise  # the core has poisoned itself already
        except TimeoutError:
            raise core.fail(IpcTimeout("no reply within the exchange deadline")) from None
        except OSError as exc:  # reset, broken pipe: the controller end went away
            raise core.fail(IpcEof(f"socket error errno {exc.errno}")) from exc
        except BaseException:
            # Interrupted half-way (KeyboardInterrupt, a signal handler raising...): the
            # stream may hold half a frame, so the channel is dead.
            core.fail(IpcCancelled("exchange interrupted"))
            raise

    def close(self) -> None:
        self._sock.close()

