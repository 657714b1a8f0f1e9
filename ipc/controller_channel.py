"""The controller's side of the lockstep channel: async, on anyio (trio backend).

A thin shell over ``LockstepCore``: the controller always waits for the child's message
(``receive``) and then answers it (``reply``). The rules live in the core; this module
only moves bytes and maps anyio's failures onto named IPC errors:

* end of stream          -> ``IpcEof`` / ``IpcTruncatedFrame`` (a dead child reads as EOF,
  because the controller closed its copy of the child's socket end)
* broken/closed stream   -> ``IpcEof``
* ``receive`` deadline   -> ``IpcTimeout``
* any other cancellation -> ``IpcCancelled``, then the cancellation propagates

Each of these poisons the channel. The child never imports this module.
"""

from __future__ import annotations

import socket

import anyio
import anyio.abc

from efold.errors import Code
from efold.ipc.errors import IpcCancelled, IpcEof, IpcError, IpcTimeout
from efold.ipc.framing import DEFAULT_MAX_FRAME
from efold.ipc.lockstep import LockstepCore, Phase, controller_core
from efold.ipc.messages import Binding, ChildMessage, ControllerMessage, ProtocolName


class ControllerChannel:
    """Async lockstep channel over the controller's end of the socketpair."""

    def __init__(
        self, stream: anyio.abc.SocketStream, core: LockstepCore[ControllerMessage, ChildMessage]
    ) -> None:
        self._stream = stream
        self._core = core

    @classmethod
    async def over_socket(
        cls,
        sock: socket.socket,
        *,
        protocol: ProtocolName,
        binding: Binding,
        key: bytes,
        max_frame: int = DEFAULT_MAX_FRAME,
    ) -> ControllerChannel:
        """Take ownership of ``sock`` (connected, stream) and wrap it."""
        stream = await anyio.abc.SocketStream.from_socket(sock)
        core = controller_core(protocol=protocol, binding=binding, key=key, max_frame=max_frame)
        return cls(stream, core)

    @property
    def binding(self) -> Binding:
        return self._core.binding

    @property
    def phase(self) -> Phase:
        return self._core.phase

    @property
    def poisoned(self) -> bool:
        return self._core.poisoned is not None

    @property
    def failure(self) -> Code | None:
        """The code of the failure that poisoned the channel, if any."""
        return self._core.poisoned

    @property
    def finished(self) -> bool:
        """True after DoneAck or Stop was sent: the exchange ended by protocol."""
        return self._core.finished and self._core.poisoned is None

    async def receive(self, *, timeout: float | None = None) -> ChildMessage:
        """Wait for the child's next message. ``timeout`` in seconds (None: unbounded)."""
        try:
            if timeout is None:
                return await self._read_message()
            with anyio.CancelScope(deadline=anyio.current_time() + timeout):
                return await self._read_message()
        except IpcError:
            raise
        except BaseException:
            self._core.fail(IpcCancelled("receive abandoned"))
            raise
        # Only our own deadline is swallowed by the scope (the read returns otherwise):
        # the exchange timed out.
        raise self._core.fail(IpcTimeout("no message within the deadline"))

    async def _read_message(self) -> ChildMessage:
        core = self._core
        while True:
            try:
                data = await self._stream.receive(core.want())
            except anyio.EndOfStream:
                raise core.end_of_stream() from None
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                raise core.fail(IpcEof("stream broken")) from exc
            msg = core.feed(data)
            if msg is not None:
                return msg

    async def reply(self, msg: ControllerMessage) -> None:
        """Answer the child's last message with ``msg``."""
        frame = self._core.outgoing(msg)
        try:
            await self._stream.send(frame)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            raise self._core.fail(IpcEof("stream broken")) from exc
        except BaseException:
            self._core.fail(IpcCancelled("reply abandoned"))
            raise

    def abandon(self, error: IpcError) -> IpcError:
        """Poison the channel from outside (e.g. the controller decided to contain)."""
        return self._core.fail(error)

    async def aclose(self) -> None:
        await self._stream.aclose()
