"""The lockstep state machine and the framing, driven directly (no I/O)."""

from __future__ import annotations

import os

import msgspec
import pytest
from efold_test_kit import BINDING, KEY, WORKER, D, core_pair, hello

from efold.errors import Code
from efold.identity import ProcessIdentity
from efold.ipc import (
    PREP_PROTOCOL,
    PROBE_PROTOCOL,
    Admit,
    Binding,
    BudgetGrant,
    Consume,
    Consumed,
    DeadlineGrant,
    DoneAck,
    FrameParser,
    Granted,
    Halt,
    Halted,
    Hello,
    IpcBadMac,
    IpcBadMessage,
    IpcBindingMismatch,
    IpcEof,
    IpcFrameTooLarge,
    IpcLocalMisuse,
    IpcOutOfOrder,
    IpcPoisoned,
    IpcSeqMismatch,
    IpcTruncatedFrame,
    LockstepCore,
    MeterReading,
    Phase,
    Prepared,
    Ready,
    Refused,
    Settle,
    Settled,
    SettleOutcome,
    Stop,
    Terminal,
    TerminalStatus,
    UsageReport,
    Welcome,
    child_core,
    seal,
)
from efold.ipc.lockstep import PREP_TABLE, PROBE_TABLE, Side
from efold.ipc.messages import ChildEnvelope

WELCOME = Welcome(deadlines=DeadlineGrant(run_ms=1, exchange_ms=1),
                  budgets=BudgetGrant(max_requests=10, meter_calls=8, meter_bytes=1))

SAMPLES = {
    Hello: hello(),
    Ready: Ready(arrival_digest=D),
    Admit: Admit(request_id="r", round=0, payload_digest=D, rmax=1),
    Consume: Consume(permit_id="p", body_digest=D),
    Settle: Settle(permit_id="p", outcome=SettleOutcome.LOST, code=None, usage=None, tier=None,
                   cost=None),
    Terminal: Terminal(status=TerminalStatus.ANSWERED, code=None, answer="a",
                       meter=MeterReading(calls=0, bytes=0), witness=D),
    Prepared: Prepared(snapshot_digest=D, files=1, bytes=2, rejected={"symlink": 1}),
    Welcome: WELCOME,
    Granted: Granted(permit_id="p", hold=7),
    Refused: Refused(code=Code.NOT_ADMITTED_CAP),
    Consumed: Consumed(),
    Settled: Settled(),
    Halt: Halt(code=Code.LOOKUP_PAYLOAD_FORBIDDEN),
    Halted: Halted(),
    DoneAck: DoneAck(),
    Stop: Stop(code=Code.LOOKUP_STOPPED),
}


def deliver(core: LockstepCore, frame: bytes):  # type: ignore[no-untyped-def,type-arg]
    i = 0
    while True:
        n = core.want()
        msg = core.feed(frame[i : i + n])
        i += n
        if msg is not None:
            assert i == len(frame)
            return msg


def walk(child, controller, msgs):  # type: ignore[no-untyped-def]
    """Send msgs alternately as the table says, delivering each to the other side."""
    for msg in msgs:
        sender, receiver = (child, controller) if type(msg) in CHILD else (controller, child)
        got = deliver(receiver, sender.outgoing(msg))
        assert got == msg
        assert child.phase is controller.phase and child.seq == controller.seq


CHILD = {Hello, Ready, Admit, Consume, Settle, Halt, Terminal, Prepared}

PROBE_PATH = [hello(), WELCOME, SAMPLES[Ready], SAMPLES[Admit], SAMPLES[Granted],
              SAMPLES[Consume], Consumed(), SAMPLES[Settle], Settled(), SAMPLES[Admit],
              SAMPLES[Refused], SAMPLES[Admit], SAMPLES[Granted], SAMPLES[Settle], Settled(),
              SAMPLES[Halt], Halted(), SAMPLES[Terminal], DoneAck()]


def test_full_probe_exchange_reaches_done() -> None:
    child, controller = core_pair()
    walk(child, controller, PROBE_PATH)
    assert child.phase is Phase.DONE and controller.finished
    assert controller.seq == len(PROBE_PATH)


PREP_PATH = [hello(PREP_PROTOCOL), WELCOME, SAMPLES[Admit], SAMPLES[Granted],
             SAMPLES[Consume], Consumed(), SAMPLES[Settle], Settled(), SAMPLES[Admit],
             SAMPLES[Refused], SAMPLES[Admit], SAMPLES[Granted], SAMPLES[Settle], Settled(),
             SAMPLES[Halt], Halted(), SAMPLES[Prepared], DoneAck()]


def test_full_prep_exchange_reaches_done() -> None:
    child, controller = core_pair(PREP_PROTOCOL)
    walk(child, controller, [hello(PREP_PROTOCOL), WELCOME, SAMPLES[Prepared], DoneAck()])
    assert controller.phase is Phase.DONE


