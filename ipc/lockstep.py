"""The lockstep channel as a pure state machine (sans I/O), shared by both sides.

``LockstepCore`` owns everything a channel decides: which kinds may come next in each
phase, whose turn it is, the sequence counter, the binding, the codec and the framing.
The two I/O shells (``efold.ipc.child_channel`` with blocking sockets for the child,
``efold.ipc.controller_channel`` with anyio for the controller) only move bytes.

The phase tables (who sends in each phase, which kinds may come next, where they lead)::

    probe:  AWAIT_HELLO    child       Hello -> AWAIT_WELCOME
            AWAIT_WELCOME  controller  Welcome -> AWAIT_READY
            AWAIT_READY    child       Ready -> IDLE
            IDLE           child       Admit -> AWAIT_PERMIT ; Halt -> AWAIT_HALTED ;
                                       Terminal -> AWAIT_DONE_ACK
            AWAIT_PERMIT   controller  Granted -> PERMITTED ; Refused -> IDLE
            PERMITTED      child       Consume -> AWAIT_CONSUMED ; Settle -> AWAIT_SETTLED
            AWAIT_CONSUMED controller  Consumed -> CONSUMED
            CONSUMED       child       Settle -> AWAIT_SETTLED
            AWAIT_SETTLED  controller  Settled -> IDLE
            AWAIT_HALTED   controller  Halted -> IDLE
            AWAIT_DONE_ACK controller  DoneAck -> DONE
    prep:   AWAIT_HELLO    child       Hello -> AWAIT_WELCOME
            AWAIT_WELCOME  controller  Welcome -> IDLE
            IDLE           child       Admit -> AWAIT_PERMIT ; Halt -> AWAIT_HALTED ;
                                       Prepared -> AWAIT_DONE_ACK
            (AWAIT_PERMIT ... AWAIT_HALTED: the probe's permit phases, back to IDLE)
            AWAIT_DONE_ACK controller  DoneAck -> DONE

In every controller phase the controller may instead send ``Stop``, which leads to
STOPPED. DONE and STOPPED are final.

Invariant: once any ``IpcError`` leaves this object (or a shell reports a cancelled or
failed exchange through ``fail``), ``poisoned`` is set and every later call raises
``IpcPoisoned``. Nothing ever un-poisons a channel.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final, Generic, TypeVar

import msgspec

from efold.errors import Code
from efold.ipc.errors import (
    IpcBadMessage,
    IpcBindingMismatch,
    IpcError,
    IpcLocalMisuse,
    IpcOutOfOrder,
    IpcPoisoned,
    IpcSeqMismatch,
)
from efold.ipc.framing import DEFAULT_MAX_FRAME, FrameParser, seal
from efold.ipc.messages import (
    PREP_PROTOCOL,
    PROBE_PROTOCOL,
    Admit,
    Binding,
    ChildEnvelope,
    ChildMessage,
    Consume,
    Consumed,
    ControllerEnvelope,
    ControllerMessage,
    DoneAck,
    Granted,
    Halt,
    Halted,
    Hello,
    Message,
    Prepared,
    ProtocolName,
    Ready,
    Refused,
    Settle,
    Settled,
    Stop,
    Terminal,
    Welcome,
)


class Side(enum.Enum):
    CHILD = "child"
    CONTROLLER = "controller"


class Phase(enum.Enum):
    AWAIT_HELLO = "await_hello"
    AWAIT_WELCOME = "await_welcome"
    AWAIT_READY = "await_ready"
    IDLE = "idle"
    AWAIT_PERMIT = "await_permit"
    PERMITTED = "permitted"
    AWAIT_CONSUMED = "await_consumed"
    CONSUMED = "consumed"
    AWAIT_SETTLED = "await_settled"
    AWAIT_HALTED = "await_halted"
    AWAIT_DONE_ACK = "await_done_ack"
    DONE = "done"
    STOPPED = "stopped"


_Table = Mapping[Phase, tuple[Side, Mapping[type[Message], Phase]]]

_C, _K = Side.CHILD, Side.CONTROLLER

# The permit exchanges, shared by both protocols: each leads back to IDLE.
_PERMIT_PHASES: Final[_Table] = {
    Phase.AWAIT_PERMIT: (_K, {Granted: Phase.PERMITTED, Refused: Phase.IDLE}),
    Phase.PERMITTED: (_C, {Consume: Phase.AWAIT_CONSUMED, Settle: Phase.AWAIT_SETTLED}),
    Phase.AWAIT_CONSUMED: (_K, {Consumed: Phase.CONSUMED}),
    Phase.CONSUMED: (_C, {Settle: Phase.AWAIT_SETTLED}),
    Phase.AWAIT_SETTLED: (_K, {Settled: Phase.IDLE}),
    Phase.AWAIT_HALTED: (_K, {Halted: Phase.IDLE}),
}

PROBE_TABLE: Final[_Table] = {
    Phase.AWAIT_HELLO: (_C, {Hello: Phase.AWAIT_WELCOME}),
    Phase.AWAIT_WELCOME: (_K, {Welcome: Phase.AWAIT_READY}),
    Phase.AWAIT_READY: (_C, {Ready: Phase.IDLE}),
    Phase.IDLE: (_C, {Admit: Phase.AWAIT_PERMIT, Halt: Phase.AWAIT_HALTED,
                      Terminal: Phase.AWAIT_DONE_ACK}),
    **_PERMIT_PHASES,
    Phase.AWAIT_DONE_ACK: (_K, {DoneAck: Phase.DONE}),
}

PREP_TABLE: Final[_Table] = {
    Phase.AWAIT_HELLO: (_C, {Hello: Phase.AWAIT_WELCOME}),
    Phase.AWAIT_WELCOME: (_K, {Welcome: Phase.IDLE}),
    Phase.IDLE: (_C, {Admit: Phase.AWAIT_PERMIT, Halt: Phase.AWAIT_HALTED,
                      Prepared: Phase.AWAIT_DONE_ACK}),
    **_PERMIT_PHASES,
    Phase.AWAIT_DONE_ACK: (_K, {DoneAck: Phase.DONE}),
}

TABLES: Final[Mapping[str, _Table]] = {PROBE_PROTOCOL: PROBE_TABLE, PREP_PROTOCOL: PREP_TABLE}

_ENCODER = msgspec.msgpack.Encoder()
# One decoder per direction, built on first use: each process only ever decodes its
# peer's direction, and a child pays for every decoder it builds at each launch.
_Envelope = ChildEnvelope | ControllerEnvelope
_DECODERS: dict[Side, msgspec.msgpack.Decoder[_Envelope]] = {}


def _decoder_for(peer: Side) -> msgspec.msgpack.Decoder[_Envelope]:
    decoder = _DECODERS.get(peer)
    if decoder is None:
        envelope: type[_Envelope] = ChildEnvelope if peer is Side.CHILD else ControllerEnvelope
        decoder = msgspec.msgpack.Decoder(envelope)
        _DECODERS[peer] = decoder
    return decoder


def warm_decoders() -> None:
    """Build the decoder of the controller's messages now (the fork-server template,
    so that its workers inherit it instead of each building it)."""
    _decoder_for(Side.CONTROLLER)


InMsg = TypeVar("InMsg", ChildMessage, ControllerMessage)
OutMsg = TypeVar("OutMsg", ChildMessage, ControllerMessage)


class LockstepCore(Generic[OutMsg, InMsg]):
    """One side of one channel. Build it with ``child_core`` or ``controller_core``."""

    def __init__(
        self,
        *,
        protocol: ProtocolName,
        side: Side,
        binding: Binding,
        key: bytes,
        max_frame: int = DEFAULT_MAX_FRAME,
    ) -> None:
        self.protocol = protocol
        self.side = side
        self.binding = binding
        self._table = TABLES[protocol]
        self._max_frame = max_frame
        self._key = key
        self._parser = FrameParser(key, max_frame)
        self._peer = Side.CONTROLLER if side is Side.CHILD else Side.CHILD
        self._envelope_type = ChildEnvelope if side is Side.CHILD else ControllerEnvelope
        self._binding_tuple = (binding.epoch, binding.slot, binding.worker)
        # Invariant: `seq` is the sequence number of the next frame on the channel in
        # either direction (lockstep: the sides alternate), starting at 0 with Hello.
        self.seq = 0
        self.poisoned: Code | None = None
        self._enter(Phase.AWAIT_HELLO)

    # -- state ---------------------------------------------------------------------

    def _enter(self, phase: Phase) -> None:
        """Move to ``phase`` and cache what it allows (looked up once per transition, not
        once per byte read)."""
        self.phase = phase
        entry = self._table.get(phase)
        # Invariant: `_sender` is who may send in `phase` (None once finished) and
        # `_next` maps each kind it may send to the phase that kind leads to.
        self._sender: Side | None = entry[0] if entry else None
        allowed: dict[type[Message], Phase] = dict(entry[1]) if entry else {}
        if self._sender is Side.CONTROLLER:
            allowed[Stop] = Phase.STOPPED
        self._next = allowed

    @property
    def finished(self) -> bool:
        return self.phase in (Phase.DONE, Phase.STOPPED)

    def my_turn(self) -> bool:
        return self._sender is self.side

    def fail(self, error: IpcError) -> IpcError:
        """Poison the channel with ``error`` (the first failure wins) and return it for
        the caller to raise."""
        if self.poisoned is None:
            self.poisoned = error.code
        return error

    def _check_usable(self) -> None:
        if self.poisoned is not None:
            raise IpcPoisoned(self.poisoned)

    # -- sending -------------------------------------------------------------------

    def outgoing(self, msg: OutMsg) -> bytes:
        """The frame carrying ``msg``, stamped with binding and seq; advances the phase.
        The caller must write the whole frame or report the failure through ``fail``."""
        self._check_usable()
        try:
            nxt = self._next.get(type(msg)) if self._sender is self.side else None
            if nxt is None:
                raise IpcLocalMisuse(f"{type(msg).__name__} in phase {self.phase.value}")
            b = self.binding
            envelope = self._envelope_type(
                epoch=b.epoch, slot=b.slot, worker=b.worker, seq=self.seq, msg=msg  # type: ignore[arg-type]
            )
            frame = seal(self._key, _ENCODER.encode(envelope), self._max_frame)
        except IpcError as exc:
            raise self.fail(exc) from None
        self.seq += 1
        self._enter(nxt)
        return frame

    # -- receiving -----------------------------------------------------------------

    def want(self) -> int:
        """How many bytes the shell may read next (never past the current frame)."""
        self._check_usable()
        if self._sender is self._peer:
            return self._parser.want()
        raise self.fail(IpcLocalMisuse(f"receive in phase {self.phase.value}"))

    def feed(self, data: bytes) -> InMsg | None:
        """Bytes read from the stream; the checked message once a frame is complete."""
        self._check_usable()
        try:
            body = self._parser.feed(data)
            return None if body is None else self._accept(body)
        except IpcError as exc:
            raise self.fail(exc) from None

    def end_of_stream(self) -> IpcError:
        """The stream ended: the error to raise (EOF or truncated frame), channel poisoned."""
        try:
            self._parser.end_of_stream()
        except IpcError as exc:
            return self.fail(exc)

    def _accept(self, body: bytes) -> InMsg:
        try:
            envelope = _decoder_for(self._peer).decode(body)
        # ValidationError is a DecodeError; RecursionError: a value nested too deep for
        # the decoder to skip while it looks for a message's ``kind`` tag.
        except (msgspec.DecodeError, RecursionError) as exc:
            raise IpcBadMessage(str(exc)) from None
        if (envelope.epoch, envelope.slot, envelope.worker) != self._binding_tuple:
            raise IpcBindingMismatch()
        if envelope.seq != self.seq:
            raise IpcSeqMismatch(f"expected {self.seq}, got {envelope.seq}")
        msg = envelope.msg
        nxt = self._next.get(type(msg)) if self._sender is self._peer else None
        if nxt is None:
            raise IpcOutOfOrder(f"{type(msg).__name__} in phase {self.phase.value}")
        if isinstance(msg, Hello) and msg.protocol != self.protocol:
            raise IpcBadMessage("protocol differs from the channel's")
        self.seq += 1
        self._enter(nxt)
        return msg  # type: ignore[return-value]


def child_core(
    *, protocol: ProtocolName, binding: Binding, key: bytes, max_frame: int = DEFAULT_MAX_FRAME
) -> LockstepCore[ChildMessage, ControllerMessage]:
    return LockstepCore(
        protocol=protocol, side=Side.CHILD, binding=binding, key=key, max_frame=max_frame
    )


def controller_core(
    *, protocol: ProtocolName, binding: Binding, key: bytes, max_frame: int = DEFAULT_MAX_FRAME
) -> LockstepCore[ControllerMessage, ChildMessage]:
    return LockstepCore(
        protocol=protocol, side=Side.CONTROLLER, binding=binding, key=key, max_frame=max_frame
    )
