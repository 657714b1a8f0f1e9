"""The run journal: the controller's durable memory of one run.

SQLite in WAL mode at ``<run>/journal.sqlite``. Each ``record_*`` method is one committed
transaction: when it returns, the row is on disk (the writer fdatasyncs the WAL after the
commit, as ``synchronous=FULL`` would), so a caller may then send the acknowledgement
that depends on it (holds and consumption are persisted *before* the permit or
``Consumed`` is sent; containment members before the first signal). Three exceptions: a
``record_*`` inside ``JournalWriter.batched`` is on disk when the block ends, with every
other row of the block; one inside ``JournalWriter.deferred`` is on disk with the
writer's next commit (whatever record makes it, or ``commit_pending``), for rows nothing
acts on before then; one inside ``JournalWriter.unsynced`` is committed (every reader
sees it, and a crash of the controller's process keeps it) but on disk only once its
WAL is synced, which the caller awaits before it acts on the row
(``controller.processes.durable``): the controller serves other children meanwhile.

Invariant: only the holder of the run lease writes (``JournalWriter`` demands a held
lease at open). Every other process, children included, opens ``JournalReader``
(read-only, creating no file: see ``journal_file._reader_uri``) to confirm what was
persisted.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

from efold.digests import digest_of
from efold.errors import Code
from efold.identity import ProcessIdentity
from efold.registry.errors import RegistryError
from efold.registry.journal_file import CREATING_NAME as CREATING_NAME
from efold.registry.journal_file import JOURNAL_NAME as JOURNAL_NAME
from efold.registry.journal_file import READABLE_VERSIONS, closed_on_error, connect
from efold.registry.journal_file import SCHEMA_VERSION as SCHEMA_VERSION
from efold.registry.journal_file import journal_path as journal_path

# Hold states. Invariant: a hold leaves `active`/`consumed` exactly once.
HOLD_ACTIVE = "active"
HOLD_CONSUMED = "consumed"
HOLD_SETTLED = "settled"
HOLD_LOST = "lost"
HOLD_INTEGRITY = "integrity_stop"


class LeaseLike(Protocol):
    def assert_held(self) -> None: ...


def _now() -> int:
    return time.time_ns()


class JournalReader:
    """Read-only view; safe from any process while the writer is live."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self._conn = connect(run_dir, writer=False)
        with closed_on_error(self._conn):
            self._check_version()

    def _check_version(self) -> None:
        row = self._conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is None or int(row[0]) not in READABLE_VERSIONS:
            raise RegistryError(Code.JOURNAL_INVALID, "unknown journal schema version")

    def meta(self, key: str) -> str | None:
        """A value of the ``meta`` table (``containment``, ``run_cgroup``...), or None."""
        try:
            row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        except sqlite3.Error as exc:
            raise RegistryError(Code.JOURNAL_INVALID, str(exc)) from exc
        return None if row is None else str(row[0])

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> JournalReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def rows(self, table: str, where: str = "", params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        if table not in _TABLES:
            raise ValueError(table)
        sql = f"SELECT * FROM {table}" + (f" WHERE {where}" if where else "")
        sql += f" ORDER BY {_ORDER[table]}"
        try:
            return [dict(r) for r in self._conn.execute(sql, params)]
        except sqlite3.Error as exc:
            raise RegistryError(Code.JOURNAL_INVALID, str(exc)) from exc

    def size(self) -> int:
        """Rows in every table: once a run's controller has ended, its journal only
        grows (``reap`` adds an epoch and its containments), so of two readings of one
        run the larger is the newer."""
        try:
            return sum(self._conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                       for table in sorted(_TABLES))
        except sqlite3.Error as exc:
            raise RegistryError(Code.JOURNAL_INVALID, str(exc)) from exc

    def digest(self) -> str:
        """The sha256 of every row of every table, in order (canonical JSON): two
        readings of a journal with the same rows have the same digest."""
        return digest_of([[table, self.rows(table)] for table in sorted(_TABLES)])

    def hold(self, permit_id: str) -> dict[str, Any] | None:
        found = self.rows("holds", "permit_id = ?", (permit_id,))
        return found[0] if found else None

    def sticky_stop(self) -> str | None:
        """The code of the first sticky stop, with unreconciled containment outranking
        every other cause."""
        stops = self.rows("stops", "sticky = 1")
        codes = [s["code"] for s in stops]
        if Code.UNRECONCILED_CONTAINMENT.value in codes:
            return Code.UNRECONCILED_CONTAINMENT.value
        return codes[0] if codes else None


_TABLES = {
    "meta", "epochs", "launches", "containments", "members", "signals", "holds",
    "stops", "slot_status", "receipts", "assignments",
}
_ORDER = {
    "meta": "key", "epochs": "epoch", "launches": "launch_id",
    "containments": "containment_id", "members": "member_id", "signals": "signal_id",
    "holds": "admitted_ns, permit_id", "stops": "stop_id", "slot_status": "slot",
    "receipts": "slot", "assignments": "slot",
}


class JournalWriter(JournalReader):
    """The single writer. Every ``record_*`` commits and syncs before returning, except
    inside ``batched``, whose end commits them all at once, inside ``deferred``, whose
    rows ride with the next commit, and inside ``unsynced``, whose commits wait for a
    later sync; a failed commit or sync raises and is never retried."""

    def __init__(self, run_dir: str | os.PathLike[str], lease: LeaseLike) -> None:
        lease.assert_held()
        self._lease = lease
        # Inside ``batched``: every record joins its one transaction (one commit);
        # ``_batch_failed``: a record inside it failed, so the block must not commit.
        self._batching = False
        self._batch_failed = False
        # Inside ``deferred``: records join the open transaction and leave it open.
        # Invariant: the connection is in a transaction between commits only while it
        # holds deferred rows (``pending``); every commit takes them with it.
        self._deferring = False
        # Durability. SQLite commits without syncing (``synchronous=NORMAL``: it still
        # syncs the WAL before each checkpoint, and the database after); the writer
        # fdatasyncs the WAL itself after each commit (``sync``), which is what
        # ``synchronous=FULL`` does, except for the commits of an ``unsynced`` block:
        # those are synced by whoever awaits them (``sync``, or off the event loop by
        # ``controller.processes.durable``), one fdatasync covering every commit made
        # before it started. Invariant: ``synced <= written``, and every commit up to
        # ``synced`` is on disk. ``_sync_error``: a failed sync; the journal's state on
        # disk is then unknown, so every later commit and sync refuses.
        self._unsynced = False
        self._written = 0  # commits made
        self._synced = 0  # commits known on disk
        self._sync_error: str | None = None
        self._sync_now = False  # a record of the open batch must be synced at its commit
        self._wal_fd: int | None = None
        self._run_dir = os.fspath(run_dir)
        self._conn = connect(run_dir, writer=True)
        with closed_on_error(self._conn):
            mode = self._conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise RegistryError(Code.JOURNAL_INVALID, "journal is not in WAL mode")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._check_version()

    @contextmanager
    def batched(self) -> Iterator[None]:
        """One transaction, one commit, for every ``record_*`` called inside: for records
        that order nothing among themselves (nothing is sent, signalled or published
        between them). All of them are on disk when the block ends, or none is: an error
        inside rolls every one back, even one the block caught and went on from (the
        block then ends in ``journal_write_failed``). Not reentrant."""
        if self._batching:
            raise RuntimeError("batched() does not nest")
        if self._deferring:
            raise RuntimeError("batched() inside deferred() would commit nothing")
        with self._transaction():
            self._batching, self._batch_failed = True, False
            try:
                yield
            finally:
                self._batching = False
            if self._batch_failed:
                raise RegistryError(Code.JOURNAL_WRITE_FAILED,
                                    "a record inside the batch failed; none is committed")

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Every ``record_*`` called inside is written at once (a constraint it breaks
        raises here, and only its own row is undone) but not committed: it reaches the
        disk with the writer's next commit, by whatever record, or ``commit_pending``.
        For rows that nothing sent, signalled or published waits on, and that every
        later durable row may carry (an exit row, a settlement: see docs/architecture.md).
        A crash before that commit loses them, and only them. Readers through this
        connection see them at once; other connections at the commit.

        Invariant: no ``await`` inside the block (``tests/test_layers.py`` checks every
        use): the flag is the writer's, so another task's record written meanwhile (a
        hold, which must be on disk before its ``Granted``) would be deferred too."""
        if self._deferring:
            raise RuntimeError("deferred() does not nest")
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False

    @contextmanager
    def unsynced(self) -> Iterator[None]:
        """Every commit inside is made (readers see it; a crash of this process keeps it,
        the page cache holds it) but not synced: ``written`` moves past ``synced`` until
        a sync covers it. For a row the caller acts on only after awaiting its sync
        (``controller.processes.durable``), so that the controller serves other children
        while the disk syncs: a power loss before the sync loses the row and nothing
        that acted on it. A stop is synced at once wherever it is recorded, and a block
        that raises syncs before the exception goes on (what it recorded may be what a
        violation's refusal relies on).

        Invariant: no ``await`` inside the block (``tests/test_layers.py``): the flag is
        the writer's, so another task's record written meanwhile would go unsynced too."""
        if self._unsynced:
            raise RuntimeError("unsynced() does not nest")
        self._unsynced = True
        try:
            yield
        except BaseException:
            self._unsynced = False
            self.sync()
            raise
        finally:
            self._unsynced = False

    @property
    def written(self) -> int:
        """Commits made so far."""
        return self._written

    @property
    def synced(self) -> int:
        """Commits known on disk (``<= written``)."""
        return self._synced

    def sync(self) -> None:
        """Every commit made so far on disk, now (nothing to do when none waits)."""
        if self._synced < self._written:
            self.sync_up_to(self._written, self.wal_descriptor())

    def wal_descriptor(self) -> int:
        """A descriptor of the journal's WAL, opened at the first sync (the WAL exists
        from the first commit, and a writer's own connection keeps it in place), after
        which the run directory is fsynced once: the WAL's name is as durable as its
        contents, as SQLite's own first sync of it would make it."""
        self._usable()
        if self._wal_fd is None:
            try:
                fd = os.open(os.path.join(self._run_dir, JOURNAL_NAME + "-wal"),
                             os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
                try:
                    dir_fd = os.open(self._run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                    try:
                        os.fsync(dir_fd)
                    finally:
                        os.close(dir_fd)
                except BaseException:
                    os.close(fd)
                    raise
            except OSError as exc:
                raise self._failed(exc) from exc
            self._wal_fd = fd
        return self._wal_fd

    def sync_up_to(self, upto: int, wal_fd: int) -> None:
        """Make every commit up to ``upto`` (``written`` before the call) durable."""
        self.flush_wal(wal_fd)
        self.note_synced(upto)

    def flush_wal(self, wal_fd: int) -> None:
        """fdatasync the WAL (``wal_fd``, from ``wal_descriptor``): every commit made
        before the call is then durable. It reads and changes no writer state but the
        failure it records, so it may run in another thread while this one commits
        more; the caller notes what it covered (``note_synced``) once it returns."""
        try:
            os.fdatasync(wal_fd)
        except OSError as exc:
            raise self._failed(exc) from exc

    def note_synced(self, upto: int) -> None:
        """Every commit up to ``upto`` is on disk (a flush that began after it ended)."""
        self._synced = max(self._synced, upto)

    def _failed(self, exc: OSError) -> RegistryError:
        self._sync_error = f"the journal's sync failed: {exc.strerror or type(exc).__name__}"
        return RegistryError(Code.JOURNAL_WRITE_FAILED, self._sync_error)

    def _usable(self) -> None:
        if self._sync_error is not None:
            raise RegistryError(Code.JOURNAL_WRITE_FAILED, self._sync_error)

    def _committed(self, *, now: bool = False) -> None:
        """A commit was made: synced at once, unless inside ``unsynced`` (and neither it
        nor a record of its batch asked for ``now``)."""
        self._written += 1
        now, self._sync_now = now or self._sync_now, False
        if now or not self._unsynced:
            self.sync()

    @property
    def pending(self) -> bool:
        """Whether deferred rows wait for the next commit."""
        return self._conn.in_transaction and not self._batching

    def commit_pending(self) -> None:
        """Commit the deferred rows now, if any (one fdatasync; none if nothing waits)."""
        if self._deferring:
            raise RuntimeError("commit_pending() inside deferred() would commit nothing")
        if self.pending:
            with self._transaction():
                pass

    def close(self) -> None:
        """Commit what is deferred, then close (again: nothing). A failed commit is not
        raised here (the run is ending; its rows are ones a crash could lose too)."""
        try:
            self.commit_pending()
            self.sync()
        except (RegistryError, sqlite3.ProgrammingError):  # the latter: closed already
            pass
        finally:
            if self._wal_fd is not None:
                fd, self._wal_fd = self._wal_fd, None
                os.close(fd)
            super().close()

    @contextmanager
    def _transaction(self, *, now: bool = False) -> Iterator[sqlite3.Connection]:
        # Invariant: only the lease holder writes, at every write and not just at open:
        # a controller that released (or lost) its lease must not append anything.
        self._lease.assert_held()
        self._usable()
        conn = self._conn
        if self._batching:  # the enclosing batch commits (or rolls back) for us
            self._sync_now = self._sync_now or now
            try:
                yield conn
            except sqlite3.Error as exc:  # mapped as below; the batch rolls back
                self._batch_failed = True
                raise RegistryError(Code.JOURNAL_WRITE_FAILED, type(exc).__name__) from exc
            except BaseException:
                self._batch_failed = True
                raise
            return
        try:
            if conn.in_transaction:  # deferred rows wait in it: undo only this record's
                conn.execute("SAVEPOINT record")
                try:
                    yield conn
                except BaseException:
                    conn.execute("ROLLBACK TO record")
                    conn.execute("RELEASE record")
                    raise
                conn.execute("RELEASE record")
            else:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            if not self._deferring:
                conn.execute("COMMIT")
                self._committed(now=now)
        except sqlite3.Error as exc:
            # Mapped once, here. Never retried: a failed commit (an fsync error among
            # them) leaves the journal's state unknown, and the caller must stop.
            raise RegistryError(Code.JOURNAL_WRITE_FAILED, type(exc).__name__) from exc

    def _insert(self, table: str, values: Mapping[str, Any], *, now: bool = False) -> int:
        cols = ", ".join(values)
        marks = ", ".join("?" for _ in values)
        with self._transaction(now=now) as c:
            cur = c.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})", tuple(values.values()))
        return int(cur.lastrowid or 0)

    # -- epochs and processes ------------------------------------------------------

    def record_epoch(self, identity: ProcessIdentity) -> int:
        """Start a new controller epoch (one more than the last); returns it."""
        with self._transaction() as c:
            row = c.execute("SELECT COALESCE(MAX(epoch), 0) FROM epochs").fetchone()
            epoch = int(row[0]) + 1
            c.execute(
                "INSERT INTO epochs VALUES (?, ?, ?, ?, ?)",
                (epoch, identity.pid, identity.start_time, identity.boot_id, _now()),
            )
        return epoch

    def record_launch(
        self, *, epoch: int, slot: str, kind: str, identity: ProcessIdentity, pgid: int,
        marker: str | None = None, cgroup: str | None = None,
    ) -> int:
        values: dict[str, Any] = {
            "epoch": epoch, "slot": slot, "kind": kind, "pid": identity.pid,
            "start_time": identity.start_time, "boot_id": identity.boot_id, "pgid": pgid,
            "launched_ns": _now(), "marker": marker,
        }
        if cgroup is not None:  # a version-2 journal has no such column, and no cgroups
            values["cgroup"] = cgroup
        return self._insert("launches", values)

    def record_meta(self, values: Mapping[str, str]) -> None:
        """Set ``meta`` values, all in one transaction (``containment`` with its
        ``run_cgroup``: a crash never leaves one without the other), each once: a second
        value for a key is refused (``journal_write_failed``), never overwritten."""
        with self._transaction() as c:
            for key, value in values.items():
                c.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (key, value))

    def record_exit(self, launch_id: int, exit_status: int | None) -> None:
        with self._transaction() as c:
            c.execute(
                "UPDATE launches SET exited_ns = ?, exit_status = ? WHERE launch_id = ?",
                (_now(), exit_status, launch_id),
            )

    def record_containment_start(self, launch_id: int, cause: str) -> int:
        return self._insert("containments", {
            "launch_id": launch_id, "cause": cause, "started_ns": _now(),
        })

    def record_containment_end(self, containment_id: int, result: str) -> None:
        with self._transaction() as c:
            c.execute(
                "UPDATE containments SET finished_ns = ?, result = ? WHERE containment_id = ?",
                (_now(), result, containment_id),
            )

    def record_members(
        self,
        *,
        launch_id: int,
        containment_id: int | None,
        members: list[tuple[ProcessIdentity, int, str]],
    ) -> list[int]:
        """Persist (identity, pgid, role) members in one transaction; returns their ids."""
        ids: list[int] = []
        now = _now()
        with self._transaction() as c:
            for identity, pgid, role in members:
                cur = c.execute(
                    "INSERT INTO members (containment_id, launch_id, pid, start_time, boot_id,"
                    " pgid, role, recorded_ns) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (containment_id, launch_id, identity.pid, identity.start_time,
                     identity.boot_id, pgid, role, now),
                )
                ids.append(int(cur.lastrowid or 0))
        return ids

    def record_signal(
        self, *, launch_id: int, containment_id: int | None, pid: int, signal: int, via: str
    ) -> None:
        self._insert("signals", {
            "containment_id": containment_id, "launch_id": launch_id, "pid": pid,
            "signal": signal, "via": via, "sent_ns": _now(),
        })

    # -- money ---------------------------------------------------------------------

    def record_hold(
        self, *, permit_id: str, epoch: int, slot: str, request_id: str, round: int,
        payload_digest: str, hold_units: int,
    ) -> None:
        self._insert("holds", {
            "permit_id": permit_id, "epoch": epoch, "slot": slot, "request_id": request_id,
            "round": round, "payload_digest": payload_digest, "hold_units": hold_units,
            "state": HOLD_ACTIVE, "admitted_ns": _now(),
        })

    def record_consumption(self, permit_id: str, body_digest: str) -> None:
        with self._transaction() as c:
            cur = c.execute(
                "UPDATE holds SET state = ?, body_digest = ?, consumed_ns = ?"
                " WHERE permit_id = ? AND state = ?",
                (HOLD_CONSUMED, body_digest, _now(), permit_id, HOLD_ACTIVE),
            )
            if cur.rowcount != 1:
                raise RegistryError(Code.JOURNAL_INVALID, "consumption of a non-active hold")

    def record_settlement(
        self, *, permit_id: str, state: str, outcome: str, code: str | None,
        settled_units: int | None, partial_units: int | None,
        usage: Mapping[str, int] | None, tier: str | None,
    ) -> None:
        if state not in (HOLD_SETTLED, HOLD_LOST, HOLD_INTEGRITY):
            raise ValueError(state)
        with self._transaction() as c:
            cur = c.execute(
                "UPDATE holds SET state = ?, outcome = ?, code = ?, settled_units = ?,"
                " partial_units = ?, usage = ?, tier = ?, settled_ns = ?"
                " WHERE permit_id = ? AND state IN (?, ?)",
                (state, outcome, code, settled_units, partial_units,
                 json.dumps(dict(usage), sort_keys=True) if usage is not None else None,
                 tier, _now(), permit_id, HOLD_ACTIVE, HOLD_CONSUMED),
            )
            if cur.rowcount != 1:
                raise RegistryError(Code.JOURNAL_INVALID, "settlement of a closed hold")
            (hold,) = c.execute("SELECT hold_units FROM holds WHERE permit_id = ?",
                                (permit_id,)).fetchone()
        # Deferred only while a crash before the next commit over-counts it: the hold
        # then reads retained at its full amount. One that charges more than its hold
        # (an integrity settlement's partial cost) is committed at once, deferred or not.
        if self._deferring and not self._batching \
                and max(settled_units or 0, partial_units or 0) > int(hold):
            self._commit_now()

    def _commit_now(self) -> None:
        try:
            self._conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise RegistryError(Code.JOURNAL_WRITE_FAILED, type(exc).__name__) from exc
        self._committed(now=True)

    # -- run status ----------------------------------------------------------------

    def record_stop(self, *, epoch: int, code: str, slot: str | None, sticky: bool) -> None:
        # Synced at once, inside ``unsynced`` too: admission refuses from now on.
        self._insert("stops", {
            "epoch": epoch, "code": code, "slot": slot, "sticky": int(sticky),
            "recorded_ns": _now(),
        }, now=True)

    def record_slot_status(self, slot: str, status: str, code: str | None = None) -> None:
        with self._transaction() as c:
            c.execute(
                "INSERT INTO slot_status VALUES (?, ?, ?, ?) ON CONFLICT(slot) DO UPDATE"
                " SET status = excluded.status, code = excluded.code,"
                " updated_ns = excluded.updated_ns",
                (slot, status, code, _now()),
            )

    def record_assignment(self, slot: str, *, kind: str, snapshot_digest: str,
                          cache_key: str | None = None, isolation: str | None = None) -> None:
        """Once per slot (or checkpoint); a reused cache key refuses (UNIQUE).
        ``isolation``: a checkpoint's fold isolation as its prep child reported it."""
        values: dict[str, Any] = {
            "slot": slot, "kind": kind, "cache_key": cache_key,
            "snapshot_digest": snapshot_digest, "recorded_ns": _now(),
        }
        if isolation is not None:  # a version-2 journal has no such column
            values["isolation"] = isolation
        self._insert("assignments", values)

    def record_receipt(self, slot: str, digest: str, body: bytes) -> None:
        """A slot's receipt, once: its ``digest`` (the sha256 of ``body``) and its bytes.
        A second receipt for a slot is refused."""
        try:
            self._insert("receipts", {"slot": slot, "digest": digest, "recorded_ns": _now(),
                                      "body": body})
        except RegistryError as exc:
            if isinstance(exc.__cause__, sqlite3.IntegrityError):
                raise RegistryError(Code.RECEIPT_DUPLICATE, slot) from exc
            raise