def test_a_prep_channel_serves_permit_exchanges_then_prepared() -> None:
    child, controller = core_pair(PREP_PROTOCOL)
    walk(child, controller, PREP_PATH)
    assert child.phase is Phase.DONE and controller.finished
    assert controller.seq == len(PREP_PATH)


@pytest.mark.parametrize("kind", [Terminal, Ready])
def test_a_prep_channel_refuses_the_probe_only_kinds(kind: type) -> None:
    child, controller = core_pair(PREP_PROTOCOL)
    walk(child, controller, PREP_PATH[:8])  # Hello ; Welcome ; one settled request
    assert child.phase is Phase.IDLE
    with pytest.raises(IpcLocalMisuse):
        child.outgoing(SAMPLES[kind])
    with pytest.raises(IpcOutOfOrder):
        deliver(controller, _forge(Side.CHILD, SAMPLES[kind], controller.seq))
    with pytest.raises(IpcPoisoned):
        controller.want()


def test_a_prep_child_may_not_prepare_with_a_permit_open() -> None:
    child, controller = core_pair(PREP_PROTOCOL)
    walk(child, controller, PREP_PATH[:4])  # ... Admit ; Granted
    assert child.phase is Phase.PERMITTED
    with pytest.raises(IpcOutOfOrder):
        deliver(controller, _forge(Side.CHILD, SAMPLES[Prepared], controller.seq))


def _reach(protocol: str, phase: Phase):  # type: ignore[no-untyped-def]
    """A (child, controller) pair driven along a legal path into ``phase``."""
    table = PROBE_TABLE if protocol == PROBE_PROTOCOL else PREP_TABLE
    child, controller = core_pair(protocol)
    path = PROBE_PATH if protocol == PROBE_PROTOCOL else PREP_PATH
    for msg in path:
        if child.phase is phase:
            return child, controller
        walk(child, controller, [msg])
    assert child.phase is phase, (phase, table)
    return child, controller


@pytest.mark.parametrize("protocol", [PROBE_PROTOCOL, PREP_PROTOCOL])
def test_every_kind_in_every_phase_is_allowed_exactly_as_the_table_says(protocol: str) -> None:
    table = PROBE_TABLE if protocol == PROBE_PROTOCOL else PREP_TABLE
    for phase, (sender, allowed) in table.items():
        for kind, sample in SAMPLES.items():
            if kind is Hello:
                sample = hello(protocol)
            child, controller = _reach(protocol, phase)
            kind_side = Side.CHILD if kind in CHILD else Side.CONTROLLER
            src, dst = (child, controller) if kind_side is Side.CHILD else (controller, child)
            legal = sender is kind_side and (kind in allowed or (kind is Stop and sender is Side.CONTROLLER))
            if kind_side is not sender:
                # Not this side's turn: a local bug, refused before anything is written.
                with pytest.raises(IpcLocalMisuse):
                    src.outgoing(sample)
                continue
            if legal:
                deliver(dst, src.outgoing(sample))
                continue
            with pytest.raises(IpcLocalMisuse):
                src.outgoing(sample)
            # The same kind forged onto the wire is the peer's out-of-order violation.
            forged = _forge(kind_side, sample, dst.seq)
            with pytest.raises(IpcOutOfOrder):
                deliver(dst, forged)
            with pytest.raises(IpcPoisoned) as info:
                dst.want()
            assert info.value.cause is Code.IPC_OUT_OF_ORDER


def _forge(side: Side, msg, seq: int, binding: Binding = BINDING, key: bytes = KEY) -> bytes:  # type: ignore[no-untyped-def]
    from efold.ipc.messages import ControllerEnvelope

    env_type = ChildEnvelope if side is Side.CHILD else ControllerEnvelope
    env = env_type(epoch=binding.epoch, slot=binding.slot, worker=binding.worker, seq=seq, msg=msg)
    return seal(key, msgspec.msgpack.encode(env))


@pytest.mark.parametrize(
    "binding",
    [
        Binding(epoch=4, slot="s0007", worker=WORKER),
        Binding(epoch=3, slot="s0008", worker=WORKER),
        Binding(epoch=3, slot="s0007", worker=ProcessIdentity(pid=4243, start_time=777, boot_id="boot-a")),
        Binding(epoch=3, slot="s0007", worker=ProcessIdentity(pid=4242, start_time=778, boot_id="boot-a")),
        Binding(epoch=3, slot="s0007", worker=ProcessIdentity(pid=4242, start_time=777, boot_id="boot-b")),
    ],
)
def test_binding_mismatch_poisons(binding: Binding) -> None:
    _, controller = core_pair()
    with pytest.raises(IpcBindingMismatch):
        deliver(controller, _forge(Side.CHILD, hello(), 0, binding))
    with pytest.raises(IpcPoisoned):
        controller.outgoing(WELCOME)


