"""The run journal: single writer under the lease, committed-before-return, read-only
readers in other processes, and the hold state machine."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from efold.errors import Code
from efold.identity import ProcessIdentity, current_identity
from efold.registry.errors import RegistryError
from efold.registry.journal import (
    CREATING_NAME,
    HOLD_ACTIVE,
    HOLD_CONSUMED,
    HOLD_LOST,
    HOLD_SETTLED,
    JOURNAL_NAME,
    SCHEMA_VERSION,
    JournalReader,
    JournalWriter,
)
from efold.registry.lease import acquire_lease


def _code_of(call: object) -> Code:
    with pytest.raises(RegistryError) as info:
        call()  # type: ignore[operator]
    return info.value.code


def _hold(writer: JournalWriter, permit_id: str, units: int = 100) -> None:
    writer.record_hold(permit_id=permit_id, epoch=1, slot="s0001", request_id="r1",
                       round=1, payload_digest="d" * 64, hold_units=units)


def test_writer_creates_a_private_wal_journal_with_full_sync(run_dir: Path) -> None:
    with acquire_lease(run_dir) as lease:
        writer = JournalWriter(run_dir, lease)
        conn = writer._conn
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        # SQLite commits unsynced; the writer fdatasyncs the WAL after every commit.
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
        # The schema was committed and synced before the writer opened the journal.
        assert writer.written == writer.synced == 0
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert tables - {"sqlite_sequence"} == {
            "meta", "epochs", "launches", "containments", "members", "signals", "holds",
            "stops", "slot_status", "receipts", "assignments"}
        writer.close()
    assert stat.S_IMODE(os.stat(run_dir / JOURNAL_NAME).st_mode) == 0o600
    with JournalReader(run_dir) as reader:
        assert reader.rows("meta") == [{"key": "schema_version", "value": str(SCHEMA_VERSION)}]


class _Syncs:
    """``os.fdatasync`` as the journal calls it: each call's file (the real call made),
    or an injected failure."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, fail: bool = False) -> None:
        self.files: list[tuple[int, int]] = []
        real = os.fdatasync

        def fdatasync(fd: int) -> None:
            st = os.fstat(fd)
            self.files.append((st.st_dev, st.st_ino))
            if fail:
                raise OSError(5, "Input/output error")
            real(fd)

        monkeypatch.setattr(os, "fdatasync", fdatasync)


def _wal(run_dir: Path) -> tuple[int, int]:
    st = os.stat(run_dir / (JOURNAL_NAME + "-wal"))
    return st.st_dev, st.st_ino


