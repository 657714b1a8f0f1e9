"""The prep and probe children end to end through the launcher, the probe session's
exchanges, and the child's lean imports."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import msgspec
import pytest
from proc_harness import DIGEST, FAST, Run, make_assignment, program, welcome

from efold.controller.errors import ControllerError
from efold.controller.processes.launcher import launch_worker, supervise
from efold.errors import Code
from efold.ipc import (
    Admit,
    Consume,
    Consumed,
    Granted,
    Prepared,
    Refused,
    Settle,
    Settled,
    SettleOutcome,
    Stop,
    Terminal,
    TerminalStatus,
)
from efold.protocol.assignment import SnapshotRef
from efold.registry.errors import RegistryError
from efold.registry.journal import JournalReader, JournalWriter
from efold.worker.builtin import BUILTIN_ANSWER, RESTORED_FILE, SNAPSHOT_FILE

pytestmark = pytest.mark.anyio


async def prepare(run: Run) -> tuple[SnapshotRef, Prepared]:
    a = make_assignment(run, kind="prep")
    async with supervise(run.journal, a, policy=FAST) as handle:
        await handle.accept_hello(welcome(), timeout=10)
        prepared = await handle.channel.receive(timeout=10)
        assert isinstance(prepared, Prepared)
        await handle.acknowledge_done()
    exit_ = await handle.close()
    assert exit_.status == 0 and exit_.containment is None
    path = os.path.join(a.slot_dir, SNAPSHOT_FILE)
    return SnapshotRef(path=path, digest=prepared.snapshot_digest), prepared


async def test_prep_then_probe_end_to_end(run: Run) -> None:
    snapshot, prepared = await prepare(run)
    with open(snapshot.path, "rb") as f:
        data = f.read()
    assert hashlib.sha256(data).hexdigest() == snapshot.digest
    assert (prepared.files, prepared.bytes, prepared.rejected) == (1, len(data), {})

    a = make_assignment(run, kind="probe", slot="s0002", snapshot=snapshot)
    async with supervise(run.journal, a, policy=FAST) as handle:
        await handle.accept_hello(welcome(), timeout=10)
        ready = await handle.accept_ready(timeout=10)
        terminal = await handle.channel.receive(timeout=10)
        assert isinstance(terminal, Terminal)
        await handle.acknowledge_done()
    exit_ = await handle.close()
    assert exit_.status == 0 and exit_.code is None and exit_.containment is None
    assert ready.arrival_digest == snapshot.digest
    assert terminal.status is TerminalStatus.ANSWERED and terminal.answer == BUILTIN_ANSWER
    assert terminal.witness == hashlib.sha256(
        b"efold-builtin-witness-v1\0" + snapshot.digest.encode()).hexdigest()
    with open(os.path.join(a.slot_dir, RESTORED_FILE), "rb") as f:
        assert f.read() == data  # restored into its own slot directory
    with JournalReader(run.run_dir) as reader:
        launches = reader.rows("launches")
        members = reader.rows("members")
        assert reader.rows("containments") == [] and reader.rows("signals") == []
    assert [(row["kind"], row["exit_status"]) for row in launches] == [("prep", 0), ("probe", 0)]
    for row in launches:
        assert row["pgid"] == row["pid"]  # its own session and group
        # Identity journaled before any message was read, membership before DoneAck.
        (leader,) = [m for m in members if m["launch_id"] == row["launch_id"]]
        assert leader["role"] == "leader" and leader["pid"] == row["pid"]
        assert row["launched_ns"] < leader["recorded_ns"] < row["exited_ns"]


async def test_the_identity_is_journaled_before_any_message_is_read(run: Run) -> None:
    from efold.controller.processes.proctable import read_entry

    a = make_assignment(run, kind="prep")
    handle = await launch_worker(run.journal, a)
    # No receive yet (the child's Hello may already sit in the socket, unread).
    with JournalReader(run.run_dir) as reader:
        (row,) = reader.rows("launches")
    entry = read_entry(handle.identity.pid)
    assert entry is not None
    assert (row["pid"], row["start_time"], row["boot_id"], row["pgid"]) == (
        handle.identity.pid, entry.start_time, handle.identity.boot_id, entry.pgid)
    assert row["pgid"] == row["pid"] and row["kind"] == "prep" and row["epoch"] == run.epoch
    assert handle.channel.phase.value == "await_hello"  # nothing accepted so far
    await handle.accept_hello(welcome(), timeout=10)
    await handle.channel.receive(timeout=10)
    await handle.acknowledge_done()
    assert (await handle.close()).status == 0


async def test_the_probe_session_exchanges(run: Run) -> None:
    snapshot, _ = await prepare(run)
    a = make_assignment(run, kind="probe", slot="s0003", snapshot=snapshot)
    handle = await launch_worker(run.journal, a, program=program("body_child.py", "session"))
    await handle.accept_hello(welcome(), timeout=10)
    await handle.accept_ready(timeout=10)
    ch = handle.channel
    admit = await ch.receive(timeout=10)
    assert admit == Admit(request_id="r1", round=0, payload_digest=DIGEST, rmax=5)
    await ch.reply(Granted(permit_id="p-1", hold=5))
    consume = await ch.receive(timeout=10)
    assert consume == Consume(permit_id="p-1", body_digest=DIGEST)
    await ch.reply(Consumed())
    settle = await ch.receive(timeout=10)
    assert isinstance(settle, Settle) and settle.outcome is SettleOutcome.SETTLED
    assert settle.usage is not None and settle.usage.present() == {"input": 3, "output": 1}
    assert (settle.tier, settle.cost, settle.code) == ("default", 2, None)
    await ch.reply(Settled())
    assert isinstance(await ch.receive(timeout=10), Admit)
    await ch.reply(Refused(code=Code.NOT_ADMITTED_CAP))
    assert isinstance(await ch.receive(timeout=10), Admit)
    await ch.reply(Stop(code=Code.LOOKUP_STOPPED))
    assert ch.finished
    exit_ = await handle.close(policy=FAST)
    assert exit_.code is Code.WORKER_STOPPED and exit_.containment is None


async def test_a_hello_that_differs_from_the_assignment_is_stopped(run: Run) -> None:
    a = make_assignment(run, kind="prep")
    handle = await launch_worker(run.journal, a)
    # The controller expects another build than the child was told about.
    handle.assignment = msgspec.structs.replace(a, build_digest="e" * 64)
    with pytest.raises(ControllerError) as info:
        await handle.accept_hello(welcome(), timeout=10)
    assert info.value.code is Code.WORKER_DIGEST_MISMATCH
    exit_ = await handle.close(policy=FAST)
    assert exit_.code is Code.WORKER_STOPPED and exit_.containment is None


async def test_an_arrival_digest_that_differs_is_refused_and_contained(run: Run) -> None:
    snapshot, _ = await prepare(run)
    a = make_assignment(run, kind="probe", slot="s0004", snapshot=snapshot)
    with pytest.raises(ControllerError) as info:
        async with supervise(run.journal, a, policy=FAST) as handle:
            await handle.accept_hello(welcome(), timeout=10)
            handle.assignment = msgspec.structs.replace(
                a, snapshot=SnapshotRef(path=snapshot.path, digest="0" * 64))
            await handle.accept_ready(timeout=10)
    assert info.value.code is Code.WORKER_SNAPSHOT_INVALID
    assert handle.containment is not None
    assert handle.containment.cause is Code.WORKER_SNAPSHOT_INVALID


def test_the_child_imports_nothing_heavy() -> None:
    heavy = ["anyio", "trio", "httpx", "rich", "click", "psutil", "cryptography", "sqlite3"]
    code = (
        "import sys\n"
        "import efold.worker.entry, efold.worker.builtin, efold.ipc\n"
        f"print([m for m in {heavy!r} if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def _our_children() -> set[int]:
    from efold.controller.processes.proctable import scan

    return {e.pid for e in scan().values() if e.ppid == os.getpid()}


async def test_a_program_that_cannot_start_is_launch_failed(run: Run) -> None:
    with pytest.raises(ControllerError) as info:
        await launch_worker(run.journal, make_assignment(run), program=["/nonexistent/python"])
    assert info.value.code is Code.LAUNCH_FAILED
    with JournalReader(run.run_dir) as reader:
        assert reader.rows("launches") == []


async def test_a_launch_that_cannot_be_journaled_leaves_no_child(run: Run) -> None:
    import sqlite3

    from efold.controller.processes.subreaper import DIRECT_CHILDREN

    before_children, before_direct = _our_children(), DIRECT_CHILDREN.pids()
    assignment = make_assignment(run)
    run.journal.close()  # every write now fails
    with pytest.raises(RegistryError) as err:
        await launch_worker(run.journal, assignment)
    assert err.value.code is Code.JOURNAL_WRITE_FAILED
    assert isinstance(err.value.__cause__, sqlite3.Error)
    assert DIRECT_CHILDREN.pids() == before_direct
    assert _our_children() <= before_children  # killed and reaped: not even a zombie
    run.journal = JournalWriter(run.run_dir, run.lease)  # for the fixture's teardown