@pytest.mark.parametrize("seq", [0, 1, 4, -1, 2**40])
def test_replayed_or_skipped_seq_poisons(seq: int) -> None:
    child, controller = core_pair()
    walk(child, controller, [hello(), WELCOME])  # next seq is 2
    with pytest.raises(IpcSeqMismatch):
        deliver(controller, _forge(Side.CHILD, SAMPLES[Ready], seq))
    with pytest.raises(IpcPoisoned) as info:
        controller.want()
    assert info.value.cause is Code.IPC_SEQ_MISMATCH


def test_a_replayed_genuine_frame_is_refused_by_seq() -> None:
    child, controller = core_pair()
    frame = child.outgoing(hello())
    deliver(controller, frame)
    deliver(child, controller.outgoing(WELCOME))
    child.outgoing(SAMPLES[Ready])  # the real next frame; the wire carries the replay instead
    with pytest.raises(IpcSeqMismatch):
        deliver(controller, frame)


def test_wrong_protocol_in_hello_is_a_bad_message() -> None:
    _, controller = core_pair()
    with pytest.raises(IpcBadMessage):
        deliver(controller, _forge(Side.CHILD, hello(PREP_PROTOCOL), 0))


def test_bad_mac_and_wrong_key() -> None:
    child, controller = core_pair()
    frame = bytearray(child.outgoing(hello()))
    frame[-1] ^= 1
    with pytest.raises(IpcBadMac):
        deliver(controller, bytes(frame))
    _, controller2 = core_pair()
    with pytest.raises(IpcBadMac):
        deliver(controller2, _forge(Side.CHILD, hello(), 0, key=os.urandom(32)))


def test_frame_too_large_is_refused_from_the_header_alone() -> None:
    parser = FrameParser(KEY, max_frame=1024)
    with pytest.raises(IpcFrameTooLarge):
        parser.feed((1025).to_bytes(4, "big"))
    ok = FrameParser(KEY, max_frame=1024)
    ok.feed((1024).to_bytes(4, "big"))
    assert ok.want() == 1024 + 32


def test_outgoing_frame_above_the_maximum_is_refused_and_poisons() -> None:
    core = child_core(protocol=PROBE_PROTOCOL, binding=BINDING, key=KEY, max_frame=64)
    with pytest.raises(IpcFrameTooLarge):
        core.outgoing(hello())
    assert core.poisoned is Code.IPC_FRAME_TOO_LARGE


def test_eof_at_boundary_and_inside_a_frame() -> None:
    _, controller = core_pair()
    assert isinstance(controller.end_of_stream(), IpcEof)
    child, controller = core_pair()
    frame = child.outgoing(hello())
    controller.feed(frame[:4])
    controller.feed(frame[4:10])
    assert isinstance(controller.end_of_stream(), IpcTruncatedFrame)
    with pytest.raises(IpcPoisoned):
        controller.feed(b"")


def test_stop_is_final() -> None:
    child, controller = core_pair()
    walk(child, controller, [hello(), WELCOME, SAMPLES[Ready], SAMPLES[Admit],
                             Stop(code=Code.LOOKUP_STOPPED)])
    assert child.phase is Phase.STOPPED and child.finished
    with pytest.raises(IpcLocalMisuse):
        child.outgoing(SAMPLES[Admit])
    with pytest.raises(IpcLocalMisuse):
        controller.want()


def test_strict_decoding_refuses_unknown_fields_and_coercion() -> None:
    _, controller = core_pair()
    env = {"epoch": 3, "slot": "s0007", "worker": msgspec.to_builtins(WORKER), "seq": 0,
           "msg": {**msgspec.to_builtins(hello()), "extra": 1}}
    with pytest.raises(IpcBadMessage):
        deliver(controller, seal(KEY, msgspec.msgpack.encode(env)))
    _, controller = core_pair()
    env["msg"] = {**msgspec.to_builtins(hello()), "registration_digest": "XYZ"}
    with pytest.raises(IpcBadMessage):
        deliver(controller, seal(KEY, msgspec.msgpack.encode(env)))
    _, controller = core_pair()
    env["msg"] = msgspec.to_builtins(hello())
    env["epoch"] = "3"  # a string where an int belongs: never coerced
    with pytest.raises(IpcBadMessage):
        deliver(controller, seal(KEY, msgspec.msgpack.encode(env)))


def test_usage_absence_survives_the_wire() -> None:
    child, controller = core_pair()
    walk(child, controller, [hello(), WELCOME, SAMPLES[Ready], SAMPLES[Admit], SAMPLES[Granted]])
    settle = Settle(permit_id="p", outcome=SettleOutcome.SETTLED, code=None,
                    usage=UsageReport(input=5, output=0), tier=None, cost=None)
    got = deliver(controller, child.outgoing(settle))
    assert got.usage.present() == {"input": 5, "output": 0}
    assert got.usage.cache_read is None  # absent, not zero
