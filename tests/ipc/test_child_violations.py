"""Every channel violation, provoked by a real child process: the controller raises the
named error with its fixed code, the channel is poisoned for good, and the worker is
contained (the episode journaled with that code as its cause)."""

from __future__ import annotations

import pytest
from proc_harness import FAST, Run, make_assignment, program, welcome

from efold.controller.processes.launcher import supervise
from efold.errors import Code
from efold.ipc import (
    IpcBadMac,
    IpcBadMessage,
    IpcBindingMismatch,
    IpcEof,
    IpcError,
    IpcFrameTooLarge,
    IpcOutOfOrder,
    IpcPoisoned,
    IpcSeqMismatch,
    IpcTruncatedFrame,
)
from efold.registry.journal import JournalReader

pytestmark = pytest.mark.anyio

BEFORE_HELLO = [
    ("eof", IpcEof),
    ("truncated", IpcTruncatedFrame),
    ("too_large", IpcFrameTooLarge),
    ("bad_mac", IpcBadMac),
    ("bad_message", IpcBadMessage),
    ("binding_epoch", IpcBindingMismatch),
    ("binding_slot", IpcBindingMismatch),
    ("binding_worker", IpcBindingMismatch),
    ("out_of_order", IpcOutOfOrder),
    ("seq_skip", IpcSeqMismatch),
]
AFTER_HELLO = [
    ("seq_replay", IpcSeqMismatch),
    ("replay_frame", IpcSeqMismatch),
    ("consume_without_permit", IpcOutOfOrder),  # after a legitimate Ready
]


async def _provoke(run: Run, mode: str, error: type[IpcError], *, after_hello: bool) -> None:
    assignment = make_assignment(run, kind="probe")
    raised: IpcError | None = None
    with pytest.raises(error) as info:
        async with supervise(run.journal, assignment, policy=FAST,
                             program=program("rogue_child.py", mode)) as handle:
            if after_hello:
                await handle.accept_hello(welcome(), timeout=10)
            if mode == "consume_without_permit":
                await handle.channel.receive(timeout=10)  # Ready: the child's turn again
            try:
                await handle.channel.receive(timeout=10)
            except IpcError as exc:
                raised = exc
                # Poisoned for good: every later call refuses with the first cause.
                with pytest.raises(IpcPoisoned) as again:
                    await handle.channel.receive(timeout=1)
                assert again.value.cause is exc.code
                raise
    assert raised is info.value
    code = info.value.code
    assert handle.containment is not None
    assert handle.containment.cause is code
    with JournalReader(run.run_dir) as reader:
        episodes = reader.rows("containments", "launch_id = ?", (handle.launch_id,))
        (launch,) = reader.rows("launches", "launch_id = ?", (handle.launch_id,))
    assert [e["cause"] for e in episodes] == [code.value]
    assert episodes[0]["result"] == "contained"
    assert launch["exited_ns"] is not None  # reaped, exit journaled


@pytest.mark.parametrize(("mode", "error"), BEFORE_HELLO)
async def test_violation_before_hello(run: Run, mode: str, error: type[IpcError]) -> None:
    await _provoke(run, mode, error, after_hello=False)


@pytest.mark.parametrize(("mode", "error"), AFTER_HELLO)
async def test_violation_after_hello(run: Run, mode: str, error: type[IpcError]) -> None:
    await _provoke(run, mode, error, after_hello=True)


def test_every_named_code_is_covered() -> None:
    covered = {e.CODE for _, e in BEFORE_HELLO + AFTER_HELLO}
    assert covered >= {
        Code.IPC_EOF, Code.IPC_TRUNCATED_FRAME, Code.IPC_FRAME_TOO_LARGE, Code.IPC_BAD_MAC,
        Code.IPC_BAD_MESSAGE, Code.IPC_BINDING_MISMATCH, Code.IPC_SEQ_MISMATCH,
        Code.IPC_OUT_OF_ORDER,
    }
