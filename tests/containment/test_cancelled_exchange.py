"""A cancelled (or timed-out) exchange poisons the channel and leads to containment of
that worker."""

from __future__ import annotations

import signal

import anyio
import pytest
from proc_harness import FAST, Run, alive, make_assignment, program, welcome

from efold.controller.processes.launcher import supervise
from efold.errors import Code
from efold.ipc import IpcPoisoned, IpcTimeout
from efold.registry.journal import JournalReader

pytestmark = pytest.mark.anyio


def _episodes(run: Run) -> list[dict]:  # type: ignore[type-arg]
    with JournalReader(run.run_dir) as reader:
        return reader.rows("containments")


async def test_a_cancelled_receive_poisons_and_the_worker_is_contained(run: Run) -> None:
    assignment = make_assignment(run, kind="prep")
    async with supervise(run.journal, assignment, policy=FAST,
                         program=program("body_child.py", "hang")) as handle:
        await handle.accept_hello(welcome(), timeout=10)
        with anyio.move_on_after(0.2) as scope:
            await handle.channel.receive()  # the body hangs: the exchange is cancelled
        assert scope.cancelled_caught
        assert handle.channel.failure is Code.IPC_CANCELLED
        with pytest.raises(IpcPoisoned):
            await handle.channel.receive(timeout=1)
        assert alive(handle.identity.pid, handle.identity.start_time)
    exit_ = await handle.close()
    assert exit_.containment is not None and exit_.containment.cause is Code.IPC_CANCELLED
    assert exit_.status == -signal.SIGTERM
    assert [(e["cause"], e["result"]) for e in _episodes(run)] == [("ipc_cancelled", "contained")]


async def test_a_cancellation_escaping_the_block_contains_the_worker(run: Run) -> None:
    assignment = make_assignment(run, kind="prep")
    with anyio.move_on_after(0.5):
        async with supervise(run.journal, assignment, policy=FAST,
                             program=program("body_child.py", "hang")) as handle:
            await handle.accept_hello(welcome(), timeout=10)
            await handle.channel.receive()
    assert handle.containment is not None and handle.containment.cause is Code.IPC_CANCELLED
    assert not alive(handle.identity.pid, handle.identity.start_time)
    assert [e["cause"] for e in _episodes(run)] == ["ipc_cancelled"]


async def test_an_exchange_deadline_is_ipc_timeout_and_contained(run: Run) -> None:
    assignment = make_assignment(run, kind="prep")
    with pytest.raises(IpcTimeout):
        async with supervise(run.journal, assignment, policy=FAST,
                             program=program("body_child.py", "hang")) as handle:
            await handle.accept_hello(welcome(), timeout=10)
            await handle.channel.receive(timeout=0.2)
    assert handle.containment is not None and handle.containment.cause is Code.IPC_TIMEOUT
    assert not alive(handle.identity.pid, handle.identity.start_time)