def test_each_commit_syncs_the_wal_and_an_unsynced_one_waits_for_its_sync(
        run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with acquire_lease(run_dir) as lease:
        writer = JournalWriter(run_dir, lease)
        syncs = _Syncs(monkeypatch)
        writer.record_slot_status("a", "completed")
        assert syncs.files == [_wal(run_dir)] and writer.written == writer.synced
        with writer.unsynced():
            writer.record_slot_status("b", "completed")
            writer.record_slot_status("c", "completed")
        assert len(syncs.files) == 1 and writer.synced == writer.written - 2
        with JournalReader(run_dir) as reader:  # committed: every reader sees them
            assert [r["slot"] for r in reader.rows("slot_status")] == ["a", "b", "c"]
        writer.sync()  # one fdatasync for both
        assert syncs.files == [_wal(run_dir)] * 2 and writer.synced == writer.written
        writer.sync()  # nothing waits: no call
        assert len(syncs.files) == 2
        with writer.unsynced():
            writer.record_slot_status("d", "completed")
        writer.record_slot_status("e", "completed")  # a synced commit covers those before
        assert len(syncs.files) == 3 and writer.synced == writer.written
        writer.close()


def test_a_stop_and_a_block_that_raises_are_synced_at_once_inside_unsynced(
        run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with acquire_lease(run_dir) as lease:
        writer = JournalWriter(run_dir, lease)
        syncs = _Syncs(monkeypatch)
        with writer.unsynced():
            writer.record_stop(epoch=1, code="lookup_stopped", slot=None, sticky=True)
            assert writer.synced == writer.written and len(syncs.files) == 1
        with pytest.raises(ValueError), writer.unsynced():
            writer.record_slot_status("x", "completed")
            raise ValueError("a violation")
        assert writer.synced == writer.written and len(syncs.files) == 2
        with writer.unsynced(), writer.batched():  # a stop inside a batch: at its commit
            writer.record_slot_status("y", "completed")
            writer.record_stop(epoch=1, code="lookup_stopped", slot="y", sticky=False)
        assert writer.synced == writer.written and len(syncs.files) == 3
        with writer.unsynced(), pytest.raises(RuntimeError, match="does not nest"):
            with writer.unsynced():
                pass
        writer.close()


def test_a_failed_sync_refuses_every_later_commit(run_dir: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    with acquire_lease(run_dir) as lease:
        writer = JournalWriter(run_dir, lease)
        with writer.unsynced():
            writer.record_slot_status("a", "completed")
        _Syncs(monkeypatch, fail=True)
        assert _code_of(writer.sync) is Code.JOURNAL_WRITE_FAILED
        assert writer.synced < writer.written
        monkeypatch.undo()  # the disk answers again: the journal's state is still unknown
        assert _code_of(lambda: writer.record_slot_status("b", "completed")) \
            is Code.JOURNAL_WRITE_FAILED
        assert _code_of(writer.sync) is Code.JOURNAL_WRITE_FAILED
        writer.close()


def test_a_crash_keeps_an_unsynced_commit(run_dir: Path) -> None:
    """A writer killed (os._exit) after an unsynced commit: the row is in the journal
    (the page cache holds it; only a power loss could take it, and nothing acted on it
    before its sync)."""
    code = textwrap.dedent("""
        import os, sys
        from efold.registry.journal import JournalWriter
        from efold.registry.lease import acquire_lease
        lease = acquire_lease(sys.argv[1])
        writer = JournalWriter(sys.argv[1], lease)
        with writer.unsynced():
            writer.record_slot_status("kept", "completed")
        assert writer.synced < writer.written
        os._exit(0)
    """)
    subprocess.run([sys.executable, "-c", code, str(run_dir)], check=True)
    with JournalReader(run_dir) as reader:
        assert [r["slot"] for r in reader.rows("slot_status")] == ["kept"]


def test_only_the_lease_holder_writes(run_dir: Path) -> None:
    lease = acquire_lease(run_dir)
    writer = JournalWriter(run_dir, lease)
    writer.record_epoch(current_identity())
    lease.release()
    # A writer whose lease is gone appends nothing, and none can be opened.
    assert _code_of(lambda: writer.record_epoch(current_identity())) is Code.LEASE_NOT_HELD
    assert _code_of(lambda: JournalWriter(run_dir, lease)) is Code.LEASE_NOT_HELD
    writer.close()
    with JournalReader(run_dir) as reader:
        assert len(reader.rows("epochs")) == 1


def test_reader_is_read_only(run_dir: Path) -> None:
    with acquire_lease(run_dir) as lease:
        JournalWriter(run_dir, lease).close()
    with JournalReader(run_dir) as reader, pytest.raises(sqlite3.OperationalError):
        reader._conn.execute("INSERT INTO stops (epoch, code, sticky, recorded_ns)"
                             " VALUES (1, 'x', 0, 0)")
    with JournalReader(run_dir) as reader, pytest.raises(ValueError):
        reader.rows("holds; DROP TABLE holds")


def test_missing_or_foreign_journal_is_refused(run_dir: Path, tmp_path: Path) -> None:
    assert _code_of(lambda: JournalReader(run_dir)) is Code.JOURNAL_INVALID
    with acquire_lease(run_dir) as lease:
        JournalWriter(run_dir, lease).close()
    conn = sqlite3.connect(run_dir / JOURNAL_NAME)
    conn.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    assert _code_of(lambda: JournalReader(run_dir)) is Code.JOURNAL_INVALID
    other = tmp_path / "other"
    other.mkdir()
    (other / JOURNAL_NAME).write_bytes(b"not a database at all, just bytes" * 10)
    assert _code_of(lambda: JournalReader(other)) is Code.JOURNAL_INVALID


def test_epochs_launches_containment_members_signals(run_dir: Path) -> None:
    with acquire_lease(run_dir) as lease:
        writer = JournalWriter(run_dir, lease)
        me = current_identity()
        assert writer.record_epoch(me) == 1
        assert writer.record_epoch(me) == 2
        child = ProcessIdentity(pid=4242, start_time=99, boot_id=me.boot_id)
        launch = writer.record_launch(epoch=2, slot="s0001", kind="probe", identity=child,
                                      pgid=4242)
        containment = writer.record_containment_start(launch, "worker_timeout")
        ids = writer.record_members(launch_id=launch, containment_id=containment,
                                    members=[(child, 4242, "leader"), (child, 4242, "desc")])
        assert len(ids) == 2 and ids[0] < ids[1]
        writer.record_signal(launch_id=launch, containment_id=containment, pid=4242,
                             signal=15, via="pidfd")
        writer.record_containment_end(containment, "contained")
        writer.record_exit(launch, -9)
        writer.close()
    with JournalReader(run_dir) as reader:
        assert [e["epoch"] for e in reader.rows("epochs")] == [1, 2]
        (row,) = reader.rows("launches")
        assert (row["pid"], row["start_time"], row["pgid"], row["exit_status"]) == \
            (4242, 99, 4242, -9)
        assert reader.rows("containments")[0]["result"] == "contained"
        assert [m["role"] for m in reader.rows("members")] == ["leader", "desc"]
        assert reader.rows("signals")[0]["via"] == "pidfd"


def test_hold_state_machine(run_dir: Path) -> None:
    with acquire_lease(run_dir) as lease:
        writer = JournalWriter(run_dir, lease)
        _hold(writer, "p1")
        assert writer.hold("p1")["state"] == HOLD_ACTIVE  # type: ignore[index]
        writer.record_consumption("p1", "b" * 64)
        assert _code_of(lambda: writer.record_consumption("p1", "b" * 64)) \
            is Code.JOURNAL_INVALID
        writer.record_settlement(permit_id="p1", state=HOLD_SETTLED, outcome="settled",
                                 code=None, settled_units=40, partial_units=None,
                                 usage={"output": 5, "input": 10}, tier="default")
        assert _code_of(lambda: writer.record_settlement(
            permit_id="p1", state=HOLD_LOST, outcome="lost", code=None, settled_units=None,
            partial_units=None, usage=None, tier=None)) is Code.JOURNAL_INVALID
        # An admitted request may fail before consumption: the hold is kept as lost.
        _hold(writer, "p2")
        writer.record_settlement(permit_id="p2", state=HOLD_LOST, outcome="lost",
                                 code="lookup_stream_lost", settled_units=None,
                                 partial_units=None, usage=None, tier=None)
        with pytest.raises(ValueError):
            writer.record_settlement(permit_id="p3", state=HOLD_CONSUMED, outcome="x",
                                     code=None, settled_units=None, partial_units=None,
                                     usage=None, tier=None)
        assert _code_of(lambda: writer.record_consumption("unknown", "b" * 64)) \
            is Code.JOURNAL_INVALID
        with pytest.raises(RegistryError) as reused:
            _hold(writer, "p1")  # a permit id is never reused
        assert reused.value.code is Code.JOURNAL_WRITE_FAILED
        assert isinstance(reused.value.__cause__, sqlite3.IntegrityError)
        writer.close()
    with JournalReader(run_dir) as reader:
        p1 = reader.hold("p1")
        assert p1 is not None
        assert (p1["state"], p1["settled_units"], p1["usage"]) == \
            (HOLD_SETTLED, 40, '{"input": 10, "output": 5}')
        assert reader.hold("p2")["state"] == HOLD_LOST  # type: ignore[index]
        assert reader.hold("nope") is None


def test_stops_receipts_and_slot_status(run_dir: Path) -> None:
    with acquire_lease(run_dir) as lease:
        writer = JournalWriter(run_dir, lease)
        writer.record_stop(epoch=1, code="lookup_repeated_loss", slot="s1", sticky=False)
        assert writer.sticky_stop() is None
        writer.record_stop(epoch=1, code="lookup_invalid_usage", slot="s1", sticky=True)
        writer.record_stop(epoch=1, code="unreconciled_containment", slot=None, sticky=True)
        assert writer.sticky_stop() == "unreconciled_containment"  # outranks every cause
        writer.record_receipt("s1", "r" * 64, b"{}")
        assert _code_of(lambda: writer.record_receipt("s1", "q" * 64, b"{}")) \
            is Code.RECEIPT_DUPLICATE
        writer.record_slot_status("s1", "incomplete", "lookup_stream_lost")
        writer.record_slot_status("s1", "completed")
        writer.close()
    with JournalReader(run_dir) as reader:
        assert reader.rows("receipts")[0]["digest"] == "r" * 64
        (status,) = reader.rows("slot_status")
        assert (status["status"], status["code"]) == ("completed", None)


def test_a_record_is_durable_when_the_call_returns(run_dir: Path) -> None:
    # The writer is SIGKILLed the instant record_hold returns; another process then
    # finds the hold. (Committed-before-return is what lets a permit follow a hold.)
    code = textwrap.dedent("""
        import os, signal, sys
        from efold.registry.journal import JournalWriter
        from efold.registry.lease import acquire_lease
        lease = acquire_lease(sys.argv[1])
        writer = JournalWriter(sys.argv[1], lease)
        writer.record_hold(permit_id="p-kill", epoch=1, slot="s", request_id="r", round=1,
                           payload_digest="d" * 64, hold_units=7)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", code, str(run_dir)], capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    reader_code = textwrap.dedent("""
        import sys
        from efold.registry.journal import JournalReader
        with JournalReader(sys.argv[1]) as reader:
            print(reader.hold("p-kill")["hold_units"])
    """)
    out = subprocess.run([sys.executable, "-c", reader_code, str(run_dir)],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == "7"
    # The next controller (the lease of the dead one is retaken) continues the journal.
    with acquire_lease(run_dir) as lease:
        writer = JournalWriter(run_dir, lease)
        assert writer.record_epoch(current_identity()) == 1
        assert writer.hold("p-kill") is not None
        writer.close()


def test_reader_in_another_process_sees_rows_while_writer_is_open(run_dir: Path) -> None:
    with acquire_lease(run_dir) as lease:
        writer = JournalWriter(run_dir, lease)
        _hold(writer, "p-live", 11)
        code = textwrap.dedent("""
            import sys
            from efold.registry.journal import JournalReader
            with JournalReader(sys.argv[1]) as reader:
                print(reader.hold("p-live")["state"])
        """)
        out = subprocess.run([sys.executable, "-c", code, str(run_dir)],
                             capture_output=True, text=True, check=True).stdout.strip()
        assert out == HOLD_ACTIVE
        writer.record_consumption("p-live", "b" * 64)
        out = subprocess.run([sys.executable, "-c", code, str(run_dir)],
                             capture_output=True, text=True, check=True).stdout.strip()
        assert out == HOLD_CONSUMED
        writer.close()


_COUNTS = textwrap.dedent("""
    import sys
    from efold.registry.journal import JournalReader
    with JournalReader(sys.argv[1]) as reader:
        print(len(reader.rows("receipts")), len(reader.rows("slot_status")))
""")


def _committed_counts(run_dir: Path) -> str:
    """'<receipts> <slot statuses>' as another process reads them: committed rows only."""
    return subprocess.run([sys.executable, "-c", _COUNTS, str(run_dir)],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_a_batch_commits_its_records_together_or_not_at_all(run_dir: Path) -> None:
    """Inside ``batched`` no record is visible to another reader before the block ends;
    at its end all are, in one commit; an error inside leaves none of them."""
    def seen() -> str:
        return _committed_counts(run_dir)

    with acquire_lease(run_dir) as lease:
        writer = JournalWriter(run_dir, lease)
        with writer.batched():
            writer.record_receipt("s1", "r" * 64, b"{}")
            assert seen() == "0 0"  # not yet committed
            writer.record_slot_status("s1", "completed")
        assert seen() == "1 1"
        with pytest.raises(RegistryError) as info, writer.batched():
            writer.record_slot_status("s2", "completed")
            writer.record_receipt("s1", "q" * 64, b"{}")  # a second receipt: refused
        assert info.value.code is Code.RECEIPT_DUPLICATE
        assert seen() == "1 1"  # s2's status rolled back with it
        with pytest.raises(RuntimeError), writer.batched(), writer.batched():
            pass
        # an error the block catches and goes on from still commits nothing
        with pytest.raises(RegistryError) as info, writer.batched():
            writer.record_slot_status("s4", "completed")
            with pytest.raises(RegistryError):
                writer.record_receipt("s1", "q" * 64, b"{}")
        assert info.value.code is Code.JOURNAL_WRITE_FAILED
        assert seen() == "1 1"
        writer.record_slot_status("s3", "completed")  # the writer still commits alone
        assert seen() == "1 2"
        writer.close()


def test_deferred_rows_ride_with_the_next_commit(run_dir: Path) -> None:
    """Inside ``deferred`` a record is written but not committed: the writer reads it at
    once, another reader only once a later record (or ``commit_pending``, or ``close``)
    commits; a deferred record that breaks a rule is undone alone, and the rows deferred
    before it still wait; a batch's commit carries them too."""
    def seen() -> str:
        return _committed_counts(run_dir)

    with acquire_lease(run_dir) as lease:
        writer = JournalWriter(run_dir, lease)
        assert not writer.pending
        with writer.deferred():
            writer.record_slot_status("s1", "completed")
        assert writer.pending and len(writer.rows("slot_status")) == 1
        assert seen() == "0 0"
        writer.record_receipt("s1", "r" * 64, b"{}")  # its commit carries s1's status
        assert not writer.pending and seen() == "1 1"
        with writer.deferred():
            writer.record_slot_status("s2", "completed")
            with pytest.raises(RegistryError) as info:
                writer.record_receipt("s1", "q" * 64, b"{}")  # a second receipt: refused
            assert info.value.code is Code.RECEIPT_DUPLICATE
        assert writer.pending and seen() == "1 1"
        with pytest.raises(RegistryError), writer.batched():
            writer.record_receipt("s1", "q" * 64, b"{}")  # a failed batch keeps what waits
        assert writer.pending
        with writer.batched():
            writer.record_receipt("s2", "r" * 64, b"{}")
        assert not writer.pending and seen() == "2 2"
        with pytest.raises(RuntimeError), writer.deferred(), writer.deferred():
            pass
        writer.commit_pending()  # nothing waits: no transaction, nothing changes
        assert not writer.pending
        with writer.deferred():
            writer.record_slot_status("s3", "completed")
        writer.close()  # commits what waits
        writer.close()  # again: nothing
        assert seen() == "2 3"


def test_a_crash_loses_the_deferred_rows_and_only_them(run_dir: Path) -> None:
    """A writer killed (os._exit, as by SIGKILL: nothing runs on the way out) after a
    committed row and a deferred one: the journal holds the first, never the second,
    and stays readable and writable."""
    code = textwrap.dedent("""
        import os, sys
        from efold.registry.journal import JournalWriter
        from efold.registry.lease import acquire_lease
        lease = acquire_lease(sys.argv[1])
        writer = JournalWriter(sys.argv[1], lease)
        writer.record_slot_status("kept", "completed")
        with writer.deferred():
            writer.record_slot_status("lost", "completed")
        os._exit(0)
    """)
    subprocess.run([sys.executable, "-c", code, str(run_dir)], check=True)
    with JournalReader(run_dir) as reader:
        assert [r["slot"] for r in reader.rows("slot_status")] == ["kept"]
    with acquire_lease(run_dir) as lease:
        writer = JournalWriter(run_dir, lease)
        writer.record_slot_status("after", "completed")
        assert [r["slot"] for r in writer.rows("slot_status")] == ["after", "kept"]
        writer.close()


def test_a_settlement_above_its_hold_is_never_deferred(
        run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside ``deferred`` a settlement waits for the next commit only while a crash
    before it over-counts (the hold then reads retained at its full amount); one that
    charges more than its hold (an integrity settlement's partial cost) commits at once.
    And what would silently commit nothing inside ``deferred`` refuses."""
    with acquire_lease(run_dir) as lease:
        writer = JournalWriter(run_dir, lease)
        _hold(writer, "p1", 100)
        _hold(writer, "p2", 100)
        with writer.deferred():
            writer.record_settlement(permit_id="p1", state=HOLD_SETTLED, outcome="settled",
                                     code=None, settled_units=60, partial_units=None,
                                     usage={"input": 1}, tier=None)
        assert writer.pending
        with JournalReader(run_dir) as reader:  # another connection: committed rows only
            assert [r["state"] for r in reader.rows("holds")] == [HOLD_ACTIVE, HOLD_ACTIVE]
        syncs = _Syncs(monkeypatch)
        with writer.deferred():
            writer.record_settlement(permit_id="p2", state=HOLD_LOST, outcome="integrity_stop",
                                     code="lookup_cost_exceeds_hold", settled_units=None,
                                     partial_units=150, usage={"input": 1}, tier=None)
            with pytest.raises(RuntimeError):
                writer.commit_pending()
            with pytest.raises(RuntimeError), writer.batched():
                pass
        assert not writer.pending  # committed at once, with p1's
        assert syncs.files == [_wal(run_dir)]  # and synced at once
        assert writer.synced == writer.written
        with JournalReader(run_dir) as reader:
            assert [r["state"] for r in reader.rows("holds")] == [HOLD_SETTLED, HOLD_LOST]
        writer.close()


_CREATE_FOREVER = textwrap.dedent("""
    import os, sys
    from efold.registry.journal import JournalWriter
    from efold.registry.lease import acquire_lease
    root = sys.argv[1]
    for n in range(100000):
        run = os.path.join(root, f"run{n:05d}")
        os.mkdir(run, 0o700)
        with acquire_lease(run) as lease:
            JournalWriter(run, lease).close()
        if n == 0:
            print("created", flush=True)
""")


def test_a_journal_is_created_complete_or_not_at_all(tmp_path: Path) -> None:
    """A controller killed while its journal is created leaves it complete or absent,
    never a file without its schema (which ``recover`` and ``reap`` would refuse for
    good as ``journal_invalid``). Real kills at random moments of a creation loop."""
    for attempt in range(8):
        root = tmp_path / f"root{attempt}"
        root.mkdir()
        child = subprocess.Popen([sys.executable, "-c", _CREATE_FOREVER, str(root)],
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None and child.stdout.readline() == "created\n"
        time.sleep(random.uniform(0.05, 0.3))
        child.kill()
        child.wait()
        runs = sorted(root.iterdir())
        assert len(runs) > 1
        for run in runs:
            if not (run / JOURNAL_NAME).exists():
                assert run == runs[-1]  # only the creation the kill cut short
                continue
            with JournalReader(run) as reader:
                assert reader.rows("meta") == [
                    {"key": "schema_version", "value": str(SCHEMA_VERSION)}]


def test_a_stray_creation_file_refuses_a_second_creation(run_dir: Path) -> None:
    (run_dir / CREATING_NAME).write_bytes(b"")
    with acquire_lease(run_dir) as lease:
        assert _code_of(lambda: JournalWriter(run_dir, lease)) == Code.JOURNAL_INVALID
    assert not (run_dir / JOURNAL_NAME).exists()
