"""``processes.durable``: the journal's unsynced commits synced off the event loop, one
fdatasync for every commit made before it started, and never a return before the sync
that covers the caller's commit."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import anyio
import pytest
from proc_harness import FAST, Run, make_assignment, welcome

from efold.controller.processes.durable import durable
from efold.controller.processes.launcher import supervise
from efold.errors import Code
from efold.registry.errors import RegistryError
from efold.registry.journal import JournalWriter
from efold.registry.lease import acquire_lease

pytestmark = pytest.mark.anyio


class _HeldSyncs:
    """``os.fdatasync`` held at a gate: each call notes the commits made when it began
    (read by the test's own thread, between the writer's commits), then waits."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, writer: JournalWriter) -> None:
        self.began: list[int] = []
        self.gate = threading.Event()
        self.entered = threading.Semaphore(0)
        real = os.fdatasync

        def fdatasync(fd: int) -> None:
            self.began.append(writer.written)
            self.entered.release()
            assert self.gate.wait(30)
            real(fd)

        monkeypatch.setattr(os, "fdatasync", fdatasync)


async def test_one_sync_covers_every_commit_made_before_it_began(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with acquire_lease(tmp_path) as lease:
        writer = JournalWriter(tmp_path, lease)
        syncs = _HeldSyncs(monkeypatch, writer)
        returned: dict[str, int] = {}  # task -> the syncs begun when it returned

        async def commit_then_wait(name: str) -> None:
            with writer.unsynced():
                writer.record_slot_status(name, "completed")
            mine = writer.written
            await durable(writer)
            returned[name] = len(syncs.began)
            assert writer.synced >= mine

        async with anyio.create_task_group() as tg:
            tg.start_soon(commit_then_wait, "a")
            await anyio.to_thread.run_sync(syncs.entered.acquire)  # a's sync has begun
            for name in ("b", "c", "d"):  # committed while a's sync is in flight
                tg.start_soon(commit_then_wait, name)
            await anyio.wait_all_tasks_blocked()
            assert returned == {}  # nobody back before its sync
            syncs.gate.set()
        # Two syncs for four commits: the first covered a, the second b, c and d.
        first_commit = writer.written - 3
        assert syncs.began == [first_commit, writer.written]
        assert returned == {"a": 1, "b": 2, "c": 2, "d": 2}
        assert writer.synced == writer.written
        await durable(writer)  # nothing waits: no sync
        assert len(syncs.began) == 2
        writer.close()


async def test_a_failed_sync_raises_for_every_waiter_and_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with acquire_lease(tmp_path) as lease:
        writer = JournalWriter(tmp_path, lease)

        def failing(fd: int) -> None:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(os, "fdatasync", failing)
        codes: list[Code] = []

        async def commit_then_wait(name: str) -> None:
            with writer.unsynced():
                writer.record_slot_status(name, "completed")
            try:
                await durable(writer)
            except RegistryError as exc:
                codes.append(exc.code)

        async with anyio.create_task_group() as tg:
            for name in ("a", "b"):
                tg.start_soon(commit_then_wait, name)
        assert codes == [Code.JOURNAL_WRITE_FAILED] * 2
        monkeypatch.undo()
        with pytest.raises(RegistryError) as info:
            writer.record_slot_status("c", "completed")
        assert info.value.code is Code.JOURNAL_WRITE_FAILED
        writer.close()


async def test_a_waiter_cancelled_during_the_sync_goes_no_further(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sync it started runs to its end (its descriptor stays in use until then), and
    then the waiter is cancelled: nothing after ``durable`` runs (a credential delivered
    after a cancelled wait, before the cancellation surfaced, was the hostile review's
    finding)."""
    with acquire_lease(tmp_path) as lease:
        writer = JournalWriter(tmp_path, lease)
        syncs = _HeldSyncs(monkeypatch, writer)
        acted: list[str] = []

        async def waiter() -> None:
            with writer.unsynced():
                writer.record_slot_status("a", "completed")
            await durable(writer)
            acted.append("a")

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await anyio.to_thread.run_sync(syncs.entered.acquire)
            tg.cancel_scope.cancel()
            syncs.gate.set()
        assert acted == [] and writer.synced == writer.written
        writer.close()


async def test_done_ack_follows_the_sync_of_every_row_deferred_before_it(
        run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    """``acknowledge_done``: the members it journals, and whatever another slot deferred
    meanwhile, are committed and synced (off the event loop) before ``DoneAck`` goes."""
    seen: list[tuple[int, int, int]] = []
    async with supervise(run.journal, make_assignment(run, kind="prep"),
                         policy=FAST) as handle:
        await handle.accept_hello(welcome(), timeout=10)
        await handle.channel.receive(timeout=10)
        with run.journal.deferred():  # another slot's exit row, waiting for a commit
            run.journal.record_meta({"another-slot": "deferred"})
        reply = handle.channel.reply

        async def watched(message: object) -> None:
            seen.append((run.journal.pending, run.journal.written, run.journal.synced))
            await reply(message)  # type: ignore[arg-type]

        monkeypatch.setattr(handle.channel, "reply", watched)
        await handle.acknowledge_done()
    await handle.close()
    ((pending, written, synced),) = seen
    assert not pending and synced == written
